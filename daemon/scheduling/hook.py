"""The host's queue as a supervisor tick hook (issue 31): each tick it reads the jobs' signals and the GPU snapshot,
asks the pure scheduler (scheduler.py) what to do, and returns the answers as commands for the jobs' state machines
(`Placed`, `Preempt`, `DropSpare`), as the watchdog engine returns its trips. It acts on nothing itself: the machine
decides each job's part and saves it before the runner acts, so a supervisor killed mid-preemption finds the stop
on disk and finishes it.

Each job the queue places comes with its queue entry (`JobSignals.queue`, jobs/queue_entry.py), which is the
scheduler's input as it is: the hook adds only the owner's quota groups of this pass. At publish it adds each waiting
job's place and reason to its status row (`job_status`), from the last pass.

Run-time estimates (issue 42, estimates.py): each tick the hook hands the jobs' signals (their new TensorBoard
points) to `Estimates`, adds each entry's estimate (`ends_at`, `run_seconds`, `overran`), and keeps the history of
completed runs in state_dir/estimates.json (estimate_store.py). It writes an `estimate_error` event when a job
completes (how long each of its first estimates said against how long it took) and an `estimate_overran` event when
a job that started ahead of a reservation on its estimate still runs at that reservation. A reservation's time and
a placed job's expected end are deadlines of the reused pass, like a minimum run time (`Schedule.valid_until`).

Quotas (issue 32) come from the `[access]` in force (a reload changes them): it is an extension too, handed the
running supervisor's view at start, and reads `running.config` each tick (owners.py: each owner's limits and groups).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from ..clock import WALL_MINUS_MONO_SLACK
from ..config.access import AccessConfig
from ..config.queue import QueueConfig
from ..config.schema import Config
from ..daemon_log import log
from ..gpu.assign import job_gpus
from ..gpu.snapshot import GpuSnapshot
from ..jobs.messages import Command, DropSpare, Placed, Preempt
from ..jobs.model import JobState
from ..jobs.queue_entry import QueueEntry
from ..status.signals import JobSignals
from ..status.types import JobStatus
from .estimate_store import EstimateStore
from .estimates import HELD, Ended, Estimates, Past, error_ratio
from .owners import Owners
from .room import no_place, pinned_places, places
from .scheduler import Gpu, Limits, PinnedJob, Schedule, Waiting, schedule, stable_until

SPARE_HOLD_SECONDS = 120.0  # a spare dropped for a waiting job stays off this long after the last pass needing it


class InForce(Protocol):
    """The running supervisor as an extension sees it (supervisor.Running): the config in force."""

    config: Config


class HostQueue:
    """Places the jobs that ask for GPUs; one per supervisor, ticked on its main thread."""

    def __init__(self, cfg: QueueConfig, gpu_snapshot: Callable[[], GpuSnapshot] | None,
                 access: AccessConfig = AccessConfig(), admin_group: str | None = None, owners: Owners | None = None):
        self._cfg = cfg  # until started: the config it was built with; then the [queue] in force (a reload changes it)
        self.gpu_snapshot = gpu_snapshot
        self.waiting: dict[str, Waiting] = {}  # the last pass's answer for each waiting job
        self.access, self.admin_group = access, admin_group  # until started: the config it was built with
        self.owners = owners or Owners()
        self._running: InForce | None = None
        # the last pass: its inputs, until when they give the same answer (scheduler.stable_until), the answer
        self._last_pass: tuple[tuple[object, ...], float, Schedule] | None = None
        self._shown: dict[str, tuple[JobStatus, Waiting, JobStatus]] = {}  # a queued job's row in, its place, out
        self.estimates = Estimates()
        self.store = EstimateStore(None)  # in memory until started: then state_dir/estimates.json
        self._event: Callable[..., object] | None = None  # StateStore.append_event, once started
        self.deadlines: dict[str, float] = {}  # a job started ahead on its estimate -> its reservation's time
        self._decorated: dict[str, tuple[JobStatus, tuple[object, ...], JobStatus]] = {}  # a row's estimate, cached
        self._with_estimate: dict[str, tuple[QueueEntry, tuple[object, ...], QueueEntry]] = {}  # an entry's, cached
        self._moved: set[str] = set()  # jobs whose place or estimate error changed since the last rows_changed()
        self._rows_wall: float | None = None  # wall - monotonic when the rows' wall-clock times were last made

    @property
    def cfg(self) -> QueueConfig:
        return self._running.config.queue if self._running is not None else self._cfg

    def start(self, running: InForce) -> None:
        self._running = running
        state_dir = running.config.supervisor.state_dir
        self.store = EstimateStore(state_dir)
        from ..history.store import StateStore  # here: the pure parts of this module import nothing of the disk
        self._event = StateStore(state_dir).append_event

    def stop(self) -> None:
        self._running = None

    def tick(self, now: float, signals: Sequence[JobSignals]) -> list[tuple[str, Command]]:
        for done in self.estimates.observe(now, time.time() - time.monotonic(), signals, self.store.runs):
            self._ended(done)
        if len(self._decorated) > len(self.estimates.jobs):  # a job gone: its row's estimate goes too
            self._decorated = {k: v for k, v in self._decorated.items() if k in self.estimates.jobs}
        if len(self._with_estimate) > len(self.estimates.jobs):
            self._with_estimate = {k: v for k, v in self._with_estimate.items() if k in self.estimates.jobs}
        if any(k not in self.estimates.jobs for k in self.deadlines):  # a job removed before its reservation
            self.deadlines = {k: v for k, v in self.deadlines.items() if k in self.estimates.jobs}
        placed = [self._estimated(s.queue, now) for s in signals if s.queue is not None]
        if not placed:
            self._set_waiting({})
            return []
        snap = self.gpu_snapshot() if self.gpu_snapshot is not None else None
        gpus = self.gpus(snap)
        if not gpus:
            why = ("no GPU inventory: the GPU collector is down or sees no GPU ([gpu] source); nothing is placed "
                   "until it is back" if snap is None or not snap.up else no_place(snap))
            self._set_waiting({e.name: Waiting(e.name, i + 1, why)
                               for i, e in enumerate(e for e in placed if e.waiting)})
            return []
        access, admin_group = self.access, self.admin_group
        if self._running is not None:
            access, admin_group = self._running.config.access, self._running.config.supervisor.admin_group
        quotas, groups = self.owners.quotas((e.owner for e in placed), access, admin_group, now)
        jobs = [_with_groups(e, groups) for e in placed]
        pinned = [PinnedJob(s.name, pinned_places(claim.keys, claim.physical_indices))
                  for s in signals if s.queue is None and not s.state.at_rest
                  for claim in (job_gpus(s.cfg, snap),)]
        limits = Limits(self.cfg.min_run_seconds)
        inputs = (jobs, gpus, pinned, quotas, limits)
        last = self._last_pass
        last_pass_answer = last[2] if last is not None else None
        if last is not None and last[0] == inputs and now < last[1]:
            decided = last[2]  # the same inputs, no deadline passed: the same answer (schedule is pure)
        else:
            decided = schedule(jobs, gpus, now, limits, pinned, quotas)
            self._last_pass = (inputs, min(stable_until(jobs, now, limits), decided.valid_until), decided)
        if decided.placements or decided.preemptions:
            log.info("queue_pass", placed={p.job: list(p.gpus) for p in decided.placements},
                     preempted={p.victim: p.by for p in decided.preemptions},
                     waiting=[w.job for w in decided.waiting])
        self._set_waiting({w.job: w for w in decided.waiting})
        if decided is not last_pass_answer:  # a new pass: a job gone from the queue leaves no entry behind; the others
            # keep theirs while their place and reason are the same (issue 39: one submit remade 1,000 rows)
            self._shown = {k: v for k, v in self._shown.items() if k in self.waiting}
        for p in decided.placements:
            if p.deadline is not None:
                self.deadlines[p.job] = p.deadline
        out: list[tuple[str, Command]] = [(p.job, Placed(p.gpus, p.reason, p.backfill)) for p in decided.placements]
        out += [(p.victim, Preempt(p.by, p.reason)) for p in decided.preemptions]
        out += [(d.job, DropSpare(d.by, d.reason, now + SPARE_HOLD_SECONDS)) for d in decided.spare_drops]
        return out

    def _set_waiting(self, waiting: dict[str, Waiting]) -> None:
        """This pass's places; the jobs whose place or reason differs from the last pass's are noted for the rows."""
        old = self.waiting
        if waiting != old:  # the same pass answer: the same Waiting objects, compared by identity at C speed
            self._moved.update(n for n in old.keys() | waiting.keys()
                               if (a := old.get(n)) is not (b := waiting.get(n)) and a != b)
        self.waiting = waiting

    def rows_changed(self) -> set[str] | None:
        """The jobs whose part of the row (place, reason, estimate, its error) may differ since the last call; None:
        every job's (the wall clock moved against the monotonic one: each row's wall-clock times are made again)."""
        wall = time.time() - time.monotonic()
        moved, self._moved = self._moved | self.estimates.take_changed(), set()
        if self._rows_wall is None or abs(wall - self._rows_wall) > WALL_MINUS_MONO_SLACK:
            self._rows_wall = wall
            return None
        return moved

    # ---- estimates (issue 42) ----------------------------------------------------------------------------------
    def _estimated(self, e: QueueEntry, now: float) -> QueueEntry:
        """The entry with its estimate; a job past the reservation it started ahead of on its estimate overran."""
        deadline = self.deadlines.get(e.name)
        if deadline is not None and (not e.placement or e.waiting):
            del self.deadlines[e.name]  # it ended (or was stopped) in time
        elif deadline is not None and now > deadline:
            del self.deadlines[e.name]
            log.warning("estimate_overran", job=e.name, preemptible=e.preemptible)
            self._emit(e.name, "estimate_overran", preemptible=e.preemptible, seconds_past=round(now - deadline, 1),
                       detail="still running at the reservation it started ahead of on its estimate" +
                       ("" if e.preemptible else ": not started ahead on an estimate again until one holds"))
            if not e.preemptible:
                self.store.overran[e.name] = time.time()
                self.store.save()
        (ends, run), overran = self.estimates.end_and_run(e.name), e.name in self.store.overran
        if (ends, run, overran) == (e.ends_at, e.run_seconds, e.overran):
            return e
        made = self._with_estimate.get(e.name)  # the same entry and estimate as last tick: the same copy
        if made is not None and made[0] is e and made[1] == (ends, run, overran):
            return made[2]
        out = replace(e, ends_at=ends, run_seconds=run, overran=overran)
        self._with_estimate[e.name] = (e, (ends, run, overran), out)
        return out

    def _ended(self, done: Ended) -> None:
        """A job completed: its run into the history; how its estimates fared, as an event each."""
        if done.seconds_per_iteration is not None and done.startup_seconds is not None:
            self.store.runs[done.key] = Past(done.seconds_per_iteration, done.startup_seconds)
            self.estimates.history_changed()
        ratios = {}
        for source, said, took in done.errors:
            ratios[source] = ratio = error_ratio(said, took)
            log.info("estimate_error", job=done.job, source=source, said_seconds=round(said, 1),
                     took_seconds=round(took, 1), ratio=round(ratio, 3))
            self._emit(done.job, "estimate_error", source=source, said_seconds=round(said, 1),
                       took_seconds=round(took, 1), ratio=round(ratio, 3))
        if ratios:
            self.store.errors[done.job] = ratios
            self._moved.add(done.job)
        if "history" in ratios and ratios["history"] <= HELD:
            self.store.overran.pop(done.job, None)  # an estimate that held: it may start ahead on one again
        self.store.save()

    def _emit(self, job: str, event: str, **fields: object) -> None:
        if self._event is None:
            return
        try:
            self._event(job, event, **fields)
        except OSError as e:
            log.warning("event_not_written", job=job, event=event, error=str(e))

    def _estimate_of(self, row: JobStatus) -> JobStatus:
        """The row with its estimate, on the wall clock (the same object while it is the same: rows are compared by
        identity downstream)."""
        q = row.queue
        if q is None:
            return row
        name = row.name
        ends, run = self.estimates.end_and_run(name)
        w = self.waiting.get(name)
        starts = None if w is None else w.starts_at
        errors = self.store.errors.get(name)
        error = None if errors is None else errors.get("history", errors.get("rate"))
        # the clocks read only for a row with a time to show (most of 1,000 queued rows at every publish: none)
        wall = time.time() - time.monotonic() if ends is not None or starts is not None else 0.0
        extra = (None if ends is None else round(ends + wall), run, None if starts is None else round(starts + wall),
                 error)
        if extra == (q.ends_at, q.run_seconds, q.starts_at, q.estimate_error):
            return row
        seen = self._decorated.get(row.name)
        if seen is not None and seen[0] is row and seen[1] == extra:
            return seen[2]
        out = replace(row, queue=replace(q, ends_at=extra[0], run_seconds=extra[1], starts_at=extra[2],
                                         estimate_error=extra[3]))
        self._decorated[row.name] = (row, extra, out)
        return out

    def gpus(self, snap: GpuSnapshot | None) -> list[Gpu]:
        """The places as placement sees them (room.places): the GPUs not in MIG mode and the MIG instances, with
        their total and used memory from NVML, and why one takes no new job (unhealthy by an XID or a watchdog, or
        hot)."""
        return places(snap, self.cfg.hot_celsius)

    def job_status(self, row: JobStatus) -> JobStatus:
        """A waiting job's place in the queue and why it waits, added to its row at publish; any queue row's estimate."""
        row = self._estimate_of(row)
        w = self.waiting.get(row.name)
        seen = self._shown.get(row.name)  # the same row and place as the last publish: the same answer, no copies
        if seen is not None and seen[0] is row and seen[1] is w:
            return seen[2]  # (a row kept here is a queued one's)
        if row.queue is None or w is None:
            return row
        if row.state == JobState.BACKING_OFF.value:  # its place while it backs off; its reason stays the machine's
            return replace(row, queue=replace(row.queue, position=w.position, reason=w.reason))
        if row.state != JobState.QUEUED.value:
            return row
        if seen is not None and (seen[1] is w or seen[1] == w) and (seen[0] is row or seen[0] == row):
            self._shown[row.name] = (row, w, seen[2])  # this pass's place: the check above is by identity again
            return seen[2]
        shown = replace(row, queue=replace(row.queue, position=w.position, reason=w.reason),
                        state_reason=f"queued #{w.position}: {w.reason}")
        self._shown[row.name] = (row, w, shown)
        return shown


def _with_groups(e: QueueEntry, groups: dict[str, tuple[str, ...]]) -> QueueEntry:
    """The entry with its owner's groups that have a quota (looked up for this pass: owners.py)."""
    mine = groups.get(e.owner, ()) if e.owner is not None else ()
    return e if e.groups == mine else replace(e, groups=mine)  # most have none: no copy of every entry each tick
