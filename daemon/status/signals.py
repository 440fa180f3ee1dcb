"""What the watchdogs read about a job each tick (`JobSignals`), built from its runner by `job_signals`.

A value: the watchdogs never reach into the runner. Times here are monotonic, unlike the status's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..config.schema import JobConfig
from ..jobs.model import JobState
from ..observations.tensorboard import ScalarPoint
from ..history.store import Attempt
from .source import RunnerParts


@dataclass(frozen=True)
class JobSignals:
    """What the watchdogs read about a job this tick (a value: they never reach into the runner)."""

    name: str
    cfg: JobConfig
    alive: bool  # a trainer runs and is not being stopped
    attempt: int
    attempt_started_at: float | None  # monotonic
    first_step: int | None
    iteration: int | None
    last_progress_time: float | None  # monotonic
    new_points: tuple[ScalarPoint, ...] = ()
    pids: tuple[int, ...] = ()
    parked_by: str | None = None
    state: JobState = JobState.PENDING
    waiting: bool = False  # the runtime has not placed the trainer yet (ray: no room): not a hang


class SignalSource(RunnerParts, Protocol):
    """What a job's signals are built from (the runner's attributes of these names)."""

    @property
    def last_progress_mono(self) -> float | None: ...

    @property
    def state(self) -> JobState: ...

    def _job_iteration(self, step: int | None, attempt: Attempt) -> int | None: ...


def job_signals(r: SignalSource) -> JobSignals:
    live, attempt = r.live, r.history.current
    prog = live.tail.progress if live.tail else None
    return JobSignals(
        name=r.cfg.name, cfg=r.cfg,
        alive=r.state in (JobState.STARTING, JobState.RUNNING) and live.handle is not None,
        attempt=attempt.number if attempt else 0, attempt_started_at=live.started_mono,
        first_step=r._job_iteration(prog.first_step, attempt) if prog and attempt else None,
        iteration=r._job_iteration(prog.last_step, attempt) if prog and attempt else None,
        last_progress_time=r.last_progress_mono, new_points=tuple(live.new_points), pids=tuple(live.pids),
        parked_by=r.model.parked_by, state=r.state,
        waiting=bool(live.handle is not None and r.runtime.describe(live.handle).waiting))
