"""Turns a job's config (and the checkpoint chosen for resume) into the trainer's command line.

Both workflows take Isaac Lab's rsl_rl flags. Isaac Lab's train.py runs `max_iterations` *more*
iterations after a resume, so the supervisor passes what is left of the job's total. Iterations
are numbered from 0 and `model_N.pt` holds the weights after iteration N, so N+1 are done.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .config import JobConfig
from .signals.checkpoints import Checkpoint

TRAINER_ENV_DROP = ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "WATCHDOG_USEC", "WATCHDOG_PID")


def default_trainer_command() -> list[str]:
    exe = Path(sys.executable).with_name("isaacd-train")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "isaacd_trainer"]


def experiment_dir(job: JobConfig) -> Path:
    return job.log_root / "rsl_rl" / job.experiment_name


def trainer_args(job: JobConfig, resume: Checkpoint | None, seed: int | None = None,
                 log_root: Path | None = None) -> list[str]:
    """Flags common to every runtime; `log_root` differs inside a container."""
    done = resume.iteration + 1 if resume else 0
    args = ["--task", job.task, "--num_envs", str(job.num_envs), "--seed", str(job.seed if seed is None else seed),
            "--max_iterations", str(max(job.max_iterations - done, 0)), "--device", job.device,
            "--experiment_name", job.experiment_name, "--run_name", job.name]
    if job.workflow == "builtin":
        args += ["--log_root", str(log_root or job.log_root), "--save_interval", str(job.save_interval)]
    else:
        args += ["--headless", f"agent.save_interval={job.save_interval}"]
    if resume is not None:
        args += ["--resume", "True", "--load_run", resume.path.parent.name, "--checkpoint", resume.path.name]
    return args + list(job.extra_args)


def process_argv(job: JobConfig, args: list[str]) -> list[str]:
    """The host command line for the process runtime: the trainer program plus `trainer_args(...)`."""
    if job.command:
        return list(job.command) + args
    if job.ranks > 1:
        # One job, several ranks: torchrun starts them, and with its default max_restarts = 0 it takes every
        # rank down when one dies, so the supervisor restarts the whole job from rank 0's checkpoint.
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={job.ranks}"]
        if job.workflow == "builtin":
            return torchrun + ["-m", "isaacd_trainer"] + args + ["--distributed"]
        return torchrun + [job.isaaclab_train_script] + args + ["--distributed"]
    if job.workflow == "builtin":
        return default_trainer_command() + args
    return [os.environ.get("ISAACLAB_SH", "isaaclab.sh"), "-p", job.isaaclab_train_script] + args


def workdir(job: JobConfig, state_dir: Path) -> Path:
    """Isaac Lab's train.py writes to ./logs; give it a cwd whose logs/ is the job's log_root."""
    if job.workflow == "builtin":
        job.log_root.mkdir(parents=True, exist_ok=True)
        return job.log_root
    wd = state_dir / "work" / job.name
    wd.mkdir(parents=True, exist_ok=True)
    link = wd / "logs"
    if not link.is_symlink():
        link.symlink_to(job.log_root, target_is_directory=True)
    job.log_root.mkdir(parents=True, exist_ok=True)
    return wd


def trainer_env(job: JobConfig) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TRAINER_ENV_DROP}
    if job.ranks > 1 and isinstance(job.gpus, list) and job.gpus:
        # rank r uses cuda:r (rsl_rl requires cuda:<LOCAL_RANK>): map those onto the job's own GPUs
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in job.gpus)
    env.update(job.environment)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
