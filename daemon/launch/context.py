"""What one launch is about, computed once per attempt (or spare) and read by every prepare step (steps.py).

A cold start and a warm spare fill the same fields; what differs between them is data: the spare has no resume
point and no W&B run, runs its own head command, and brings dirs of its own (its staging) and variables of its own
(its FIFO, its preload list). An evaluation (issue 41) is the job's cold start without resume or W&B run, with its
checkpoint and settings in `evaluation`."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from ..caches.compile_caches import CacheDir
from ..config.schema import JobConfig
from ..observations.checkpoints import Checkpoint
from ..os_seam.oscalls import RunAs


class Role(enum.StrEnum):
    ATTEMPT = "attempt"  # the job's trainer, attempt N (a cold start)
    SPARE = "spare"  # a warm spare waiting to take an attempt over (attempt/spare.py)
    EVAL = "eval"  # an evaluation of one checkpoint beside training (attempt/evals.py, issue 41)


@dataclass(frozen=True)
class EvalLaunch:
    """One evaluation of one checkpoint. `gpu`: the GPU it runs on (CUDA_VISIBLE_DEVICES' spelling: an index or a
    UUID), None: on the CPU."""

    checkpoint: str  # absolute path
    iteration: int
    episodes: int
    num_envs: int
    seed: int
    gpu: str | None
    result: str  # where the result JSON goes: <checkpoint>.eval.json
    tb_dir: str  # <run dir>/eval: its own TensorBoard event file(s)
    video: int  # 0, or the video's length in steps
    video_dir: str  # <run dir>/eval/videos
    beside_pids: tuple[int, ...] = ()  # the training's processes now (a GPU evaluation keeps off their CPUs)


@dataclass(frozen=True)
class LaunchContext:
    role: Role
    cfg: JobConfig  # the config in force (placed on its GPUs; with a CUDA OOM's step-down of num_envs)
    state_dir: Path
    owner: RunAs | None  # whom it runs as (issue 32), resolved once: None, the supervisor's own user
    token: str  # saved before the spawn: how a supervisor finds the process again
    events: Path | None  # its side channel (the attempt's shim events, the spare's events file); None: no shim
    caches: tuple[CacheDir, ...]  # the job's compile caches (compile_caches.for_job)
    experiment_dir: Path  # where the trainer makes its run dirs
    workdir: Path  # the job's workdir (its logs/ links to log_root): the attempt's cwd
    cwd: Path  # the process's cwd: the workdir, or a booted spare's staging work/
    log_path: Path  # its output file
    argv: tuple[str, ...]  # the host command line (process runtime)
    trainer_args: tuple[str, ...] = ()  # the trainer's flags (container runtimes put them after the image's command)
    attempt: int = 0
    resume: Checkpoint | None = None
    wandb_run: str | None = None  # one W&B run per training; a spare has none until its go
    # the role's own: dirs that exist and become the owner's (deepest last; handed deepest first), dirs made the
    # owner's, dirs handed to a numeric container user, variables set after the environment's scrub, and the
    # same-path mounts of a spare's container
    # (`role_env_defaults`: set only where nothing has set them)
    owner_hands_over: tuple[Path, ...] = ()
    owner_makes: tuple[Path, ...] = ()
    container_user_dirs: tuple[Path, ...] = ()
    role_env: dict[str, str] = field(default_factory=dict)
    role_env_defaults: dict[str, str] = field(default_factory=dict)
    container_argv: tuple[str, ...] = ()
    same_path_mounts: tuple[Path, ...] = ()
    node_env: dict[str, str] = field(default_factory=dict)  # a Ray node's backup settings (backup/remote.py)
    evaluation: EvalLaunch | None = None  # an evaluation's checkpoint and settings (Role.EVAL: launch/evaluation.py)
