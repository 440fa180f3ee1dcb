"""What the watchdogs read about a job each tick (`JobSignals`), built from its runner by `job_signals`.

A value: the watchdogs never reach into the runner. Times here are monotonic, unlike the status's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..config.schema import JobConfig
from ..jobs.model import JobState
from ..jobs.queue_entry import QueueEntry, queue_entry
from .types import SpareStatus
from ..observations.checkpoints import Checkpoint
from ..observations.tensorboard import ScalarPoint
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
    queue: QueueEntry | None = None  # a job the host's queue places (issue 31): its request and place
    # its newest complete checkpoint's iteration as of the observer's last scan, and where a copy of its newest is
    # looked for (PBT's exploit, issue 40: the current run dir first, then that checkpoint's folder)
    checkpoint_iteration: int | None = None
    checkpoint_dirs: tuple[str, ...] = ()
    resumed_from: str | None = None  # its current attempt's resume point (a PBT exploit's copy, or its own)


class SpareView(Protocol):
    def status(self) -> SpareStatus: ...


class EvalView(Protocol):
    def gpu_bytes(self) -> int: ...


class SignalSource(RunnerParts, Protocol):
    """What a job's signals are built from: the runner's parts (status/source.py), its spare and eval keepers."""

    @property
    def spares(self) -> SpareView: ...

    @property
    def evals(self) -> EvalView: ...


def job_signals(r: SignalSource) -> JobSignals:
    cfg, m, obs = r.setting.cfg, r.record.model, r.observer
    live, attempt = obs.live, r.record.history.current
    prog = live.tail.progress if live.tail else None
    return JobSignals(
        name=cfg.name, cfg=cfg,
        alive=m.state in (JobState.STARTING, JobState.RUNNING) and live.handle is not None,
        attempt=attempt.number if attempt else 0, attempt_started_at=live.started_mono,
        first_step=obs.job_iteration(prog.first_step, attempt) if prog and attempt else None,
        iteration=obs.job_iteration(prog.last_step, attempt) if prog and attempt else None,
        last_progress_time=obs.last_progress_mono, new_points=tuple(live.new_points), pids=tuple(live.pids),
        parked_by=m.parked_by, state=m.state,
        waiting=bool(live.handle is not None and r.runtime.describe(live.handle).waiting),
        queue=queue_entry(r.setting.written, m, spare_bytes(r.setting.written, r.spares) + eval_bytes(r.setting.written,
                                                                                                    r.evals)),
        checkpoint_iteration=obs.checkpoint.iteration if obs.checkpoint is not None else None,
        checkpoint_dirs=checkpoint_dirs(attempt.run_dir if attempt else None, obs.checkpoint),
        resumed_from=(attempt.resume_from or {}).get("path") if attempt else None)


def checkpoint_dirs(run_dir: str | None, newest: Checkpoint | None) -> tuple[str, ...]:
    """Where a job's newest complete checkpoint is: its current run dir (a save since the last scan), then the folder
    of the newest the scan found."""
    out = [run_dir] if run_dir else []
    if newest is not None and str(newest.path.parent) not in out:
        out.append(str(newest.path.parent))
    return tuple(out)


IMPORTS_SPARE_BYTES = 512 * 2**20  # an imports-only spare's CUDA context (README "warm spare": ~0.5 GiB)


def spare_bytes(written: JobConfig, spares: SpareView) -> int:
    """The GPU memory a job's live spare holds on each of its GPUs, which the queue counts as its job's: a booted one
    about the trainer's own memory (a second environment), an imports-only one its CUDA context; a spare on the CPU,
    or of a job that is not placed by the queue or asks for whole GPUs, counts 0. The spare's status (a look at the
    GPU's processes) is asked for only here, for a job the queue places: this runs every tick."""
    ask = written.gpu_memory_bytes
    if not written.placed_by_isaacd or not written.device.startswith("cuda") or ask is None:
        return 0
    spare = spares.status()
    if not spare.live:
        return 0
    return spare.cuda_memory_bytes or (ask if spare.mode == "booted" else IMPORTS_SPARE_BYTES)


def eval_bytes(written: JobConfig, evals: EvalView) -> int:
    """The GPU memory a running evaluation holds on the job's GPU (attempt/evals.py, issue 41): counted with the
    spare's, so the queue drops both (DropSpare) when a waiting job needs it; 0 for a job the queue does not place."""
    if not written.placed_by_isaacd or not written.device.startswith("cuda"):
        return 0
    return evals.gpu_bytes()
