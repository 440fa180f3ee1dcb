"""What a sweep reads of its trials each tick (issue 39), pure: a trial's state as ASHA sees it (from its job's
state and what the sweep did with it), its objective's newest values (the TensorBoard points the tick brought), and
the value it records when it reaches a rung."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from ..jobs.model import JobState
from ..observations.tensorboard import ScalarPoint
from .asha import TrialState, smoothed
from .record import TrialRecord
from .spec import EVAL_TAG

SERIES_KEPT = 512  # a trial's newest objective points kept in memory (the smoothing reads the last `smooth`)


def trial_state(t: TrialRecord, job: JobState | None) -> TrialState:
    """ASHA's view of a trial: never launched, running (any state that holds or waits for a slot), paused by the
    sweep, completed, failed, or cancelled (stopped by someone else, or its job gone)."""
    if not t.launched:
        return TrialState.PENDING
    if job is None:
        return TrialState.CANCELLED  # its job file removed (`isaacd cancel`): the sweep does not bring it back
    if job == JobState.COMPLETED:
        return TrialState.COMPLETED
    if job == JobState.FAILED:
        return TrialState.FAILED
    if t.paused:
        return TrialState.PAUSED  # (its stop with a save may still be under way: its GPU is being given back)
    if job == JobState.STOPPED:
        return TrialState.CANCELLED  # an operator's stop; an operator's start makes it running again
    return TrialState.RUNNING


class Series:
    """One trial's objective points, newest last (in memory: a restart reads the run's TensorBoard file again)."""

    def __init__(self) -> None:
        self.points: deque[tuple[int, float]] = deque(maxlen=SERIES_KEPT)
        self.tags: set[str] = set()  # every tag the trial wrote (to name them when the objective's is missing)

    def add(self, points: Iterable[ScalarPoint], tag: str) -> None:
        for p in points:
            self.tags.add(p.tag)
            if p.tag == tag:
                if self.points and p.step <= self.points[-1][0]:  # a resume re-logs from its checkpoint
                    while self.points and self.points[-1][0] >= p.step:
                        self.points.pop()
                self.points.append((p.step, p.value))

    def best(self, mode: str) -> float | None:
        """The best value so far (`objective = "eval"`: a trial counts by its best evaluated checkpoint, the one
        `isaacd best` names, not by its newest)."""
        values = [v for _, v in self.points]
        if not values:
            return None
        return max(values) if mode == "max" else min(values)

    def score(self, tag: str, mode: str, n: int) -> float | None:
        """The trial's objective now: the best evaluation for the eval tag, else the mean of the newest `n`."""
        return self.best(mode) if tag == EVAL_TAG else self.value(n)

    def value(self, n: int) -> float | None:
        """The mean of the newest `n` values: read the tick a trial reaches a rung, so its last `n` iterations
        before the milestone (a tick or two past it at most). TensorBoard steps are not compared with milestones:
        skrl's count timesteps."""
        return smoothed([v for _, v in self.points], n)


def reached(t: TrialRecord, done: int | None, milestones: Sequence[int]) -> int | None:
    """The rung index the trial has just reached and not yet recorded a value at, or None. `done`: the iterations it
    has trained (its job's iteration is the last one's 0-based index: 7 of 8 when it completed)."""
    j = len(t.rung_values)
    if done is None or j >= len(milestones) or done < milestones[j]:
        return None
    return j
