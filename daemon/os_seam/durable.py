"""Many files made durable at once (issue 39: a 100-trial sweep submit was ~500 fsyncs one after another, 10 ms each
on a busy disk). fsync(2) releases the GIL and ext4's journal commits the fsyncs that wait together as one (group
commit), so the files are synced from a few threads at once; each directory once, after its files (a rename or a
new name in it is durable only then)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

WORKERS = 16  # enough waiters for one journal commit to take them all; each thread only waits in the kernel


def fsync_path(path: Path | str, missing_ok: bool = False) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        if missing_ok:  # gone since it was written (moved aside, removed): nothing of it left to sync
            return
        raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_private_json(path: Path, doc: object, sort_keys: bool = True) -> None:
    """A supervisor's document (a sweep's, a job's evaluations) written whole and durable: its directory made 0700, a
    temporary file beside it (0600, never through a symlink) written and synced, renamed over it, the directory
    synced. Raises OSError (a full disk): the caller keeps its record in memory and says so. `sort_keys=False`: the
    maps in the order the caller made them (an order that means something, e.g. oldest first)."""
    import json  # (here: the modules that only sync never serialise)

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.tmp")
    data = json.dumps(doc, sort_keys=sort_keys).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def fsync_all(files: Iterable[Path | str], dirs: Iterable[Path | str] = (), missing_ok: bool = False) -> None:
    """Every file synced (concurrently), then every directory; the first error is raised once all were tried."""
    from concurrent.futures import ThreadPoolExecutor  # here: the client imports the config, never syncs

    files, dirs = list(dict.fromkeys(files)), list(dict.fromkeys(dirs))
    for batch in (files, dirs):
        if len(batch) == 1:
            fsync_path(batch[0], missing_ok)
        elif batch:
            with ThreadPoolExecutor(min(WORKERS, len(batch)), thread_name_prefix="fsync") as pool:
                errors = [f.exception() for f in [pool.submit(fsync_path, p, missing_ok) for p in batch]]
            first = next((e for e in errors if e is not None), None)
            if first is not None:
                raise first
