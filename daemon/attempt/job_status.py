"""A job's status, built from its runner: what `isaacd status` and /metrics show of one job at one tick.

The runner hands itself over as `RunnerView`: its parts (status/source.py), each read for the facts it owns, and the
runner's own few (its clock, when its state last changed, the launch's wait); nothing here changes the runner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ..caches import compile_caches
from ..caches.sizes import SIZES, SizeSampler
from .setting import timeline_attempts
from ..clock import Clock
from .deadlines import LaunchWait
from ..config.schema import JobConfig
from ..gpu.assign import status_gpus
from ..history.store import job_log_path
from ..jobs.model import JobModel, JobState
from ..jobs.queue_entry import queue_entry
from ..observations.checkpoints import Checkpoint
from ..observations.tensorboard import finite_or_none
from ..runtimes.view import RuntimeView
from ..workflows import Resolved
from ..status.source import RunnerParts, SettingView
from ..evals.types import EvalsStatus
from ..status.types import BootStatus, QueueStatus
from ..status.types import (BackupStatus, CheckpointStatus, CompileCacheStatus, JobStatus, LaunchWaitStatus, SpareStatus,
                    WatchdogTripCount)


class SpareSource(Protocol):
    """The spare keeper (attempt/spare.py), as a job's status reads it."""

    def status(self) -> SpareStatus: ...


class EvalSource(Protocol):
    """The eval keeper (attempt/evals.py), as a job's status reads it."""

    def status(self) -> EvalsStatus | None: ...


class BackupSource(Protocol):
    """The backup keeper (backup/keeper.py), as a job's status reads it."""

    def status(self) -> BackupStatus: ...


class StatusSetting(SettingView, Protocol):
    """The job's setting (attempt/setting.py), with the workflow it resolved to."""

    @property
    def resolved(self) -> Resolved | None: ...


class RunnerView(RunnerParts, Protocol):
    """What a job's status is built from: the runner's parts and the runner's own attributes of these names
    (read-only here, so plain attributes of narrower types satisfy them)."""

    @property
    def setting(self) -> StatusSetting: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def state_since(self) -> float: ...

    @property
    def spares(self) -> SpareSource: ...

    @property
    def evals(self) -> EvalSource: ...

    @property
    def backup(self) -> BackupSource | None: ...

    @property
    def launch_waits(self) -> str | None: ...

    @property
    def launch_wait(self) -> LaunchWait | None: ...

    @property
    def state_dir(self) -> Path: ...

    def num_envs(self) -> int: ...


def checkpoint_status(c: Checkpoint | None) -> CheckpointStatus | None:
    return None if c is None else CheckpointStatus(iteration=c.iteration, path=str(c.path), time=c.mtime)


# The job's cache directories per config in force (JobConfig is frozen: the same object, the same directories): worked
# out once, not for every job at every tick (issue 39: 1,000 jobs). Only their sizes are read each time.
_CACHE_DIRS: dict[tuple[int, Path], tuple[JobConfig, list[compile_caches.CacheDir]]] = {}


def _cache_dirs(cfg: JobConfig, state_dir: Path) -> list[compile_caches.CacheDir]:
    hit = _CACHE_DIRS.get((id(cfg), state_dir))
    if hit is not None and hit[0] is cfg:
        return hit[1]
    if len(_CACHE_DIRS) > 20_000:  # configs replaced by reloads: bound it
        _CACHE_DIRS.clear()
    dirs = compile_caches.for_job(cfg, state_dir)
    _CACHE_DIRS[(id(cfg), state_dir)] = (cfg, dirs)
    return dirs


def compile_cache_status(cfg: JobConfig, state_dir: Path, sizes: SizeSampler = SIZES) -> tuple[CompileCacheStatus, ...]:
    """The job's compile caches with their last measured sizes (walked off the tick: caches/sizes.py)."""
    return tuple(CompileCacheStatus(name=d.name, path=str(d.host), size_bytes=sizes.size(d.host))
                 for d in _cache_dirs(cfg, state_dir))


def boot_status(r: RunnerView, desc: RuntimeView) -> BootStatus | None:
    """While the attempt's trainer runs and has not logged its first iteration: how long it has been booting, the
    phase the shim reported and its last output line (attempt/observer.py reads them)."""
    attempt, live = r.record.history.current, r.observer.live
    if r.record.model.state != JobState.STARTING or live.handle is None or attempt is None or desc.waiting:
        return None
    now = r.clock.wall()
    phase, since = live.boot_phase
    return BootStatus(seconds=round(now - attempt.started_at, 1) if attempt.started_at else None, phase=phase,
                      phase_seconds=round(max(now - since, 0.0), 1) if phase and since else None,
                      last_line=live.boot_line)


def queue_status(written: JobConfig, m: JobModel, wall_minus_mono: float) -> QueueStatus | None:
    """A job the host's queue places: its queue entry as the status shows it (its place and why it waits:
    scheduling/hook.py)."""
    entry = queue_entry(written, m)
    return None if entry is None else QueueStatus.of(entry, wall_minus_mono)


def job_status(r: RunnerView) -> JobStatus:
    """The job now: a fresh value each tick, never changed afterwards."""
    h, m, obs, cfg = r.record.history, r.record.model, r.observer, r.setting.cfg
    live = obs.live
    attempt = h.current
    desc = r.runtime.describe(live.handle) if live.handle else RuntimeView()
    prog = live.tail.progress if live.tail else None
    wall_minus_mono = r.clock.wall() - r.clock.monotonic()
    backoff_until = m.backoff_until + wall_minus_mono if m.state == JobState.BACKING_OFF and \
        m.backoff_until is not None else None
    # why it has not started yet: a launch waiting for the bucket's checkpoint, or a runtime with no room (ray)
    waiting = r.launch_waits if r.launch_waits is not None else desc.waiting
    reason = m.reason
    if r.launch_waits is not None or (m.state == JobState.STARTING and desc.waiting):
        reason = f"{m.reason}; waiting: {waiting}"
    resume_from = attempt.resume_from if attempt else None
    lw = r.launch_wait
    launch_wait = LaunchWaitStatus(lw.what, lw.label, round(lw.waited(r.clock.monotonic()), 1), lw.bound) \
        if lw is not None else None
    return JobStatus(
        name=cfg.name,
        owner=cfg.owner,
        state=m.state.value,
        state_since=r.state_since,
        state_reason=reason,
        runtime=cfg.runtime,
        workflow=cfg.workflow,
        contract=r.setting.resolved.workflow.contract if r.setting.resolved else None,
        task=cfg.task,
        device=cfg.device,
        gpus=status_gpus(cfg),
        pid=desc.pid,
        pids=tuple(live.pids),
        cgroup=desc.cgroup,
        container_id=desc.container_id,
        unit=desc.unit,
        node=desc.node,
        waiting=waiting,
        launch_wait=launch_wait,
        iteration=obs.iteration if obs.iteration is not None else h.last_iteration,
        max_iterations=cfg.max_iterations,
        mean_reward=finite_or_none(prog.mean_reward if prog else obs.scalars.get("Train/mean_reward",
                                                                               h.last_mean_reward)),
        fps=finite_or_none(prog.fps if prog else obs.scalars.get("Perf/total_fps", h.last_fps)),
        # a resumed run redoes the iterations after its checkpoint: say so until it has caught up
        resume_from=CheckpointStatus.from_json(resume_from) if resume_from else None,
        redo_until=max((a.last_iteration for a in timeline_attempts(h)[:-1] if a.last_iteration is not None),
                       default=None),  # since the last reset
        scalars=dict(obs.scalars),
        last_progress_time=obs.last_progress_wall,
        checkpoint=checkpoint_status(obs.checkpoint),
        restarts=m.restarts,
        num_envs=r.num_envs(),  # in use: less than configured after a step-down (CUDA out of memory)
        num_envs_configured=cfg.num_envs,
        cuda_ooms=dict(m.cuda_ooms),
        last_restart_reason=m.last_restart_reason,
        restarts_by_reason=dict(m.restarts_by_reason),
        rollbacks=m.rollbacks,
        run_dir=attempt.run_dir if attempt else None,
        attempt=attempt.number if attempt else 0,
        started_at=attempt.started_at if attempt and m.state.active else None,
        backoff_until=backoff_until,
        stopping_then=m.stop.then.value if m.stop is not None and m.state == JobState.STOPPING else None,
        parked_by=m.parked_by,
        persist_error=r.record.persist_error,
        spare=r.spares.status(),
        log_path=str(job_log_path(r.state_dir, cfg.name)),
        watchdogs={},  # the watchdog engine's part, added at publish (supervisor.job_status_hooks)
        watchdog_trips=tuple(WatchdogTripCount(watchdog=k.split("/")[0], action=k.split("/")[1], count=v)
                             for k, v in m.watchdog_trips),
        backup=r.backup.status() if r.backup is not None else None,
        compile_caches=compile_cache_status(cfg, r.state_dir),
        boot=boot_status(r, desc),
        queue=queue_status(r.setting.written, m, wall_minus_mono),
        evals=r.evals.status(),
    )
