"""Runs every job's watchdogs once per supervisor tick and turns trips into commands for the jobs.

The engine reads each job's signals (a value the runner hands out, passed in by the supervisor each tick: the
engine never holds the supervisor nor a runner) and the GPU feed, and returns
commands (`WatchdogTrip`, and the thermal watchdog's `Start` once the GPUs cool down) for the job's
state machine, which counts them, bounds rollbacks and acts. It never touches job history. What is
GPU-level, not job-level, stays here: lowering and restoring power limits, marking a GPU unhealthy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from ..gpu.assign import job_gpu_indices
from ..jobs.messages import Command, WatchdogAction, WatchdogTrip
from ..jobs.policy import DEFAULT_MAX_ROLLBACKS
from ..jobs.model import JobState
from ..status.signals import JobSignals
from ..status.types import JobStatus, WatchdogState, WatchdogStatus
from .base import JobView, Trip, Watchdog
from ..config.watchdogs import WatchdogsConfig
from .divergence import DivergenceWatchdog
from .duty_cycle import DutyCycleWatchdog
from .gpufeed import FeedTick
from .gpu_temperature import GpuTemperatureWatchdog, ThermalControl
from .loss_stagnation import LossStagnationWatchdog
from .no_progress import NoProgressWatchdog
from .reward_plateau import RewardPlateauWatchdog
from .xid import XidWatchdog

WATCHDOG_CLASSES = {
    "no_progress": NoProgressWatchdog,
    "duty_cycle": DutyCycleWatchdog,
    "loss_stagnation": LossStagnationWatchdog,
    "reward_plateau": RewardPlateauWatchdog,
    "divergence": DivergenceWatchdog,
    "gpu_temperature": GpuTemperatureWatchdog,
    "xid": XidWatchdog,
}


class GpuFeed(Protocol):
    """What the watchdogs need from the GPU collector; see gpufeed.SamplerFeed."""

    def poll(self) -> FeedTick: ...

    def set_power_limit(self, gpu: int, watts: float) -> None:
        """Raises PermissionError when not allowed (not root, or the driver refuses)."""

    def mark_unhealthy(self, gpu: int, reason: str) -> None: ...


def make_watchdogs(cfg: WatchdogsConfig) -> dict[str, Watchdog]:
    return {name: cls(getattr(cfg, name)) for name, cls in WATCHDOG_CLASSES.items()}


class WatchdogEngine:
    """Wired in at the supervisor's construction (app.build_supervisor): `tick` is a tick hook, `job_status` a
    job status hook, and the engine an extension (its `stop` gives the GPUs their power limits back)."""

    def __init__(self, feed: GpuFeed):
        self.feed = feed
        self.sets: dict[str, tuple[WatchdogsConfig, dict[str, Watchdog]]] = {}
        self.thermal = ThermalControl(feed)  # power caps and the heat park's resume: gpu_temperature.py
        # (job, watchdog) -> (its status, the job's state, the idle status shown): a queued job's watchdogs read the
        # same at every tick, so its idle copies are made once, not at each of 1,000 jobs' publish (issue 39)
        self._idle_shown: dict[tuple[str, str], tuple[WatchdogStatus, str, WatchdogStatus]] = {}
        self._rows: dict[str, tuple[JobStatus, dict[str, WatchdogStatus], JobStatus]] = {}  # row in, statuses, out
        # issue 39, at rest: a job whose watchdogs all wait for a trainer it does not have is stepped once, then left
        # alone while it stays so (`_asleep`: its watchdog set and attempt when it fell asleep); `_moved`: the jobs
        # whose watchdogs were stepped since their row was last made (the others' statuses cannot have changed)
        # (a fourth item, the job's config, when it sleeps because it has no GPU to watch: see `_gpuless`)
        self._asleep: dict[str, tuple[dict[str, Watchdog], int, JobSignals, object]] = {}
        self._known: tuple[tuple[int, str], ...] | None = None  # the GPUs (index, UUID) at the last tick
        self._moved: set[str] = set()
        self._sleepy: dict[int, tuple[dict[str, Watchdog], bool]] = {}
        self._gpus: dict[str, tuple[object, tuple[tuple[int, str], ...], set[int]]] = {}  # job -> cfg, GPUs, indices

    # extension protocol
    def start(self, supervisor: object) -> None:
        pass  # nothing to start: the supervisor calls `tick` from its own

    def stop(self) -> None:
        self.thermal.restore_power_limits("supervisor stopping")

    def _watchdogs(self, sig: JobSignals) -> dict[str, Watchdog]:
        cur = self.sets.get(sig.name)
        if cur is None or cur[0] is not sig.cfg.watchdogs and cur[0] != sig.cfg.watchdogs:
            cur = (sig.cfg.watchdogs, make_watchdogs(sig.cfg.watchdogs))
            self.sets[sig.name] = cur
        return cur[1]

    def view(self, sig: JobSignals, now: float, feed: FeedTick, known: tuple[tuple[int, str], ...] = ()) -> JobView:
        gpus = self._gpu_indices(sig, feed, known or tuple((r.index, r.uuid) for r in feed.readings))
        return JobView(
            name=sig.name, now=now, alive=sig.alive and not sig.waiting,  # waiting for room is no hang
            attempt_started_at=sig.attempt_started_at,
            attempt_first_step=sig.first_step,
            iteration=sig.iteration,
            last_progress_time=sig.last_progress_time,
            new_points=list(sig.new_points),
            gpus=[r for r in feed.readings if r.index in gpus],
            new_xids=[x for x in feed.new_xids if x.gpu in gpus],
            attempt=sig.attempt,
        )

    def tick(self, now: float, jobs: Sequence[JobSignals]) -> list[tuple[str, Command]]:
        """`now` is monotonic, `jobs` every job's signals this tick. Returns the commands for the supervisor to
        hand to each job's state machine."""
        feed = self.feed.poll()
        known = tuple((r.index, r.uuid) for r in feed.readings)
        if known != self._known:  # GPUs came or went: which GPUs each job watches is worked out again
            self._known = known
            self._asleep.clear()
        commands: list[tuple[str, Command]] = []
        for sig in jobs:
            asleep = self._asleep.get(sig.name)
            if asleep is not None and asleep[2] is sig:
                continue  # the very signals it fell asleep with (the runner's, reused): its config and attempt too
            watchdogs = self._watchdogs(sig)
            if not sig.alive and asleep is not None and asleep[3] is None and asleep[0] is watchdogs \
                    and asleep[1] == sig.attempt:
                self._asleep[sig.name] = (watchdogs, sig.attempt, sig, None)
                continue  # stepped again, each would say what it said (needs_alive, no trainer): nothing to do
            # (one asleep for want of a GPU is stepped once more on new signals: they may bring a process or a claim)
            self._moved.add(sig.name)
            self._asleep.pop(sig.name, None)
            if not sig.alive and self._sleeps(watchdogs):
                self._asleep[sig.name] = (watchdogs, sig.attempt, sig, None)  # from the next tick on, after this step
            view = self.view(sig, now, feed, known)
            for wd in watchdogs.values():
                trip = wd.step(view)
                if trip is not None:
                    commands.append((sig.name, self.command_for(wd, trip, view)))
                    if trip.action in (WatchdogAction.RESTART, WatchdogAction.ROLLBACK, WatchdogAction.STOP):
                        view.alive = False  # one stop per tick: the others see the job as going down
            heat = self._watchdogs(sig).get("gpu_temperature")
            thermal = self.thermal.resume(sig.name, sig.parked_by, sig.state == JobState.STOPPED, heat, view) \
                if isinstance(heat, GpuTemperatureWatchdog) else None
            if thermal is not None:
                commands.append((sig.name, thermal))
            if not sig.alive and sig.name not in self._asleep and self._gpuless(sig, feed, known, watchdogs):
                self._asleep[sig.name] = (watchdogs, sig.attempt, sig, sig.cfg)
        return commands

    def _gpuless(self, sig: JobSignals, feed: FeedTick, known: tuple[tuple[int, str], ...],
                 watchdogs: dict[str, Watchdog]) -> bool:
        """Issue 39, at rest with the default config: a job with no trainer, no process and no GPU (its claim places
        none: queued, stopped, done) gives the xid watchdog nothing to watch (an XID belongs to a GPU) and a heat
        park's resume no GPU to read, so stepped again with the same config, attempt and GPUs it says what it said
        after this step. Only once that is plain: each enabled watchdog watches a trainer, or is the xid watchdog
        and reads `ok` (past any warm-up and cooldown, which only move on with time)."""
        if sig.pids or self._gpu_indices(sig, feed, known):
            return False
        return all(not wd.cfg.enabled or wd.needs_alive or isinstance(wd, XidWatchdog) and wd.state == WatchdogState.OK
                   for wd in watchdogs.values())

    def _sleeps(self, watchdogs: dict[str, Watchdog]) -> bool:
        """Every enabled watchdog of the set watches a trainer only (not the xid watchdog, which watches the GPUs, nor
        an enabled gpu_temperature, whose resume reads them): a job without a trainer moves none of them."""
        hit = self._sleepy.get(id(watchdogs))
        if hit is None or hit[0] is not watchdogs:
            if len(self._sleepy) > 100_000:  # sets replaced by reloads: bound it
                self._sleepy.clear()
            hit = (watchdogs, all(not wd.cfg.enabled or wd.needs_alive and not isinstance(wd, GpuTemperatureWatchdog)
                                  for wd in watchdogs.values()))
            self._sleepy[id(watchdogs)] = hit
        return hit[1]

    def _gpu_indices(self, sig: JobSignals, feed: FeedTick, known: tuple[tuple[int, str], ...]) -> set[int]:
        """The GPUs the job's watchdogs watch (gpu/assign.py `job_gpu_indices`); without processes they follow from
        its config and the GPUs' indices and UUIDs alone: worked out once while those stay the same."""
        if sig.pids:
            return job_gpu_indices(sig.cfg, feed.readings, feed.processes, sig.pids)
        hit = self._gpus.get(sig.name)
        if hit is not None and hit[0] is sig.cfg and hit[1] == known:
            return hit[2]
        if len(self._gpus) > 100_000:  # jobs come and go: bound it
            self._gpus.clear()
        out = job_gpu_indices(sig.cfg, feed.readings, feed.processes, ())
        self._gpus[sig.name] = (sig.cfg, known, out)
        return out

    # ---- actions ---------------------------------------------------------------------------
    def command_for(self, wd: Watchdog, trip: Trip, view: JobView) -> WatchdogTrip:
        """The trip as a command. GPU-level actions happen here; job-level ones are the state machine's."""
        action, note = trip.action, None
        if action == WatchdogAction.POWER_CAP:
            note = self.thermal.power_cap(view, wd.cfg)
            if note is not None:
                action = WatchdogAction.LOG
        if action == WatchdogAction.STOP and trip.watchdog == "xid":
            for g in {x["gpu"] for x in trip.values.get("xids", [])}:
                self.feed.mark_unhealthy(g, trip.detail)
        return WatchdogTrip(watchdog=trip.watchdog, action=action, configured_action=trip.action,
                            detail=trip.detail, values=trip.values, threshold=trip.threshold,
                            hold_seconds=trip.hold, trouble_iteration=trip.trouble_iteration,
                            new_seed=trip.new_seed, max_rollbacks=getattr(wd.cfg, "max_rollbacks", DEFAULT_MAX_ROLLBACKS), note=note)

    # ---- read side -------------------------------------------------------------------------
    def rows_changed(self) -> set[str]:
        """The jobs whose watchdogs stepped since their row's part was last made: only theirs can differ (a copy:
        `job_status` forgets each as it makes it)."""
        return set(self._moved)

    def job_status(self, row: JobStatus) -> JobStatus:
        """The job's row with the part this engine owns, its watchdogs' states by name, once it has watchdogs. While
        no trainer runs (queued, backing off, at rest...) a watchdog that watches a trainer watches nothing: it reads
        `idle`, not `ok` (issue 37); the xid watchdog watches the GPUs, and a heat park's watchdog its resume."""
        seen = self._rows.get(row.name)
        if seen is not None and seen[0] is row and row.name not in self._moved:
            return seen[2]  # the same row, and no watchdog of the job stepped since it was made: the last answer
        cur = self.sets.get(row.name)
        if cur is None:
            return row
        self._moved.discard(row.name)
        watching = row.state in WATCHING
        shown = {n: wd.status() if watching or not _watches_trainer(wd, row) else
                 self._idle(row.name, n, wd.status(), row.state) for n, wd in cur[1].items()}
        # the same row and statuses as the last publish: the last answer, no copy; kept with this row, so that the
        # next publish's check by identity holds again (a row remade equal, e.g. after the caches' sizes were walked,
        # was compared field by field at every publish after it: ~100 of 1,000 rows at every tick, issue 39)
        if seen is not None and seen[1] == shown and (seen[0] is row or seen[0] == row):
            self._rows[row.name] = (row, shown, seen[2])
            return seen[2]
        if len(self._rows) > 100_000:  # jobs come and go: bound it
            self._rows.clear()
        out = replace(row, watchdogs=shown)
        self._rows[row.name] = (row, shown, out)
        return out

    def _idle(self, job: str, name: str, status: WatchdogStatus, state: str) -> WatchdogStatus:
        seen = self._idle_shown.get((job, name))
        if seen is not None and seen[1] == state and seen[0] == status:
            return seen[2]
        if len(self._idle_shown) > 200_000:  # jobs come and go: bound it
            self._idle_shown.clear()
        shown = _idle(status, state)
        self._idle_shown[(job, name)] = (status, state, shown)
        return shown


WATCHING = (JobState.STARTING.value, JobState.RUNNING.value)  # a trainer runs (or boots) and is not being stopped


def _watches_trainer(wd: Watchdog, row: JobStatus) -> bool:
    return wd.needs_alive and row.parked_by != wd.name


def _idle(status: WatchdogStatus, state: str) -> WatchdogStatus:
    if status.state == WatchdogState.DISABLED:
        return status
    return replace(status, state=WatchdogState.IDLE, since=None, detail=f"not watching: the job is {state}")
