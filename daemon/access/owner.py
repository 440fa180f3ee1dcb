"""Whom a job's trainer runs as (issue 32): its owner (`[[jobs]] owner`), never root. Who, not how: the directories
made ready for that user are `os_seam/owner_dirs.py`'s; the spawn as that user is the seam's (`OsCalls.spawn`).

- `job_run_as`: the owner as a `RunAs` (uid, primary gid, every group, as initgroups(3) would set them), or None for
  a job that runs as the supervisor's own user (owner unset, "root", or the supervisor's own name): exactly as before.
  Resolved once per config in force (`attempt/setting.JobSetting.owner`, issue 38) and carried from there.
- `owner_env`: HOME, USER and LOGNAME the owner's, as login(1) and `su -` set them: what the trainer's libraries
  read for their per-user files (Warp's and pip's ~/.cache, W&B's ~/.netrc, torch hub).
- `container_user`: the container's `--user` (Quadlet `User=`): the owner's `uid:gid`; `[jobs.container] user` only
  for a job of the supervisor's own user (an owner cannot pick another uid: the owner's wins).
- `inside_log_root`: a run dir an owner's trainer reported is read by root only inside the job's log_root.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..config.schema import JobConfig
from ..config.users import UnknownUser, user_by_name
from ..os_seam.oscalls import RunAs

ROOT_NAMES = ("root",)
# where a job can run as its owner; a Ray actor runs as the Ray cluster's user, so an owner's job is refused there
OWNER_RUNTIMES = ("process", "podman", "systemd")


class OwnerProblem(Exception):
    """The job's owner cannot run it here (unknown user, a supervisor that is not root); the message says why."""


def job_run_as(job: JobConfig) -> RunAs | None:
    """The owner to run the job as; None: as the supervisor's own user (as before issue 32)."""
    if job.owner is None or job.owner in ROOT_NAMES:
        return None
    try:
        user = user_by_name(job.owner)
    except UnknownUser as exc:
        raise OwnerProblem(f"{exc}; create the user or change the job's owner") from None
    me = os.getuid()
    if user.uid == me:
        return None
    if me != 0:
        raise OwnerProblem(f"the job belongs to {user.name} (uid {user.uid}) but the supervisor runs as uid {me} and "
                           "cannot start a process as another user; run isaacd as root, or drop the job's owner")
    return RunAs(user.uid, user.gid, user.gids, user.name, user.home)


# What an owner's trainer inherits of the supervisor's own environment: the locale, the search path, the terminal,
# the time zone, the GPU stack's settings and thread counts. Nothing else: the supervisor's environment holds its
# backup credentials (AWS_*, GOOGLE_*, ...: docs/backup.md) and whatever root's session had, none of it the user's.
INHERITED = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                       "PYTHONUNBUFFERED"})
INHERITED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_")


def _inherited(key: str) -> bool:
    return key in INHERITED or key.startswith(INHERITED_PREFIXES)


def owner_env(env: dict[str, str], run_as: RunAs | None, job_environment: dict[str, str],
              supervisor_env: dict[str, str] | None = None) -> dict[str, str]:
    """The trainer's environment for a job of another user: what isaacd sets for the attempt and the job's own
    `environment`, the few inherited variables above, and the owner's HOME, USER and LOGNAME; never the rest of the
    supervisor's environment (its credentials). Unchanged for a job of our own user."""
    if run_as is None:
        return env
    mine = os.environ if supervisor_env is None else supervisor_env
    out = {k: v for k, v in env.items()
           if k in job_environment or _inherited(k) or mine.get(k) != v}  # set or changed for the attempt: kept
    out.update({k: v for k, v in (("HOME", run_as.home), ("USER", run_as.name), ("LOGNAME", run_as.name))
                if k not in job_environment})
    return out


def inside_log_root(job: JobConfig, path: Path) -> bool:
    """A path an owner's trainer reported (its run dir) lies in the job's log_root once every link is resolved: the
    root supervisor reads (TensorBoard, checkpoints) and sweeps only there, never another user's run. Any path for a
    job of the supervisor's own user."""
    if job.owner is None or job.owner in ROOT_NAMES:
        return True
    try:
        return Path(path).resolve().is_relative_to(Path(os.path.abspath(job.log_root)).resolve())
    except (OSError, RuntimeError):
        return False


def container_user(job: JobConfig, run_as: RunAs | None) -> str | None:
    """`--user` of the job's container: the owner's uid:gid, else the job's own container.user (an admin's job)."""
    if run_as is not None:
        return f"{run_as.uid}:{run_as.gid}"
    return job.container.user
