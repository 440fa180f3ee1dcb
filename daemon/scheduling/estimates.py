"""How long a job the queue places will run (issue 42): the estimates the scheduler's reservations stand on.

isaacd needs no guess from the user (Slurm's `--time`): it sees each running job's iterations, and it has seen
earlier runs of the same task, library and `num_envs` on this host.

  * A running job: the iterations it has left x its recent iteration time, the median of the last WINDOW intervals
    between its TensorBoard steps' wall times (the tfrecord's own times, not when isaacd read them), leaving out the
    attempt's first SKIP iterations: the start-up, the first CUDA graphs, a resume's first iteration (rsl_rl logs
    the step it resumes from again). Before that: the history below, from the attempt's start.
  * A job that has not run (or waits to resume): the start-up and iteration time of the last completed run of the
    same task, library and num_envs here (estimate_store.py, state_dir/estimates.json), x its iterations left;
    else not known.

Pure: no I/O and no clock. `Estimates.observe` is handed each tick's signals and the time by the queue's hook
(hook.py), which keeps the history on disk and writes the events; the scheduler reads the result in the queue
entries (`ends_at`, `run_seconds`).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..jobs.model import JobState

SKIP = 3  # the attempt's first iterations left out of its rate (start-up, compile, a resume's repeated step)
WINDOW = 20  # the newest intervals whose median is the rate
MIN_INTERVALS = 3  # fewer than this: no rate yet
# an estimate is published again only when it moves by more than this (the queue's pass is reused while its inputs
# stay the same: issue 39's scale; an end that moves a few seconds each iteration would make every pass new)
REPUBLISH_S = 30.0
REPUBLISH_SHARE = 0.05
HELD = 1.1  # an estimate held: the run took at most this x what it said


@dataclass(frozen=True)
class Past:
    """An earlier completed run of this task, library and num_envs on this host."""

    seconds_per_iteration: float
    startup_seconds: float

    def run_seconds(self, iterations: int) -> float:
        return self.startup_seconds + max(iterations, 0) * self.seconds_per_iteration


def history_key(workflow: str, task: str, num_envs: int) -> str:
    return f"{workflow}:{task}:{num_envs}"


class IterationClock:
    """One attempt's iteration time from its steps' wall times."""

    def __init__(self) -> None:
        self.first_step: int | None = None
        self.first_wall: float | None = None
        self.last: tuple[int, float] | None = None  # the newest step and its wall time
        self.intervals: deque[float] = deque(maxlen=WINDOW)

    def add(self, step: int, wall: float) -> None:
        """A step's first point (later points of a step seen already, and older steps, change nothing)."""
        if self.first_step is None:
            self.first_step, self.first_wall = step, wall
        if self.last is not None and step <= self.last[0]:
            return
        if self.last is not None and self.last[0] >= self.first_step + SKIP and wall > self.last[1]:
            self.intervals.append((wall - self.last[1]) / (step - self.last[0]))
        self.last = (step, wall)

    @property
    def seconds_per_iteration(self) -> float | None:
        return statistics.median(self.intervals) if len(self.intervals) >= MIN_INTERVALS else None


def iterations_left(iteration: int | None, max_iterations: int) -> int:
    """After step `iteration` (0-based) of a run of max_iterations: steps 0..max_iterations-1."""
    return max(max_iterations - 1 - (iteration if iteration is not None else -1), 0)


@dataclass(frozen=True)
class Ended:
    """A job completed: what its run measured (for the history) and how its estimates fared."""

    job: str
    key: str
    seconds_per_iteration: float | None
    startup_seconds: float | None
    # (source "rate" or "history", seconds it said were left, seconds they were): its first estimate of each kind
    errors: tuple[tuple[str, float, float], ...] = ()


@dataclass
class _Job:
    attempt: int = -1
    clock: IterationClock = field(default_factory=IterationClock)
    started_wall: float | None = None  # the attempt's start on the wall clock
    active: bool = False  # seen starting or running in this attempt
    said: dict[str, tuple[float, float]] = field(default_factory=dict)  # source -> (when, end it said): the first
    end: float | None = None  # the published end (monotonic)
    run: float | None = None  # the published run time (a waiting job)
    source: str | None = None
    seen: tuple[object, ...] | None = None  # a job at rest's last signals and inputs: the same again, nothing to redo


class Estimates:
    """Every queue-placed job's estimate, kept between ticks. `observe` returns the jobs that completed this tick."""

    def __init__(self) -> None:
        self.jobs: dict[str, _Job] = {}
        self._changed: set[str] = set()  # jobs whose published end or run time changed since take_changed()
        self.history_version = 0  # the hook bumps it when it records a run: every waiting job's estimate is redone

    def history_changed(self) -> None:
        self.history_version += 1

    def observe(self, now: float, wall_minus_mono: float, signals: Iterable, history: dict[str, Past]) -> list[Ended]:
        ended: list[Ended] = []
        seen: set[str] = set()
        for sig in signals:
            if sig.queue is None:
                continue
            seen.add(sig.name)
            if (e := self._one(now, wall_minus_mono, sig, history)) is not None:
                ended.append(e)
        if len(self.jobs) > len(seen):
            for gone in set(self.jobs) - seen:
                del self.jobs[gone]
                self._changed.add(gone)
        return ended

    def take_changed(self) -> set[str]:
        """The jobs whose end or run time changed since the last call (their rows show it)."""
        changed, self._changed = self._changed, set()
        return changed

    def end_and_run(self, job: str) -> tuple[float | None, float | None]:
        """The job's published end (monotonic) and run time (a waiting job's), None where not known: one look (the queue
        asks both for each of 1,000 jobs at every tick)."""
        j = self.jobs.get(job)
        return (j.end, j.run) if j is not None else (None, None)

    def source(self, job: str) -> str | None:
        j = self.jobs.get(job)
        return j.source if j is not None else None

    def _one(self, now: float, wall_minus_mono: float, sig, history: dict[str, Past]) -> Ended | None:  # noqa: ANN001
        j = self.jobs.get(sig.name)
        if j is None:
            j = self.jobs[sig.name] = _Job()
        if not sig.new_points and sig.state not in (JobState.STARTING, JobState.RUNNING, JobState.COMPLETED):
            # a waiting (or resting) job: its estimate changes only with these (issue 39: 1,000 queued jobs a tick);
            # the very signals of the last tick (the runner's, kept while nothing of them changed) hold the same
            if j.seen is not None and j.seen[0] is sig and j.seen[-1] == self.history_version:
                return None
            seen = (sig, sig.state, sig.attempt, sig.checkpoint_iteration, sig.cfg, self.history_version)
            if j.seen is not None and j.seen[1:] == seen[1:]:
                j.seen = seen
                return None
            j.seen = seen
        else:
            j.seen = None
        before = (j.end, j.run)
        out = self._update(j, now, wall_minus_mono, sig, history)
        after = self.jobs[sig.name]
        if (after.end, after.run) != before:
            self._changed.add(sig.name)
        return out

    def _update(self, j: _Job, now: float, wall_minus_mono: float, sig,  # noqa: ANN001
                history: dict[str, Past]) -> Ended | None:
        cfg = sig.cfg
        key = history_key(cfg.workflow, cfg.task, cfg.num_envs)
        if sig.state == JobState.COMPLETED:
            out = self._ended(j, sig.name, key, now) if j.active else None
            self.jobs[sig.name] = _Job(attempt=sig.attempt)  # nothing more to estimate until it starts again
            return out
        if sig.attempt != j.attempt:  # a new attempt (a resume, a restart): its own rate from its own steps
            j.attempt, j.clock, j.active, j.said = sig.attempt, IterationClock(), False, {}
            j.started_wall = None
        if sig.attempt_started_at is not None and j.started_wall is None:
            j.started_wall = sig.attempt_started_at + wall_minus_mono
        for p in sorted(sig.new_points, key=lambda p: (p.step, p.wall_time)):
            j.clock.add(p.step, p.wall_time)
        past = history.get(key)
        left = iterations_left(sig.iteration if sig.iteration is not None else _resumed(sig), cfg.max_iterations)
        end, source = None, None
        if sig.state in (JobState.STARTING, JobState.RUNNING) and sig.queue.placement:
            j.active, j.run = True, None
            spi = j.clock.seconds_per_iteration
            if spi is not None and j.clock.last is not None:
                end, source = j.clock.last[1] - wall_minus_mono + left * spi, "rate"
            elif past is not None:
                if sig.iteration is None:  # still starting: its start-up from the attempt's start
                    began = sig.attempt_started_at if sig.attempt_started_at is not None else now
                    end = max(began + past.startup_seconds, now) + left * past.seconds_per_iteration
                else:
                    end = now + left * past.seconds_per_iteration
                source = "history"
            if end is not None and source is not None:
                j.said.setdefault(source, (now, end))
            j.end = _steady(j.end, end, now)
        elif sig.state == JobState.QUEUED:
            j.end = None
            run = past.run_seconds(left) if past is not None else None
            j.run = _steady(j.run, run, 0.0)
            source = "history" if run is not None else None
        else:
            j.end = j.run = None
        j.source = source
        return None

    @staticmethod
    def _ended(j: _Job, name: str, key: str, now: float) -> Ended:
        spi = j.clock.seconds_per_iteration
        startup = None
        if j.started_wall is not None and j.clock.first_wall is not None:
            startup = max(j.clock.first_wall - j.started_wall, 0.0)
        errors = tuple((source, end - made, now - made) for source, (made, end) in sorted(j.said.items())
                       if end > made)
        return Ended(name, key, spi, startup, errors)


def _resumed(sig) -> int | None:  # noqa: ANN001
    """Before its first step: the iteration its checkpoint holds (a resume starts after it), if any."""
    return sig.checkpoint_iteration


def _steady(old: float | None, new: float | None, now: float) -> float | None:
    """The published value: the old one while the new one is within REPUBLISH of it."""
    if old is None or new is None:
        return new
    if abs(new - old) <= max(REPUBLISH_S, REPUBLISH_SHARE * abs(new - now)):
        return old
    return new


def error_ratio(said: float, took: float) -> float:
    """How long it took over how long it said: 1 = right, 2 = took twice as long."""
    return took / said if said > 0 else float("inf")
