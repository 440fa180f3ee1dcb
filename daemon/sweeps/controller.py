"""The sweeps as a supervisor tick hook and extension (issue 39): each tick it reads its trials' signals (their jobs'
states, iterations and new TensorBoard points), records the objective of each trial that reached a rung, asks ASHA
(asha.py, pure) what to do, saves what it decided (record.py) and returns the acts as commands for the trials' state
machines, as the host's queue does: a launch and a promotion are a `Start` (the queue places the trial, a promotion
resumes exactly from its checkpoint), a pause a `Stop` with a save. It acts on nothing itself.

Its events go into each trial's journal (`isaacd events <sweep>-t007`: trial_launched, trial_continued,
trial_paused with its rank and the rung's cut, trial_promoted) and the sweep's own into its document
(sweep_submitted, sweep_done with its best trial, sweep_cancelled). `isaacd sweep status` and /metrics read the
snapshot published at each tick (`snapshot()`), never the live state."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.schema import ConfigError
from ..daemon_log import log
from ..gpu.snapshot import GpuSnapshot
from ..jobs.messages import Command, Start, Stop
from ..jobs.model import JobState, Origin
from ..scheduling.room import Gpu, Place, held_on, places
from ..status.signals import JobSignals
from .asha import (Asha, Continue, Decision, Done, Launch, Pause, Promote, TrialState, TrialView, best_trial,
                   decide, ranking)
from .observe import Series, reached, trial_state
from .record import EVENTS_KEPT, SweepRecord, SweepStore, TrialRecord
from .population import Population
from .spec import SweepSpec, parse_sweep, pbt_of
from .status import SweepStatus, TrialStatus
from .trial_file import best_job_file

RESUMED = (JobState.QUEUED, JobState.STARTING, JobState.RUNNING, JobState.PENDING, JobState.BACKING_OFF)
Journal = Callable[..., Any]  # (job, event, **fields): a trial job's journal (history/store.py append_event)


@dataclass
class _Live:
    """One sweep as the controller runs it: its saved record, its parsed file, and what is kept in memory only."""

    rec: SweepRecord
    spec: SweepSpec
    asha: Asha
    series: dict[int, Series] = field(default_factory=dict)
    iterations: dict[int, int | None] = field(default_factory=dict)
    states: dict[int, TrialState] = field(default_factory=dict)
    missing_said: set[int] = field(default_factory=set)
    commands: list[tuple[str, Command]] = field(default_factory=list)  # asked off the tick (a cancel): sent by it
    last_tick: float | None = None
    shown: tuple[tuple[Any, ...], SweepStatus] | None = None  # its last status and what it was made of



def scheduler_of(spec: SweepSpec) -> Asha:
    """ASHA's settings from the sweep file; scheduler `none`: no rungs, every trial runs to max_iterations (the
    same launches, concurrency and best)."""
    rungs = spec.scheduler.rungs if spec.scheduler.kind == "asha" else ()
    return Asha(rungs=rungs, max_iterations=spec.base.max_iterations, eta=spec.scheduler.reduction_factor,
                mode=spec.objective.mode, concurrency=spec.concurrency, stop_at=spec.stop_at)


class SweepController:
    def __init__(self, state_dir: Path, journal: Journal, gpu_snapshot: Callable[[], GpuSnapshot] | None = None,
                 request_reload: Callable[[], None] = lambda: None):
        self.store = SweepStore(state_dir)
        self.journal = journal
        # PBT (issue 40): an exploit rewrites its member's job file, then asks the supervisor to reload
        self.population = Population(journal, lambda: self.request_reload())
        self.request_reload = request_reload
        self.gpu_snapshot = gpu_snapshot  # the GPUs' totals: a gpu_memory trial's share of its GPU
        self._lock = threading.Lock()  # the control thread (submit, cancel) against the tick
        self._live: dict[str, _Live] = {}
        self._snapshot: tuple[SweepStatus, ...] = ()
        self._places: dict[Place, Gpu] = {}
        self.load()

    # ---- the extension's life ------------------------------------------------------------------------------
    def load(self) -> None:
        """The sweeps saved here, each with its file parsed again (same seed, same trials)."""
        for rec in self.store.load_all():
            try:
                self._add(rec)
            except ConfigError as exc:
                log.error("sweep_unreadable", sweep=rec.name, error=str(exc),
                          detail="its trials are ordinary jobs and go on as such; the sweep decides nothing")

    def _add(self, rec: SweepRecord) -> _Live:
        spec = parse_sweep(rec.text, rec.source, Path(rec.base_dir))
        live = self._live[rec.name] = _Live(rec, spec, scheduler_of(spec))
        return live

    def start(self, running: object) -> None:
        pass

    def stop(self) -> None:
        pass

    # ---- the control side (its own thread) -----------------------------------------------------------------
    def names(self) -> list[str]:
        with self._lock:
            return list(self._live)

    def jobs(self) -> set[str]:
        with self._lock:
            return {t.job for live in self._live.values() for t in live.rec.trials}

    def record(self, name: str) -> SweepRecord | None:
        with self._lock:
            live = self._live.get(name)
            return live.rec if live is not None else None

    def spec(self, name: str) -> SweepSpec | None:
        with self._lock:
            live = self._live.get(name)
            return live.spec if live is not None else None

    def submitted(self, rec: SweepRecord) -> None:
        """A new sweep, its trials' job files written: saved, then run from the next tick."""
        with self._lock:
            self._note(rec, "sweep_submitted", trials=len(rec.trials), owner=rec.owner, source=rec.source)
            self.store.save(rec)
            self._add(rec)
            self._publish()  # `isaacd sweep status` right after the submit finds it, before the next tick

    def forget(self, name: str) -> None:
        """A submit whose reload failed: its record goes with its trial files."""
        with self._lock:
            self._live.pop(name, None)
            self.store.path(name).unlink(missing_ok=True)
            self._publish()

    def cancel(self, name: str) -> str:
        """Every trial that runs is stopped with a save (at the next tick); paused and pending ones stay so."""
        with self._lock:
            live = self._live.get(name)
            if live is None:
                raise KeyError(name)
            rec = live.rec
            if rec.state != "running":
                return f"sweep {name} is already {rec.state}"
            stopping = [t for t in rec.trials if live.states.get(t.number) == TrialState.RUNNING]
            rec.state, rec.reason = "cancelled", "isaacd sweep cancel"
            self._note(rec, "sweep_cancelled", stopping=[t.job for t in stopping])
            self.store.save(rec)
            live.commands += [(t.job, Stop(Origin.SWEEP, f"sweep {name} cancelled (isaacd sweep cancel)"))
                              for t in stopping]
        return (f"sweep {name} cancelled: {len(stopping)} running trial(s) stop with a save; the others stay as "
                "they are (their jobs, histories and checkpoints are kept)")

    def snapshot(self) -> tuple[SweepStatus, ...]:
        return self._snapshot

    # ---- the tick ------------------------------------------------------------------------------------------
    def tick(self, now: float, signals: Sequence[JobSignals]) -> list[tuple[str, Command]]:
        by_name = {s.name: s for s in signals}
        out: list[tuple[str, Command]] = []
        self._places = gpu_places(self.gpu_snapshot() if self.gpu_snapshot is not None else None)
        with self._lock:
            for live in self._live.values():
                out += live.commands
                live.commands = []
                try:
                    out += self._tick_one(live, now, by_name)
                except Exception:  # noqa: BLE001 - one sweep's bug must not stop the others, nor the jobs
                    log.exception("sweep_tick_failed", sweep=live.rec.name)
            self._publish()
        return out

    def _publish(self) -> None:
        """The sweeps as status shows them (under self._lock): one reference swap, read without a lock. A sweep's
        status is made again only when something it shows changed (issue 39: 100 queued trials at every tick)."""
        shown = tuple(self._shown(live) for live in self._live.values())
        if len(shown) != len(self._snapshot) or any(a is not b for a, b in zip(shown, self._snapshot)):
            self._snapshot = shown

    def _shown(self, live: _Live) -> SweepStatus:
        rec = live.rec
        key = (rec.state, rec.reason, rec.best, rec.best_value, rec.owner, rec.source, rec.submitted_at,
               tuple((t.number, t.job, tuple(t.values.items()), live.states.get(t.number), live.iterations.get(t.number),
                      t.objective, t.passed, tuple(t.rung_values), round(t.gpu_seconds, 3), t.exploits,
                      tuple(t.lineage), t.exploit is not None) for t in rec.trials))
        if live.shown is None or live.shown[0] != key:
            live.shown = (key, self._status(live))
        return live.shown[1]

    def _tick_one(self, live: _Live, now: float, by_name: dict[str, JobSignals]) -> list[tuple[str, Command]]:
        rec, spec, asha = live.rec, live.spec, live.asha
        dt = 0.0 if live.last_tick is None else max(0.0, now - live.last_tick)
        live.last_tick = now
        changed = False
        views = []
        resend: list[tuple[str, Command]] = []
        for t in rec.trials:
            sig = by_name.get(t.job)
            series = live.series.get(t.number)
            if series is None:  # (not setdefault: a Series made for nothing per trial per tick)
                series = live.series[t.number] = Series()
            if sig is not None:
                series.add(sig.new_points, spec.objective.tag)
                if sig.iteration is not None:
                    live.iterations[t.number] = sig.iteration
                if sig.alive:  # GPU time its trainer holds: wall seconds × its GPUs (a gpu_memory trial its share)
                    t.gpu_seconds += dt * gpus_held(sig, self._places)
            state = trial_state(t, sig.state if sig is not None else None)
            if state == TrialState.CANCELLED and sig is not None and t.started_attempt is not None \
                    and sig.attempt <= t.started_attempt and rec.state == "running":
                # the Start the saved decision asked for never reached the job: asked again (saved before, as then)
                state = TrialState.RUNNING
                resend.append((t.job, Start(Origin.SWEEP, f"sweep {rec.name}: trial {t.number} started again (its "
                                                          "start was not carried out before a supervisor restart)")))
            if state == TrialState.PAUSED and sig is not None and sig.state in RESUMED:
                # someone started a paused trial (`isaacd start`): a promotion of theirs, never paused again there
                t.paused, t.passed, state = False, len(t.rung_values), TrialState.RUNNING
                self.journal(t.job, "trial_resumed", sweep=rec.name, trial=t.number, rung=t.passed - 1,
                             detail="started by hand while paused: it goes on as if promoted")
                changed = True
            live.states[t.number] = state
            now_value = series.score(spec.objective.tag, spec.objective.mode, spec.objective.smooth)
            if now_value is not None:
                t.objective = now_value
            iteration = live.iterations.get(t.number)
            if rec.state == "running" and spec.scheduler.kind != "pbt":
                changed |= self._record_rungs(live, t.number, state, iteration)
            views.append(TrialView(t.number, state, iteration or 0, tuple(t.rung_values), t.passed, t.objective))
        if rec.state != "running":
            return []
        if any(not t.launched and t.job not in by_name for t in rec.trials):
            # its trials' jobs are not all there yet (the submit's reload still to come): nothing is decided, so no
            # launch goes to a job that does not exist
            if changed:
                self.store.save(rec)
            return []
        out: list[tuple[str, Command]] = list(resend)
        if spec.scheduler.kind == "pbt":
            commands, moved = self._population(live, by_name)
            if rec.state == "done":
                self._note(rec, "sweep_done", best=rec.best, best_job=rec.trial(rec.best).job if rec.best else None,
                           objective=rec.best_value, detail=rec.reason)
            if changed or moved:
                self.store.save(rec)  # saved before any of its commands, events or files is acted on
            self.population.flush()
            return out + commands
        for d in decide(asha, views):
            out += self._carry_out(live, d, views, by_name)
            changed = True
        if changed:
            self.store.save(rec)  # saved before any of its commands is acted on
        return out

    def _population(self, live: _Live, by_name: dict[str, JobSignals]) -> tuple[list[tuple[str, Command]], bool]:
        """A PBT sweep's pass (population.py): every member launched at once (concurrency = the population), then
        the exploits under way carried a step further and the members due judged."""
        rec, out = live.rec, []
        for t in rec.trials:
            if not t.launched:
                sig = by_name.get(t.job)
                t.launched, t.started_attempt = True, sig.attempt if sig is not None else 0
                self.journal(t.job, "trial_launched", sweep=rec.name, trial=t.number, values=t.values)
                out.append((t.job, Start(Origin.SWEEP, f"sweep {rec.name}: member {t.number} launched")))
        commands, moved = self.population.tick(rec, live.spec, pbt_of(live.spec), live.series, live.iterations,
                                               by_name)
        return out + commands, moved or bool(out)

    def _record_rungs(self, live: _Live, number: int, state: TrialState, iteration: int | None) -> bool:
        """The objective recorded at each rung the trial has reached (and at the top when it completed)."""
        t, spec, asha = live.rec.trial(number), live.spec, live.asha
        if state not in (TrialState.RUNNING, TrialState.COMPLETED):
            return False
        # the iterations it trained (its job's iteration is the last one's 0-based index); a completed trial's all
        done = asha.max_iterations if state == TrialState.COMPLETED else None if iteration is None else iteration + 1
        changed = False
        while reached(t, done, asha.milestones) is not None:
            value = live.series[number].score(spec.objective.tag, spec.objective.mode, spec.objective.smooth)
            if value is None and t.objective is not None:
                value = t.objective  # read before a restart (its run is over: no new points come)
            if value is None:
                value = math.nan
                if number not in live.missing_said:  # the tag the trainer never wrote: said once, naming those it did
                    live.missing_said.add(number)
                    self.journal(t.job, "sweep_objective_missing", sweep=live.rec.name, tag=spec.objective.tag,
                                 iteration=iteration, tags=sorted(live.series[number].tags),
                                 detail="this trial ranks last at its rungs; set [sweep.objective] tag to one of "
                                        "the tags it writes")
            t.rung_values.append(value)
            changed = True
        return changed

    def _carry_out(self, live: _Live, d: Decision, views: list[TrialView],
                   by_name: dict[str, JobSignals]) -> list[tuple[str, Command]]:
        rec = live.rec
        name = rec.name
        if isinstance(d, Done):
            rec.state, rec.reason, rec.best, rec.best_value = "done", d.reason, d.best, d.value
            best = rec.trial(d.best).job if d.best is not None else None
            self._note(rec, "sweep_done", best=d.best, best_job=best, objective=d.value, detail=d.reason)
            log.info("sweep_done", sweep=name, best=best, objective=d.value, reason=d.reason)
            # stop_at reached while trials ran: each stopped with a save (paused ones stay paused)
            return [(rec.trial(v.number).job, Stop(Origin.SWEEP, f"sweep {name} is done: {d.reason}"))
                    for v in views if v.state == TrialState.RUNNING]
        t = rec.trial(d.trial)
        sig = by_name.get(t.job)
        if isinstance(d, (Launch, Promote)):
            t.started_attempt = sig.attempt if sig is not None else 0
        if isinstance(d, Launch):
            t.launched, live.states[t.number] = True, TrialState.RUNNING
            self.journal(t.job, "trial_launched", sweep=name, trial=t.number, values=t.values)
            return [(t.job, Start(Origin.SWEEP, f"sweep {name}: trial {t.number} launched"))]
        where = {"sweep": name, "trial": t.number, "rung": d.rung, "milestone": d.milestone, "rank": d.rank,
                 "of": d.of, "cut": d.cut}
        if isinstance(d, Continue):
            t.passed = d.rung + 1
            self.journal(t.job, "trial_continued", **where)
            return []
        if isinstance(d, Pause):
            t.paused, live.states[t.number] = True, TrialState.PAUSED
            self.journal(t.job, "trial_paused", **where, objective=t.rung_values[d.rung],
                         detail=f"rank {d.rank} of {d.of} at iteration {d.milestone}, below the top 1/"
                                f"{live.asha.eta:g}; stopped with a save, promoted if it ranks later")
            return [(t.job, Stop(Origin.SWEEP, f"sweep {name}: paused at iteration {d.milestone} (rank {d.rank} of "
                                               f"{d.of}, below the top 1/{live.asha.eta:g})"))]
        if isinstance(d, Promote):
            t.paused, t.passed, live.states[t.number] = False, d.rung + 1, TrialState.RUNNING
            self.journal(t.job, "trial_promoted", **where)
            return [(t.job, Start(Origin.SWEEP, f"sweep {name}: promoted past iteration {d.milestone} (rank "
                                                f"{d.rank} of {d.of})"))]
        raise TypeError(f"not a sweep decision: {d!r}")  # pragma: no cover - the union is closed

    def _note(self, rec: SweepRecord, event: str, **fields: Any) -> None:
        rec.events = (rec.events + [{"time": time.time(), "sweep": rec.name, "event": event, **fields}])[-EVENTS_KEPT:]

    # ---- what status shows -----------------------------------------------------------------------------------
    def _status(self, live: _Live) -> SweepStatus:
        rec, spec, asha = live.rec, live.spec, live.asha
        views = [TrialView(t.number, live.states.get(t.number, TrialState.PENDING),
                           live.iterations.get(t.number) or 0, tuple(t.rung_values), t.passed, t.objective)
                 for t in rec.trials]
        if spec.scheduler.kind == "pbt":  # a population ranks by its objective now (pbt.py)
            order, best, best_value = _population_ranking(spec, rec)
        else:
            order = ranking(asha, views)
            best = rec.best if rec.state == "done" else best_trial(asha, views)
            best_value = rec.best_value if rec.state == "done" else (
                rec.trial(best).rung_values[-1] if best is not None and rec.trial(best).rung_values else None)
        trials = []
        for number in order:
            t = rec.trial(number)
            trials.append(TrialStatus(number=number, job=t.job, values=dict(t.values),
                                      state=live.states.get(number, TrialState.PENDING).value,
                                      iteration=live.iterations.get(number), objective=t.objective, rung=t.passed,
                                      rung_values=tuple(t.rung_values), gpu_seconds=round(t.gpu_seconds, 3),
                                      exploits=t.exploits, lineage=tuple(t.lineage),
                                      exploiting=t.exploit is not None))
        return SweepStatus(name=rec.name, owner=rec.owner, state=rec.state, reason=rec.reason, source=rec.source,
                           submitted_at=rec.submitted_at, trials_total=len(rec.trials), concurrency=spec.concurrency,
                           objective_tag=spec.objective.tag, mode=spec.objective.mode, smooth=spec.objective.smooth,
                           scheduler=spec.scheduler.kind, reduction_factor=spec.scheduler.reduction_factor,
                           rungs=asha.rungs, max_iterations=asha.max_iterations, best=best,
                           interval=spec.scheduler.pbt.interval if spec.scheduler.pbt else None,
                           quantile=spec.scheduler.pbt.quantile if spec.scheduler.pbt else None,
                           best_objective=best_value, gpu_seconds=round(sum(t.gpu_seconds for t in rec.trials), 3),
                           trials=tuple(trials))




def _population_ranking(spec: SweepSpec, rec: SweepRecord) -> tuple[list[int], int | None, float | None]:
    """A population's members best first by their objective now (none last, ties by number), and its best: the
    sweep's own when it is done, else the best member that has not failed."""
    sign = 1.0 if spec.objective.mode == "max" else -1.0

    def key(t: TrialRecord) -> tuple[float, int]:
        v = t.objective
        return (-(sign * v) if v is not None and not math.isnan(v) else math.inf, t.number)
    order = [t.number for t in sorted(rec.trials, key=key)]
    if rec.state == "done":
        return order, rec.best, rec.best_value
    scored = [t for t in sorted(rec.trials, key=key) if t.objective is not None]
    return order, (scored[0].number if scored else None), (scored[0].objective if scored else None)


def gpu_places(snap: GpuSnapshot | None) -> dict[Place, Gpu]:
    """The queue's places (a GPU not in MIG mode by its index, a MIG instance by "p:j", scheduling/room.py) with their
    memory and an instance's GPU's, as the queue's per-user figures read them."""
    return {g.index: g for g in places(snap, math.inf)}


def gpus_held(sig: JobSignals, where: dict[Place, Gpu]) -> float:
    """The GPUs a trial's trainer holds, as isaacd_user_gpus counts them (room.Gpu.holds): a whole GPU 1, a
    gpu_memory trial asked / the GPU's total, a trial on a MIG instance the instance's share of its GPU (it holds
    the instance whole); a place without a reading counted whole; a trial the queue does not place, 1."""
    q = sig.queue
    if q is None or not q.placement:
        return 1.0
    ask = q.request.memory_bytes
    return sum(held_on(where.get(i), ask)[0] for i in q.placement)


def best_of(sweeps: SweepController, name: str) -> str:
    """`isaacd sweep best NAME`: its best trial so far (or at the end) as a ready job file (trial_file.py)."""
    rec, spec = sweeps.record(name), sweeps.spec(name)
    if rec is None or spec is None:
        raise KeyError(name)
    status = next((s for s in sweeps.snapshot() if s.name == name), None)
    best = status.best if status is not None else rec.best
    if best is None:
        raise ValueError(f"sweep {name} has no best trial yet: no trial has reached its first rung "
                         f"({spec.scheduler.rungs[0] if spec.scheduler.rungs else spec.base.max_iterations} "
                         "iterations); ask again later")
    return best_job_file(rec.text, Path(rec.base_dir), spec, best, rec.trial(best).values)
