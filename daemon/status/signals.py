"""What the watchdogs read about a job each tick (`JobSignals`), built from its runner by `job_signals`.

A value: the watchdogs never reach into the runner. Times here are monotonic, unlike the status's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..config.schema import JobConfig
from ..jobs.model import JobModel, JobState, Then
from .types import SpareStatus
from ..observations.tensorboard import ScalarPoint
from ..history.store import Attempt
from .source import RunnerParts


@dataclass(frozen=True)
class QueueFacts:
    """What the host's queue reads of a job that asks for GPUs (scheduling/hook.py turns it into the scheduler's
    input). Times: `submitted_at` wall clock (the order survives a reboot), `placed_at` monotonic."""

    gpus: int
    memory_bytes: int | None  # on each GPU; None: whole GPUs
    priority: int
    preemptible: bool
    waiting: bool  # queued: it wants GPUs now
    submitted_at: float | None
    placement: tuple[int, ...]
    placed_at: float | None
    backfill: bool
    preempting: bool  # a preemption's stop is under way (it saves, then gives its GPUs back)
    spare_bytes: int  # GPU memory its warm spare holds on each of its GPUs
    owner: str | None = None  # whose job (its written config's `owner`; None: the supervisor's user's): quotas count it
    not_before: float | None = None  # monotonic: backing off with its GPUs given back, in line again after this


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
    queue: QueueFacts | None = None  # a job the host's queue places (issue 31)


class SpareView(Protocol):
    def status(self) -> SpareStatus: ...


class SignalSource(RunnerParts, Protocol):
    """What a job's signals are built from (the runner's attributes of these names)."""

    @property
    def written(self) -> JobConfig: ...

    @property
    def spares(self) -> SpareView: ...

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
        waiting=bool(live.handle is not None and r.runtime.describe(live.handle).waiting),
        queue=queue_facts(r.written, r.model, r.spares))


IMPORTS_SPARE_BYTES = 512 * 2**20  # an imports-only spare's CUDA context (README "warm spare": ~0.5 GiB)


def queue_facts(written: JobConfig, m: JobModel, spares: SpareView) -> QueueFacts | None:
    """The queue's view of a job, or None for one that names its GPUs (or runs on Ray). A live spare on a GPU counts
    as its job's: a booted one about the trainer's own memory (a second environment), an imports-only one its CUDA
    context; a spare on the CPU holds no GPU memory. The spare's status (a look at the GPU's processes) is asked for
    only here, for a job the queue places: this runs every tick."""
    if not written.placed_by_isaacd:
        return None
    ask = written.gpu_memory_bytes
    spare_bytes = 0
    if written.device.startswith("cuda") and ask is not None and (spare := spares.status()).live:
        spare_bytes = spare.cuda_memory_bytes or (ask if spare.mode == "booted" else IMPORTS_SPARE_BYTES)
    return QueueFacts(gpus=written.ranks, memory_bytes=ask, priority=written.priority,
                      preemptible=written.preemptible, waiting=m.state == JobState.QUEUED,
                      submitted_at=m.submitted_at, placement=m.placement, placed_at=m.placed_at, backfill=m.backfill,
                      preempting=m.stop is not None and m.stop.then == Then.QUEUE and m.state == JobState.STOPPING,
                      spare_bytes=spare_bytes, owner=written.owner,
                      not_before=m.backoff_until if m.state == JobState.BACKING_OFF and not m.placement else None)
