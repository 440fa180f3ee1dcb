"""What an evaluation cost the training beside it, measured, and how long the next one waits (issue 41). Pure.

Measured on an H100 (bench/results/issue41-eval-beside-gpu-pinned.txt): an evaluation of the Isaac Lab 3.0 cart-pole on
the job's own GPU stalls the trainer for ~0.24 s while it steps (the two processes' CUDA contexts take turns on the
GPU), every time; at `every = 1`, an evaluation beside the training all the time, that is 2.3 % of its throughput. The
cost of one evaluation depends on the task, the GPU and what else runs, so isaacd measures it instead of guessing:

* the trainer's iteration wall times (its TensorBoard points, as the queue's estimates read them) give its usual
  iteration time: the mean of the intervals that overlap no evaluation;
* an evaluation's cost: the time the intervals that ended during it (and up to SETTLE seconds after: the points
  come once an iteration ends) took, less what as many usual iterations take. Net, not the sum of the excesses: on a
  noisy host (an H100 VM whose iteration times wandered +-10 % with no evaluation, 2026-12-07) summing only the
  iterations above the usual counted that noise as 1.7-4.6 s "lost" per evaluation and paced them 300 s apart; the
  net time is what the throughput (iterations per second, what the goal measures) loses, and noise averages out of it;
* the next evaluation waits until the cost is at most `budget` of the time from this evaluation's start:
  pause = cost / budget - its own duration (0 where it cost little), the cost being the mean of the RECENT newest
  measures (one evaluation's net time is noisy; their mean is not, and one lucky measure does not unpace the next).

The keeper (attempt/evals.py) feeds the points to its `Pacer` and applies the pause; this module decides.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

KEEP = 1000  # the newest intervals kept (at 0.15 s an iteration: 2.5 minutes; at 3 s: 50 minutes)
SETTLE = 1.0  # seconds after an evaluation's end whose intervals still count as its
MIN_BASELINE = 3  # intervals outside every evaluation before a usual time is trusted (and as many as during, to:)
MAX_BASELINE = 200  # outside intervals that are always enough (a mean of 200 is off by 1/14 of one's spread)
MEASURE_LIMIT = 120.0  # seconds after an evaluation's end without enough points: not measured, no pause
RECENT = 5  # the newest measures whose mean cost paces the next evaluation


@dataclass(frozen=True)
class Span:
    """An evaluation's run, wall times (its start and the keeper's sight of its exit)."""

    start: float
    end: float

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass(frozen=True)
class Cost:
    """What one evaluation cost the training: `lost` seconds of its time over the evaluation's `seconds` (net: below 0
    where the iterations beside it happened to run faster than usual)."""

    lost: float
    seconds: float
    usual: float  # the trainer's usual iteration time (mean)
    iterations: int  # the intervals that counted
    window: tuple[int, int] = (0, 0)  # the trainer's steps whose intervals were looked at (first, last end step)
    span: Span | None = None  # the evaluation's run it measured
    usual_of: int = 0  # the intervals outside every evaluation whose mean is `usual`

    @property
    def share(self) -> float:
        return self.lost / self.seconds if self.seconds > 0 else 0.0


def pause_after(cost: Cost, budget: float) -> float:
    """Seconds the next evaluation waits after this one's end so that `cost.lost` is at most `budget` of the time from
    this one's start to the next one's: lost / budget - its own duration, never negative. 0 where budget is 0 (off)."""
    if budget <= 0:
        return 0.0
    return max(0.0, cost.lost / budget - cost.seconds)


class TrainerSteps:
    """The trainer's iteration intervals (end wall time, seconds, end step) of one attempt, from its TensorBoard points:
    a step's wall time is its first point's (every tag of an iteration is written at its end, within milliseconds)."""

    def __init__(self) -> None:
        self.attempt: object = None
        self.last: tuple[int, float] | None = None
        self.intervals: deque[tuple[float, float, int]] = deque(maxlen=KEEP)

    def add(self, attempt: object, step: int, wall: float) -> None:
        if attempt != self.attempt:  # a new attempt: its start-up is no iteration of the old one's
            self.attempt, self.last = attempt, None
            self.intervals.clear()
        if self.last is not None and step <= self.last[0]:
            return  # an older step, or another tag of the same one
        if self.last is not None and step == self.last[0] + 1 and wall > self.last[1]:
            self.intervals.append((wall, wall - self.last[1], step))
        self.last = (step, wall)


def cost(steps: TrainerSteps, span: Span, evaluations: list[Span]) -> Cost | None:
    """The training time `span`'s evaluation cost, or None while it cannot be told yet: no interval has ended SETTLE
    seconds past its end (the trainer's points still to come), or fewer intervals overlap no evaluation
    (`evaluations`: every recent one, `span` included) than MIN_BASELINE and than ended during it. Why as many: the
    usual time's error counts once per interval during it, so a usual of the 3 iterations before an evaluation that
    began at the attempt's 4th (the first checkpoint's) was off by 10 % under load, a cost off by as much as an H100's
    whole evaluation cost; with as many outside as during, the usual is no noisier than their own mean."""
    if not steps.intervals or steps.intervals[-1][0] < span.end + SETTLE:
        return None
    outside = [d for end, d, _ in steps.intervals
               if not any(end - d < e.end + SETTLE and end > e.start for e in evaluations)]
    during = [d for end, d, _ in steps.intervals if span.start < end <= span.end + SETTLE]
    if len(outside) < max(MIN_BASELINE, min(len(during), MAX_BASELINE)):
        return None
    usual = statistics.fmean(outside)
    lost = sum(during) - usual * len(during)
    return Cost(lost=lost, seconds=span.seconds, usual=usual, iterations=len(during),
                window=(steps.intervals[0][2], steps.intervals[-1][2]), usual_of=len(outside), span=span)


class Pacer:
    """One job's pacing state for the eval keeper: the trainer's steps, the recent evaluations' runs, the one whose
    cost is still to be measured, and the newest measures (each with its evaluation's run)."""

    def __init__(self) -> None:
        self.steps = TrainerSteps()
        self.spans: deque[Span] = deque(maxlen=20)
        self.pending: Span | None = None
        self.recent: deque[Cost] = deque(maxlen=RECENT)  # the newest measures, the newest last
        self.unmeasured: str | None = None  # why the newest evaluation's cost was given up, until the keeper says it

    def observe(self, attempt: object, points: Iterable[Any]) -> None:
        """This tick's TensorBoard points of the job's current attempt (observations/tensorboard.ScalarPoint)."""
        for p in points:
            self.steps.add(attempt, p.step, p.wall_time)

    def ended(self, start: float, end: float, measure: bool = True) -> None:
        """An evaluation's run ended (wall times); `measure`: its cost is to be told (not for one killed by isaacd)."""
        span = Span(start, end)
        self.spans.append(span)
        if measure:
            self.pending = span

    def measure(self, budget: float, training: bool, wall: float) -> Cost | None:
        """The pending evaluation's cost once the trainer's points tell it (then it is the newest measure), else None:
        nothing to measure where no training runs beside it or the budget is 0, and nothing once MEASURE_LIMIT has
        passed without enough points (the trainer logged too little)."""
        span = self.pending
        if span is None:
            return None
        if not training or budget <= 0:
            self.pending = None
            return None
        got = cost(self.steps, span, list(self.spans))
        if got is None:
            if wall - span.end > MEASURE_LIMIT:
                self.pending, self.unmeasured = None, self._why_unmeasured(span)
            return None
        self.pending = None
        self.recent.append(got)
        return got

    def _why_unmeasured(self, span: Span) -> str:
        after = sum(1 for end, _, _ in self.steps.intervals if end > span.end + SETTLE)
        return (f"the trainer logged {after} iterations in the {MEASURE_LIMIT:g} s after its end, too few to tell its "
                "usual iteration time beside it; the next evaluation is not held back for this one")

    def take_unmeasured(self) -> str | None:
        """Why the newest evaluation's cost was given up (once), for the keeper's `eval_cost_unmeasured` event."""
        why, self.unmeasured = self.unmeasured, None
        return why

    def paced_cost(self) -> Cost | None:
        """The newest measure with the mean lost time of the RECENT newest (never below 0): what the pause is of."""
        if not self.recent:
            return None
        lost = max(0.0, statistics.fmean(c.lost for c in self.recent))
        return replace(self.recent[-1], lost=lost)

    def until(self, budget: float, wall: float) -> float | None:
        """The wall time the next evaluation waits for: the newest measured one's end + its pause by `budget`, the one
        in force now (a changed max_training_cost applies at once); None where nothing waits."""
        paced = self.paced_cost()
        if paced is None or paced.span is None:
            return None
        end = paced.span.end + pause_after(paced, budget)
        return end if end > wall else None

    def event(self, got: Cost, budget: float) -> dict[str, Any]:
        """The `eval_cost` event's fields: this measure, the mean of the recent ones and the pause that mean sets."""
        paced = self.paced_cost() or got
        return {"lost_seconds": round(got.lost, 3), "seconds": round(got.seconds, 2), "share": round(got.share, 4),
                "iterations": got.iterations, "usual_iteration_seconds": round(got.usual, 4),
                "usual_of": got.usual_of, "steps": list(got.window),
                "evaluation": [round(got.span.start, 6), round(got.span.end, 6)] if got.span else None,
                "recent_lost_seconds": round(paced.lost, 3), "recent": len(self.recent), "budget": budget,
                "pause_seconds": round(pause_after(paced, budget), 1)}

    def shown(self, budget: float, wall: float, idle: bool) -> Shown:
        """What the status shows of the pacing (paced_until only while no evaluation runs): the cost it paces by."""
        c = self.paced_cost()
        return Shown(cost_seconds=round(c.lost, 3) if c is not None else None,
                     cost_share=round(c.share, 4) if c is not None else None,
                     paced_until=self.until(budget, wall) if idle else None)


@dataclass(frozen=True)
class Shown:
    """EvalsStatus's fields of the pacing: the cost it paces by (the recent measures' mean seconds, and their share of
    the newest evaluation's duration) and the next one's wait (wall)."""

    cost_seconds: float | None
    cost_share: float | None
    paced_until: float | None
