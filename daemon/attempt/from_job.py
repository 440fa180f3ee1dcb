"""PBT's exploit at the launch (issue 40): the copy of another job's newest complete checkpoint that a member's new
timeline starts from. Runs on the launch's worker (planner._prepare), never on the tick.

* The source: its newest complete checkpoint (observations/checkpoints.newest_complete over its run dirs, newest
  first, checked as this job's trainer would load it), never the file it is writing (a file still being written is
  incomplete: checkpoint_problem). The source never stops for it.
* Read without following a link, and only a regular file that the member's owner owns (a sweep's members are all
  its owner's): root never copies a file its owner could not read into the owner's folder.
* Written into the member's experiment dir, in a folder of its own, `<%Y-%m-%d_%H-%M-%S>_pbt-from-<source>-at-<N>/
  model_<N>.pt` (the run-dir shape Isaac Lab 2.x's `--load_run` anchors; 3.x gets the file's path), through a temp
  name in a folder opened without following a link, synced, renamed: a crash leaves no torn copy, and a launch
  replayed after a crash finds the copy it made and takes it again.
* The folder and the file are handed to the owner (fchown), as the trainer's own run dirs are theirs; the member's
  experiment dir must be there (it has trained before it is judged), the owner's, and no link.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from ..jobs.model import FromJob
from ..launch.exploit import copy_folder_suffix
from ..observations.checkpoints import RSL_RL_LAYOUT, Checkpoint, CheckpointLayout, Validator, newest_complete
from ..os_seam.oscalls import RunAs

CHUNK = 8 * 2**20


def copy_from_job(fj: FromJob, experiment_dir: Path, owner: RunAs | None, wall: float,
                  layout: CheckpointLayout = RSL_RL_LAYOUT, validator: Validator | None = None) -> Checkpoint | str:
    """The copy to resume from, or why there is none (one line)."""
    src = None
    for d in fj.run_dirs:
        src = newest_complete(Path(d), layout=layout, validator=validator)
        if src is not None:
            break
    if src is None:
        return f"{fj.source} has no complete checkpoint to copy (in {', '.join(fj.run_dirs) or 'no run dir yet'})"
    suffix = copy_folder_suffix(fj.source, src.iteration)
    if experiment_dir.is_dir():  # a launch replayed after a crash: the copy it made, complete
        for d in sorted(experiment_dir.glob(f"*{suffix}"), reverse=True):
            kept = newest_complete(d, layout=layout, validator=validator)
            if kept is not None and kept.iteration == src.iteration:
                return kept
    folder = experiment_dir / (time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(wall)) + suffix)
    try:
        _copy(src.path, folder, owner)
    except (OSError, ValueError) as exc:
        return f"cannot copy {src.path} into {folder}: {getattr(exc, 'strerror', None) or exc}"
    copied = newest_complete(folder, layout=layout, validator=validator)
    if copied is None or copied.iteration != src.iteration:
        return f"the copy of {src.path} in {folder} is not a complete checkpoint"
    return copied


def _copy(src: Path, folder: Path, owner: RunAs | None) -> None:
    sfd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(sfd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{src} is not a regular file")
        if owner is not None and st.st_uid != owner.uid:
            raise ValueError(f"{src} is not {owner.name or owner.uid}'s (owner uid {st.st_uid}): not copied")
        experiment_dir = folder.parent
        # the member's own experiment dir (it has trained before it is judged): not through a link, and the owner's,
        # so nothing is written anywhere its owner could not write
        pfd = os.open(experiment_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if owner is not None and os.fstat(pfd).st_uid != owner.uid:
                raise ValueError(f"{experiment_dir} is not {owner.name or owner.uid}'s: nothing written there")
            try:
                os.mkdir(folder.name, 0o755, dir_fd=pfd)
            except FileExistsError:
                pass
            dfd = os.open(folder.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
        finally:
            os.close(pfd)
        try:
            if owner is not None:
                os.fchown(dfd, owner.uid, owner.gid)
            tmp = f".{src.name}.tmp"
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            wfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd)
            try:
                while chunk := os.read(sfd, CHUNK):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(wfd, view):]
                if owner is not None:
                    os.fchown(wfd, owner.uid, owner.gid)
                os.fsync(wfd)
            finally:
                os.close(wfd)
            os.replace(tmp, src.name, src_dir_fd=dfd, dst_dir_fd=dfd)
            os.fsync(dfd)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)
