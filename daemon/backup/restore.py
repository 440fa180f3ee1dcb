"""Resume from the bucket: fetch the newest complete checkpoint the manifest names, verify it, put it where a
local resume would find it.

The object lands at `<experiment dir>/<run>/<file>`: the run dir it was written in, rebuilt with just that file,
so the trainer's resume flags (rsl_rl's --load_run/--checkpoint, rl_games' and skrl's --checkpoint <file>) and
the job's iteration count are exactly those of a local resume from it. It is downloaded beside its final name,
checked (size and sha256 against the manifest, then the same deep validation as the resume choice) and only
then renamed into place. A damaged object (a flipped byte, a truncated upload, a replaced key) never passes the
sha256: it is reported and the previous entry is tried.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from ..observations.checkpoints import Checkpoint
from ..os_seam import owned_dirs
from ..os_seam.oscalls import RunAs
from .manifest import Entry, Manifest
from .notes import Notes
from .objects import ObjectStore
from .uploader import sha256_of

Validator = Callable[[Checkpoint], "str | None"]


@dataclass(frozen=True)
class Restored:
    checkpoint: Checkpoint
    entry: Entry
    downloaded: bool  # False: the file was already there with the manifest's sha256
    seconds: float


def _safe_parts(e: Entry) -> bool:
    """A manifest names paths under the experiment dir only (never `..`, never absolute)."""
    run, rel = PurePosixPath(e.run), PurePosixPath(e.file)
    return len(run.parts) == 1 and run.name not in ("", ".", "..") and not rel.is_absolute() \
        and ".." not in rel.parts and bool(rel.parts)


def _matches(path: Path, e: Entry) -> bool:
    try:
        return path.stat().st_size == e.size and sha256_of(path) == e.sha256
    except OSError:
        return False


def restore_newest(store: ObjectStore, manifest: Manifest, experiment_dir: Path, bound: int | None,
                   notes: Notes, validator: Validator | None = None, owner: RunAs | None = None) -> Restored | None:
    """The newest entry at or below `bound` that verifies, in place; None when none does. Store failures
    (unreachable, refused) raise BackupError: the caller retries, it does not fall back to older entries.
    `owner`: the job runs as this user (issue 32): what lands is theirs, and no link in their dirs is followed."""
    for e in manifest.newest_first():
        if bound is not None and e.iteration > bound:
            continue
        if not _safe_parts(e):
            notes.add("backup_object_rejected", key=e.key, iteration=e.iteration,
                      problem="the manifest names a path outside the run dir")
            continue
        t0 = time.monotonic()
        dest = experiment_dir / e.run / e.file
        if _matches(dest, e):
            return Restored(Checkpoint(dest, e.iteration, dest.stat().st_mtime, e.size), e, False,
                            time.monotonic() - t0)
        landing = _Landing(dest) if owner is None else _OwnedLanding(dest, owner)
        try:
            try:
                store.get_file(e.key, landing.download)
            except FileNotFoundError:
                notes.add("backup_object_rejected", key=e.key, iteration=e.iteration,
                          problem="the manifest names it but the bucket has no such object")
                continue
            problem = _verify(landing.verify, e, validator)
            if problem is not None:
                notes.add("backup_object_rejected", key=e.key, iteration=e.iteration, problem=problem,
                          detail="never resumed from; trying the previous checkpoint in the bucket")
                continue
            landing.place(e.mtime)  # the time the trainer wrote it, as status shows checkpoints
        finally:
            landing.close()
        return Restored(Checkpoint(dest, e.iteration, e.mtime, e.size), e, True, time.monotonic() - t0)
    return None


class _Landing:
    """Where a download lands before it is verified and renamed into place: beside its final name."""

    def __init__(self, dest: Path):
        self.dest = dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        self.download = self.verify = dest.with_name(f".{dest.name}.isaacd-restore-{os.getpid()}")

    def place(self, mtime: float) -> None:
        os.replace(self.download, self.dest)
        os.utime(self.dest, (mtime, mtime))

    def close(self) -> None:
        self.download.unlink(missing_ok=True)


class _OwnedLanding(_Landing):
    """The same for a job that runs as its owner (issue 32): the run dir is the owner's, so they could put a symlink
    at any name in it. The dir is made and opened by owned_dirs (no link on the way followed); the temp file is
    created in it O_EXCL | O_NOFOLLOW under an unguessable name, owned by the owner, and written through its own
    descriptor (`/proc/self/fd/N`: the store's client opens that, the same file whatever the dir's names say); the
    rename goes through the dir's descriptor."""

    def __init__(self, dest: Path, owner: RunAs):  # noqa: super().__init__ not called: nothing made by path
        self.dest = dest
        self.dir_fd = owned_dirs.open_owned_dir(dest.parent, owner.uid, owner.gid, owner.name)
        self.name = f".{dest.name}.isaacd-restore-{uuid.uuid4().hex[:12]}"
        try:
            self.fd = os.open(self.name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640,
                              dir_fd=self.dir_fd)
            os.fchown(self.fd, owner.uid, owner.gid)
        except BaseException:
            os.close(self.dir_fd)
            raise
        self.download = Path(f"/proc/self/fd/{self.fd}")
        self.verify = Path(f"/proc/self/fd/{self.dir_fd}/{self.name}")  # keeps the name, as the checks read it

    def place(self, mtime: float) -> None:
        os.utime(self.fd, (mtime, mtime))
        os.replace(self.name, self.dest.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)

    def close(self) -> None:
        try:
            os.unlink(self.name, dir_fd=self.dir_fd)
        except FileNotFoundError:
            pass
        finally:
            os.close(self.fd)
            os.close(self.dir_fd)


def _verify(path: Path, e: Entry, validator: Validator | None) -> str | None:
    size = path.stat().st_size
    if size != e.size:
        return f"size {size} bytes, but the manifest says {e.size} (truncated or replaced in the bucket)"
    digest = sha256_of(path)
    if digest != e.sha256:
        return (f"sha256 mismatch: the manifest says {e.sha256[:16]}..., the object hashes to {digest[:16]}... "
                "(damaged or replaced in the bucket)")
    if validator is not None:  # intact, but can this job's trainer load it? (as for a local checkpoint)
        problem = validator(Checkpoint(path, e.iteration, e.mtime, e.size))
        if problem is not None:
            return f"downloaded intact but unusable: {problem}"
    return None
