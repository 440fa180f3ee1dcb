"""The old home of issue 32's owner code, split by issue 38: who the owner is is `access/owner.py`, the directories
made ready for them `os_seam/owner_dirs.py` (every kernel call through the OS seam).

Kept until planner.py and spare.py import from the new homes; removed in the same issue. Every old name is here with
its old signature: `open_state_dir` and `prepare_owned` call the new ones on the host's kernel (`HOST_OS`).
"""

from __future__ import annotations

from pathlib import Path

from ..access.owner import (INHERITED, INHERITED_PREFIXES, OWNER_RUNTIMES, ROOT_NAMES, OwnerProblem, container_user,
                            inside_log_root, job_run_as, owner_env)
from ..caches.compile_caches import CacheDir
from ..config.schema import JobConfig
from ..os_seam import owner_dirs
from ..os_seam.oscalls import HOST_OS, RunAs
from ..os_seam.owner_dirs import STATE_PRIVATE, STATE_REACHED

__all__ = ["INHERITED", "INHERITED_PREFIXES", "OWNER_RUNTIMES", "ROOT_NAMES", "STATE_PRIVATE", "STATE_REACHED",
           "OwnerProblem", "RunAs", "container_user", "inside_log_root", "job_run_as", "open_state_dir", "owner_env",
           "prepare_owned"]


def open_state_dir(state_dir: Path) -> None:
    """owner_dirs.open_state_dir on the host."""
    owner_dirs.open_state_dir(HOST_OS, state_dir)


def prepare_owned(job: JobConfig, run_as: RunAs, state_dir: Path, experiment_dir: Path, workdir: Path,
                  caches: list[CacheDir]) -> str | None:
    """owner_dirs.prepare_owned on the host."""
    return owner_dirs.prepare_owned(HOST_OS, job, run_as, state_dir, experiment_dir, workdir, caches)
