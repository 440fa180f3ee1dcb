"""What the status view and the watchdogs' signals read of a job's runner: the parts both need, as read-only
Protocols (the runner's attributes of these names satisfy them; nothing here can change the runner)."""

from __future__ import annotations

from typing import Protocol

from ..config.schema import JobConfig
from ..jobs.model import JobModel
from ..observations.tensorboard import ScalarPoint, TensorBoardTail
from ..runtimes.base import Handle, Runtime
from ..history.store import JobHistory


class LiveAttemptView(Protocol):
    """The current attempt's trainer (attempt/observer.py LiveAttempt), as the readers see it."""

    @property
    def handle(self) -> Handle | None: ...

    @property
    def tail(self) -> TensorBoardTail | None: ...

    @property
    def started_mono(self) -> float | None: ...

    @property
    def new_points(self) -> list[ScalarPoint]: ...

    @property
    def pids(self) -> list[int]: ...

    @property
    def boot_line(self) -> str | None: ...

    @property
    def boot_phase(self) -> tuple[str | None, float | None]: ...


class RunnerParts(Protocol):
    """The job's config, its saved model and history, its live attempt and its runtime."""

    @property
    def cfg(self) -> JobConfig: ...

    @property
    def model(self) -> JobModel: ...

    @property
    def history(self) -> JobHistory: ...

    @property
    def live(self) -> LiveAttemptView: ...

    @property
    def runtime(self) -> Runtime: ...
