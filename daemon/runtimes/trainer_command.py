"""Turns a job (and the checkpoint chosen for resume) into the trainer's command line, cwd and env.

The flags, run layout and iteration numbering belong to the job's workflow (daemon/workflows/);
this module only assembles them with the launcher, the working directory whose `logs/` is the
job's log_root (Isaac Lab writes `logs/<library>/...` relative to its cwd), and the environment.
"""

from __future__ import annotations

import os
from pathlib import Path

from isaacd_trainer.shim_protocol import (LAUNCH_TOKEN_ENV, SHIM_EVENTS_ENV, SNAPSHOT_BUDGET_ENV,
                                          SNAPSHOT_EVERY_ENV, SNAPSHOT_MIN_SECONDS_ENV)

from ..caches.compile_caches import CacheDir
from ..caches.compile_caches import trainer_env as cache_env
from ..config.schema import JobConfig
from ..observations.checkpoints import Checkpoint
from ..workflows import Resolved, resolve
from ..workflows.detect import isaaclab_dir

TRAINER_ENV_DROP = ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "WATCHDOG_USEC", "WATCHDOG_PID")
BUILTIN_CONTAINER_WORKDIR = "/workspace/isaacd"


def trainer_args(job: JobConfig, resume: Checkpoint | None, seed: int | None = None,
                 resolved: Resolved | None = None) -> list[str]:
    """The trainer's flags for this launch (the same for every runtime)."""
    wf = (resolved or resolve(job)).workflow
    return wf.args(job, resume, job.seed if seed is None else seed)


def process_argv(job: JobConfig, args: list[str], resolved: Resolved | None = None) -> list[str]:
    """The host command line for the process runtime."""
    prog = (resolved or resolve(job)).program(in_container=False)
    return prog.argv(args)


def shim_events_path(state_dir: Path, job: JobConfig, attempt: int) -> Path:
    return state_dir / "shim" / job.name / f"attempt-{attempt}.jsonl"


def workdir_path(job: JobConfig, state_dir: Path) -> Path:
    return state_dir / "work" / job.name


def workdir(job: JobConfig, state_dir: Path) -> Path:
    """A cwd whose logs/ is the job's log_root: where upstream train scripts write their runs."""
    wd = workdir_path(job, state_dir)
    wd.mkdir(parents=True, exist_ok=True)
    link = wd / "logs"
    if not link.is_symlink() or Path(os.readlink(link)) != job.log_root:
        if link.is_symlink():
            link.unlink()
        link.symlink_to(job.log_root, target_is_directory=True)
    job.log_root.mkdir(parents=True, exist_ok=True)
    return wd


def container_workdir(job: JobConfig) -> str:
    """The trainer's cwd inside a container; its logs/ is a bind mount of the job's log_root."""
    if job.workflow == "builtin" or job.command:
        return BUILTIN_CONTAINER_WORKDIR
    root = isaaclab_dir(job)
    return str(root) if root is not None else BUILTIN_CONTAINER_WORKDIR


def host_path(job: JobConfig, reported: str) -> Path:
    """A path the trainer reported (the shim's run dir) as the supervisor sees it."""
    p = Path(reported)
    if not job.in_container:
        # the cwd's logs/ is a link to log_root and os.path.abspath keeps the link's name (a ray trainer's
        # node runs it in a workdir at the same path as here, linked to the same shared log_root)
        return p.resolve()
    inner = Path(container_workdir(job)) / "logs"
    try:
        return job.log_root / p.relative_to(inner)
    except ValueError:
        return p


WANDB_ENV = ("WANDB_RUN_ID", "WANDB_RESUME")


def wandb_run_id(job: JobConfig, first_started_at: float) -> str:
    """One Weights & Biases run per job: the same id for every attempt (W&B ids: letters, digits, '-', '_').

    Tied to the job's first attempt, so a job trained again from scratch (history and runs moved away) gets a
    new run. Isaac Lab 3.0 keeps an existing WANDB_RUN_ID (isaaclab_rl/utils/wandb.py announce_new_run) and rsl_rl's
    WandbLogWriter calls wandb.init(), which reads WANDB_RUN_ID and WANDB_RESUME."""
    return f"{job.name.replace('.', '-')}-{int(first_started_at):x}"


def trainer_env(job: JobConfig, shim_events: Path | None = None, token: str | None = None,
                wandb_run: str | None = None, caches: list[CacheDir] | None = None) -> dict[str, str]:
    """`caches`: the job's compile caches (compile_caches.for_job): WARP_CACHE_PATH unless the job sets it."""
    env = {k: v for k, v in os.environ.items()
           if k not in TRAINER_ENV_DROP and k not in (SHIM_EVENTS_ENV, LAUNCH_TOKEN_ENV)}
    if job.ranks > 1 and isinstance(job.gpus, list) and job.gpus:
        # rank r uses cuda:r (rsl_rl requires cuda:<LOCAL_RANK>): map those onto the job's own GPUs
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in job.gpus)
    if wandb_run is not None:
        # resume=allow: the first attempt creates the run, every later one continues it (a job's own
        # environment may still name another run)
        env.update({"WANDB_RUN_ID": wandb_run, "WANDB_RESUME": "allow"})
    env.update(job.environment)
    env.update(cache_env(caches or [], job.environment))
    env.setdefault("PYTHONUNBUFFERED", "1")
    if shim_events is not None:
        env[SHIM_EVENTS_ENV] = str(shim_events)
    if token:  # saved before the spawn: how a new supervisor finds a trainer it never heard back from
        env[LAUNCH_TOKEN_ENV] = token
    if shim_events is not None:  # the shim's per-iteration snapshots (see JobConfig.snapshot_every)
        env[SNAPSHOT_EVERY_ENV] = str(job.snapshot_every)
        env[SNAPSHOT_MIN_SECONDS_ENV] = f"{job.snapshot_min_seconds:g}"
        env[SNAPSHOT_BUDGET_ENV] = f"{job.snapshot_budget:g}"
    return env
