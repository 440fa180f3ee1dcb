"""What the status view and the watchdogs' signals read of a job's runner: the parts both need, as read-only
Protocols (the runner's parts satisfy them; nothing here can change the runner).

Each fact is read from the part that owns it: the config from the job's setting (attempt/setting.py), the model and
history from its record (attempt/record.py), the live attempt and its progress from its observer
(attempt/observer.py); the runner forwards none of them."""

from __future__ import annotations

from typing import Protocol

from ..config.schema import JobConfig
from ..jobs.model import JobModel
from ..observations.tensorboard import ScalarPoint, TensorBoardTail
from ..runtimes.base import Handle, Runtime
from ..history.store import Attempt, JobHistory
from ..observations.checkpoints import Checkpoint


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


class SettingView(Protocol):
    """The job's config (attempt/setting.py JobSetting)."""

    @property
    def cfg(self) -> JobConfig: ...  # in force: names the GPUs the host's queue gave it (issue 31)

    @property
    def written(self) -> JobConfig: ...  # as written in the config


class RecordView(Protocol):
    """The job's saved model and history (attempt/record.py JobRecord)."""

    @property
    def model(self) -> JobModel: ...

    @property
    def history(self) -> JobHistory: ...

    @property
    def persist_error(self) -> str | None: ...  # the last failed save, until a save succeeds


class ObserverView(Protocol):
    """The live attempt and what it has shown (attempt/observer.py AttemptObserver)."""

    @property
    def live(self) -> LiveAttemptView: ...

    @property
    def iteration(self) -> int | None: ...

    @property
    def scalars(self) -> dict[str, float]: ...

    @property
    def last_progress_mono(self) -> float | None: ...

    @property
    def last_progress_wall(self) -> float | None: ...

    @property
    def checkpoint(self) -> Checkpoint | None: ...  # newest on the timeline, as of the last scan

    def job_iteration(self, step: int | None, attempt: Attempt) -> int | None: ...


class RunnerParts(Protocol):
    """The job's setting, record and observer, and its runtime."""

    @property
    def setting(self) -> SettingView: ...

    @property
    def record(self) -> RecordView: ...

    @property
    def observer(self) -> ObserverView: ...

    @property
    def runtime(self) -> Runtime: ...
