"""`isaacd reset`: a job trained again from scratch keeps its old runs.

The machine decides the reset (jobs/machine.py `_reset`: a launch intent with `fresh`); the launch it leads to first
moves the job's run dirs, whole, into one dated folder beside its experiment dir, e.g.
`logs/rsl_rl/cartpole.reset-20261205-001500/2026-12-04_23-10-00_cartpole/`. Nothing is deleted. Out of the
experiment dir, no resume (observations/checkpoints.py), history rebuild (rebuild.py) or Isaac Lab script that lists
the experiment dir (rsl_rl's `get_checkpoint_path`) finds them again; and the fresh attempt starts the job's timeline
anew (setting.timeline_attempts), so a run dir that could not be found here is not resumed from either.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..history.store import JobHistory
from ..os_seam.owned_dirs import OwnershipRefused, make_owned_dir
from ..access.owner import OwnerProblem
from .setting import JobSetting


@dataclass(frozen=True)
class SetAside:
    folder: Path | None  # None: there was nothing to move
    moved: tuple[tuple[str, str], ...]  # (from, to)


def job_run_dirs(setting: JobSetting, history: JobHistory) -> list[Path]:
    """The job's run dirs that are still where they were made: its attempts', and those named after it in its
    experiment dir (runs from before its history, or from a launch whose run dir was never reported)."""
    found = {Path(a.run_dir) for a in history.attempts if a.run_dir}
    exp = _experiment_dir(setting)
    if exp is not None and setting.resolved is not None:
        pattern = setting.resolved.workflow.run_dir_re(setting.cfg)
        try:
            found.update(p for p in exp.iterdir() if pattern.match(p.name))
        except OSError:
            pass  # no experiment dir yet: nothing was trained
    return sorted((p for p in found if p.is_dir()), key=lambda p: (p.name, str(p)))


def _experiment_dir(setting: JobSetting) -> Path | None:
    return setting.resolved.workflow.experiment_dir(setting.cfg) if setting.resolved is not None else None


def set_runs_aside(setting: JobSetting, history: JobHistory, wall: float) -> SetAside:
    """Move the job's run dirs into `<experiment dir>.reset-<local time>` (a rename on one filesystem: instant, whole
    or not at all per run dir). Raises OSError naming the run dir that could not be moved; those moved stay moved."""
    runs = job_run_dirs(setting, history)
    if not runs:
        return SetAside(None, ())
    exp = _experiment_dir(setting) or runs[0].parent
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(wall))
    folder = exp.with_name(f"{exp.name}.reset-{stamp}")
    n = 1
    while folder.exists():  # two resets within a second
        n += 1
        folder = exp.with_name(f"{exp.name}.reset-{stamp}-{n}")
    try:
        owner = setting.owner()
    except OwnerProblem as exc:
        raise OSError(errno.EPERM, f"owner: {exc}") from None
    if owner is None:
        folder.mkdir(parents=True)
    else:  # the owner's own (issue 32), made without following a link of theirs
        try:
            make_owned_dir(folder, owner.uid, owner.gid, owner.name)
        except OwnershipRefused as exc:
            raise OSError(errno.EPERM, str(exc)) from None
    moved = []
    for run in runs:
        dest = folder / run.name
        if dest.exists():  # two run dirs of one name in different places
            dest = folder / f"{run.name}-{len(moved)}"
        try:
            os.rename(run, dest)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot move {run} to {dest}: {exc.strerror}") from None
        moved.append((str(run), str(dest)))
    return SetAside(folder, tuple(moved))
