"""ASHA with pause and promotion (issue 39): a sweep's trials and the objective each recorded at its rungs in, the
scheduler's decisions out. Pure: no I/O, no clock, no randomness, in the style of jobs/machine.py and
scheduling/scheduler.py; the sweep's wiring calls `decide(asha, trials)` when something changed (a trial reached a
rung, paused, completed, failed) and carries each decision out through the trial job's state machine (a pause is a
stop with a save; a promotion a resume from it), recording it before the next call.

Read upstream:
  * Li et al., "A System for Massively Parallel Hyperparameter Tuning" (MLSys 2020), ASHA's `get_job`: look for a
    promotable configuration from the highest rung down (one in the top 1/eta of its rung and not yet promoted)
    and promote it to the next rung; if there is none, add a new configuration to the bottom rung. Its rungs grow
    as results come in, so a configuration paused at a rung is promoted later, when the rung has grown enough
    (worse ones arrived) for it to rank.
  * Ray Tune, python/ray/tune/schedulers/async_hyperband.py (`AsyncHyperBandScheduler`, `_Bracket.on_result` and
    `cutoff`): the stopping variant. A result that reaches a milestone is compared with the
    `(1 - 1/eta)`-percentile (`np.nanpercentile`, linear interpolation) of the values recorded there before it;
    below it the trial stops, at or above it continues; a rung with nothing recorded continues; `mode = min`
    negates the objective. Ray stops a trial for good; isaacd pauses it, since a paused trial costs nothing.
  * Syne Tune's ASHA tutorial calls these the stopping and the promotion (pause-and-resume) variants; this is the
    promotion variant with the stopping variant's immediate answer at a rung.

The rules, one scenario each in tests/test_asha.py:
  * Rungs: the sweep's milestones (iterations, increasing, each below max_iterations) and max_iterations as the top.
    `TrialView.values[j]` is the smoothed objective the trial recorded when it reached rung j (`smoothed`).
  * The top 1/eta of a rung: the best ceil(n / eta) of the n trials recorded there, itself included. This is Ray's
    cutoff made a rank: wherever Ray's interpolated percentile is decided by the ranks alone, ceil agrees (floor
    would not: it pauses the first trial at a rung, which Ray lets through since nothing is recorded there yet); it
    differs only where Ray's answer depends on how far apart the values are. A rank gives every event the same
    two numbers (rank, cut) and makes ties deterministic.
  * Ties are broken by trial number (the lower ranks first); a NaN objective ranks last.
  * A trial reaching a rung in the top 1/eta continues; one below is paused (`Pause`, with its rank and the rung's
    cut). `Continue` is a decision of its own because it must be recorded (`passed`): without it the next call
    would judge the trial at that rung again, and pause it once better ones arrived there. Trials that reach a rung
    in the same pass are judged together, against the rung with all of them in it.
  * A paused trial is promoted (`Promote`: resumed toward the next rung) once the rung has grown so that it ranks;
    promotions come before new launches, from the highest rung down, the best ranked first (the paper's get_job).
  * A promoted trial is past its rung (`passed`): it is not judged there again, whatever arrives there later.
  * Concurrency: running + promotions + launches <= concurrency; a trial paused in this pass no longer counts (its
    GPU is being given back, the host's queue places the next one when it is free).
  * Launches: the pending trials, by trial number, into the slots the promotions left.
  * A failed (or cancelled) trial is never promoted or launched, and counts as the worst at each rung it recorded a
    value at; a failed one also at the rung it was training toward (it spent that rung's budget), so it takes no
    place in a rung's top from a trial that can still be promoted.
  * `stop_at`: a trial whose objective reaches it ends the sweep (`Done`, that trial the best).
  * Done: after this pass nothing runs (so nothing was promotable or pending); the trials still paused stay paused.
  * mode = min: lower is better, for the ranks, the cut, stop_at and the best.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Literal


class TrialState(str, Enum):
    """A trial as the sweep sees it. `running` is any trial holding a concurrency slot (queued, starting, training,
    preempted and requeued); `paused` is paused by ASHA at the rung of its last recorded value, with a save."""

    PENDING = "pending"  # never launched
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"  # reached max_iterations
    FAILED = "failed"
    CANCELLED = "cancelled"


DROPPED = (TrialState.FAILED, TrialState.CANCELLED)


@dataclass(frozen=True)
class Asha:
    """The scheduler's settings, from the sweep file (`[scheduler]`, `concurrency`, `[objective]`, `stop_at`)."""

    rungs: tuple[int, ...]  # iteration milestones, increasing, each below max_iterations (which is the top rung)
    max_iterations: int
    eta: float = 3.0  # the reduction factor: a rung's top 1/eta go on
    mode: Literal["max", "min"] = "max"
    concurrency: int = 1
    stop_at: float | None = None

    def __post_init__(self) -> None:
        if self.eta <= 1:
            raise ValueError(f"reduction_factor = {self.eta}: it must be above 1 (3 keeps the top third)")
        if self.mode not in ("max", "min"):
            raise ValueError(f"mode = {self.mode!r}: use 'max' or 'min'")
        if self.concurrency < 1:
            raise ValueError(f"concurrency = {self.concurrency}: at least 1 trial must run at once")
        if any(r < 1 for r in self.rungs) or list(self.rungs) != sorted(set(self.rungs)):
            raise ValueError(f"rungs = {list(self.rungs)}: positive iterations, increasing, e.g. [10, 30, 90]")
        if self.rungs and self.rungs[-1] >= self.max_iterations:
            raise ValueError(f"rungs = {list(self.rungs)}: each must be below max_iterations = "
                             f"{self.max_iterations} (the top rung)")

    @property
    def milestones(self) -> tuple[int, ...]:
        """Every rung's iteration, max_iterations (the top) last: rung j is reached at milestones[j]."""
        return (*self.rungs, self.max_iterations)

    @property
    def top(self) -> int:
        """The top rung's index: a trial that reaches it has completed."""
        return len(self.rungs)

    def key(self, value: float | None) -> float:
        """A value as the ranks read it: higher is better whatever the mode; NaN (or none) the worst."""
        if value is None or math.isnan(value):
            return -math.inf
        return value if self.mode == "max" else -value


@dataclass(frozen=True)
class TrialView:
    """One trial as `decide` reads it. The wiring keeps `passed` from the decisions it carried out: a `Continue` or
    a `Promote` at rung j sets it to j + 1."""

    number: int  # the trial number, 1-based (sampler.py)
    state: TrialState
    iteration: int = 0  # the last iteration it logged
    values: tuple[float, ...] = ()  # values[j]: the smoothed objective recorded when it reached rung j
    passed: int = 0  # rungs it was let past (continued at, or promoted from)
    objective: float | None = None  # its smoothed objective now (stop_at, the status table), if it logged one


# ---- decisions -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Launch:
    """Start a pending trial from scratch, into the bottom rung."""

    trial: int


@dataclass(frozen=True)
class AtRung:
    """A decision about a trial at a rung: where it stands there."""

    trial: int
    rung: int
    milestone: int  # the rung's iteration
    rank: int  # 1 = best among the `of` trials recorded at the rung
    of: int
    cut: float | None  # the objective of the last trial in the rung's top 1/eta (None: that one failed, or NaN)


@dataclass(frozen=True)
class Continue(AtRung):
    """A running trial reached `rung` in its top 1/eta: it goes on (record `passed = rung + 1`; nothing to act)."""


@dataclass(frozen=True)
class Pause(AtRung):
    """A running trial reached `rung` below its top 1/eta: stop it with a save; it may be promoted later."""


@dataclass(frozen=True)
class Promote(AtRung):
    """A paused trial now ranks in the top 1/eta of its rung: resume it, exactly, toward the next rung (record
    `passed = rung + 1`)."""


@dataclass(frozen=True)
class Done:
    """The sweep is over: `best` is its best trial (None: no trial recorded an objective). Trials still running
    (stop_at) are stopped with a save by the wiring; paused ones stay paused."""

    best: int | None
    value: float | None
    reason: str


Decision = Launch | Continue | Pause | Promote | Done


# ---- the objective ----------------------------------------------------------------------------------------------
def smoothed(values: Sequence[float], n: int) -> float | None:
    """The objective as ASHA reads it: the mean of the last `n` logged values (None before the first)."""
    if n < 1:
        raise ValueError(f"smoothing = {n}: average at least the last 1 value")
    tail = list(values)[-n:]
    return sum(tail) / len(tail) if tail else None


# ---- the rungs' ranks ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Standing:
    rank: int
    of: int
    cut: float | None
    ranks: bool  # in the top 1/eta


class _Rung:
    """The trials recorded at one rung, best first (ties by trial number, failed and NaN last)."""

    def __init__(self, asha: Asha, index: int, trials: Iterable[TrialView]) -> None:
        entries = []
        for t in trials:
            if len(t.values) > index:
                value: float | None = t.values[index]
            elif t.state is TrialState.FAILED and len(t.values) == index and t.passed == index:
                value = None  # failed while training toward this rung: it counts there, the worst
            else:
                continue
            key = -math.inf if t.state in DROPPED else asha.key(value)
            entries.append((-key, t.number, value))
        entries.sort()
        self.rank = {number: i for i, (_, number, _) in enumerate(entries, 1)}  # a dict: 1,000 trials stay cheap
        self.top = math.ceil(len(entries) / asha.eta)
        last = entries[self.top - 1] if entries else None
        self.cut = None if last is None or last[0] == math.inf else last[2]

    def standing(self, number: int) -> Standing:
        rank = self.rank[number]
        return Standing(rank, len(self.rank), self.cut, rank <= self.top)


# ---- the decision -------------------------------------------------------------------------------------------------
def decide(asha: Asha, trials: Sequence[TrialView]) -> tuple[Decision, ...]:
    """What to do now: the rung decisions of the running trials that reached a rung (`Continue`, `Pause`, by trial
    number), then the promotions (highest rung first, best ranked first), then the launches (by trial number), then
    `Done` if nothing runs after them. `trials` is every trial of the sweep, pending ones included."""
    trials = sorted(trials, key=lambda t: t.number)
    reached = _stop_at_reached(asha, trials)
    if reached is not None:
        return (reached,)
    rungs = [_Rung(asha, j, trials) for j in range(asha.top)]
    out: list[Decision] = []
    running = [t.number for t in trials if t.state is TrialState.RUNNING]
    for t in trials:
        j = len(t.values) - 1
        if t.state is not TrialState.RUNNING or j < t.passed or j >= asha.top:
            continue  # not at a rung it was not yet judged at (the top: it completes)
        s = rungs[j].standing(t.number)
        kind = Continue if s.ranks else Pause
        out.append(kind(t.number, j, asha.milestones[j], s.rank, s.of, s.cut))
        if not s.ranks:
            running.remove(t.number)
    slots = asha.concurrency - len(running)
    for p in _promotable(asha, trials, rungs):
        if slots <= 0:
            break
        out.append(p)
        slots -= 1
        running.append(p.trial)
    for t in trials:
        if slots <= 0:
            break
        if t.state is TrialState.PENDING:
            out.append(Launch(t.number))
            slots -= 1
            running.append(t.number)
    if not running:
        best = best_trial(asha, trials)
        value = None if best is None else _final(next(t for t in trials if t.number == best))
        out.append(Done(best, value, "every trial completed, failed or paused below its rung's top 1/eta"))
    return tuple(out)


def _promotable(asha: Asha, trials: Sequence[TrialView], rungs: list[_Rung]) -> list[Promote]:
    found: list[Promote] = []
    for j in reversed(range(asha.top)):
        at_rung = []
        for t in trials:
            if t.state is TrialState.PAUSED and len(t.values) - 1 == j and t.passed <= j:
                s = rungs[j].standing(t.number)
                if s.ranks:
                    at_rung.append(Promote(t.number, j, asha.milestones[j], s.rank, s.of, s.cut))
        found.extend(sorted(at_rung, key=lambda p: p.rank))
    return found


def _stop_at_reached(asha: Asha, trials: Sequence[TrialView]) -> Done | None:
    if asha.stop_at is None:
        return None
    target = asha.key(asha.stop_at)
    hits = []
    for t in trials:
        if t.state in DROPPED:
            continue
        best = max((asha.key(v) for v in (*t.values, t.objective) if v is not None), default=-math.inf)
        if best >= target:
            hits.append((-best, t.number))
    if not hits:
        return None
    key, number = min(hits)
    value = -key if asha.mode == "max" else key
    return Done(number, value, f"trial {number}'s objective {value:g} reached stop_at = {asha.stop_at:g}")


# ---- the best --------------------------------------------------------------------------------------------------
def ranking(asha: Asha, trials: Sequence[TrialView]) -> tuple[int, ...]:
    """The trials best first, for `isaacd sweep status`: those that got furthest (the highest rung with a value)
    first, then by their value there, then by trial number; failed and cancelled ones after, then the ones with no
    value yet (the furthest along first)."""

    def order(t: TrialView) -> tuple[int, int, float, int, int]:
        dropped = 1 if t.state in DROPPED else 0
        if not t.values:
            return (2, 0, 0.0, -t.iteration, t.number)
        return (dropped, -len(t.values), -asha.key(t.values[-1]), 0, t.number)

    return tuple(t.number for t in sorted(trials, key=order))


def best_trial(asha: Asha, trials: Sequence[TrialView]) -> int | None:
    """The sweep's best trial: the first of `ranking` that recorded a value and neither failed nor was cancelled."""
    by_number = {t.number: t for t in trials}
    for number in ranking(asha, trials):
        t = by_number[number]
        if t.values and t.state not in DROPPED:
            return number
    return None


def _final(t: TrialView) -> float | None:
    return t.values[-1] if t.values else None
