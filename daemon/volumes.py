"""Free space on the volumes isaacd and its trainers write to: the state dir (history, journals, trainer
logs) and each job's log_root (checkpoints, TensorBoard). A full log_root makes every checkpoint save fail
and the job crash-loop; a full state dir stops isaacd from recording anything. Used by `isaacd doctor`
and the `isaacd_volume_*` metrics (the alert rule fires before either fills)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Volume:
    use: str  # "state" | "log_root"
    job: str  # "" for the state dir
    path: Path


@dataclass(frozen=True)
class Space:
    free_bytes: int  # available to unprivileged writers (f_bavail), what a trainer can still use
    size_bytes: int
    device: int


def volumes(cfg: Any) -> list[Volume]:
    """The state dir, then each job's log_root, in config order."""
    out = [Volume("state", "", Path(cfg.supervisor.state_dir))]
    out += [Volume("log_root", j.name, Path(j.log_root)) for j in cfg.jobs]
    return out


def nearest_existing(p: Path) -> Path:
    """A path not created yet lives on the volume of its nearest existing parent."""
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def space(path: Path) -> Space | None:
    try:
        base = nearest_existing(Path(path))
        st = os.statvfs(base)
        dev = os.stat(base).st_dev
    except OSError:
        return None
    return Space(st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize, dev)
