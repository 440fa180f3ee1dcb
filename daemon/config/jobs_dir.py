"""The drop-in directory of job files (issue 31): `[supervisor] jobs_dir`, one `[[jobs]]` table per `*.toml`, read
with the host config and at each reload (the conf.d convention of systemd, sudoers and nginx). `isaacd submit`
writes a file here atomically; `isaacd cancel` moves one into `.cancelled/` (kept, no longer read).

This module reads and writes the files; what a job in them means is schema.py's (parse_config validates each file's
job alone first, so an error names the file it is in)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..os_seam.durable import fsync_all
from .users import UnknownUser, User, is_admin, user_by_uid

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CANCELLED = ".cancelled"  # cancelled jobs' files, kept for the record; a name starting with "." is never read


@dataclass(frozen=True)
class DropIn:
    path: Path
    job: dict[str, Any]  # the raw [[jobs]] table
    uid: int = 0  # the file's owner: the job's, unless an admin's file says `owner =` (issue 32)

    @property
    def name(self) -> str | None:
        name = self.job.get("name")
        return name if isinstance(name, str) else None


class DropInError(Exception):
    """A job file that cannot be read as one job; `key` the TOML key at fault ("" for the whole file)."""

    def __init__(self, path: Path, key: str, message: str):
        self.path, self.key, self.message = path, key, message
        super().__init__(f"{path}: {key + ': ' if key else ''}{message}")


def parse_drop_in(text: str, path: Path, uid: int = 0) -> DropIn:
    """One job file's text: exactly one [[jobs]] table and nothing else."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DropInError(path, "", f"not valid TOML: {exc}") from None
    other = sorted(k for k in raw if k != "jobs")
    if other:
        raise DropInError(path, other[0], "a job file holds one [[jobs]] table and nothing else; host settings "
                                          "belong in the host config")
    jobs = raw.get("jobs")
    if not isinstance(jobs, list) or len(jobs) != 1 or not isinstance(jobs[0], dict):
        count = len(jobs) if isinstance(jobs, list) else 0
        raise DropInError(path, "jobs", f"a job file holds exactly one [[jobs]] table (found {count}); write one "
                                        "file per job")
    return DropIn(path, jobs[0], uid)


# A file's identity as the kernel keeps it: any write, rename over it, chown or chmod moves its ctime (even one that
# restores the size and mtime), and the owner and mode are in the key themselves (issue 32: a job is its file's
# owner's). A timestamp is only as fine as the kernel's clock tick (a few ms; a second on some filesystems): a file
# changed twice within one tick, same size, keeps its key. So a file whose mtime or ctime is that recent when it is
# read is "racy" (git's word for its index): until its timestamps are RACY_NS old, every read compares its bytes too.
FileKey = tuple[int, int, int, int, int, int, int]
RACY_NS = 2_000_000_000  # FAT's 2 s, the coarsest timestamp isaacd may meet; the kernel's tick is far finer


def file_key(st: os.stat_result) -> FileKey:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_uid, st.st_mode)


@dataclass(frozen=True)
class _Parsed:
    key: FileKey
    drop_in: DropIn
    data: bytes  # what was parsed: a racy entry's bytes are compared at each read
    settled: bool  # its timestamps were RACY_NS older than the read: any later change moves its ctime


class DropInCache:
    """Each job file parsed once while it is unchanged (issue 39: a reload or a submit with 1,000 submitted jobs
    re-read and re-parsed every file). Only a good parse is kept: a broken file is read, and refused, every time.
    A hit hands back the same DropIn, whose raw table nobody changes (the config's validators copy, never edit), so
    a caller may tell an unchanged file by `is` (schema._checked_drop_in does)."""

    def __init__(self, stat: Callable[[str], os.stat_result] = os.stat,
                 clock_ns: Callable[[], int] = time.time_ns) -> None:
        self._parsed: dict[Path, _Parsed] = {}
        self._stat, self._clock_ns = stat, clock_ns  # seams: a test hands a stat whose key a change keeps

    def read(self, path: Path) -> DropIn:
        try:
            now = self._clock_ns()  # before the stat: a change after the stat is stamped no earlier than a tick before
            st = self._stat(str(path))  # before the read: a change after it moves the key, so the next read sees it
            key = file_key(st)
            hit = self._parsed.get(path)
            if hit is not None and hit.key == key and hit.settled:
                return hit.drop_in
            data = path.read_bytes()
        except OSError as exc:
            self._parsed.pop(path, None)
            raise DropInError(path, "", f"cannot read: {exc.strerror}") from None
        settled = max(st.st_mtime_ns, st.st_ctime_ns) <= now - RACY_NS
        if hit is not None and hit.key == key and hit.data == data:  # racy, and the same bytes: no parse
            if settled:
                self._parsed[path] = _Parsed(key, hit.drop_in, data, True)
            return hit.drop_in
        self._parsed.pop(path, None)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise DropInError(path, "", "not UTF-8 text") from None
        drop_in = parse_drop_in(text, path, st.st_uid)
        self._parsed[path] = _Parsed(key, drop_in, data, settled)
        return drop_in

    def keep_only(self, paths: list[Path]) -> None:
        """Forget the files that are gone (cancelled, removed), so the cache is as large as jobs_dir."""
        for gone in set(self._parsed) - set(paths):
            del self._parsed[gone]


PARSED = DropInCache()  # the process's one cache: the supervisor's reloads and submits read through it


def read_drop_ins(jobs_dir: Path, cache: DropInCache = PARSED) -> list[DropIn]:
    """Every job file in `jobs_dir`, by file name; none when the directory does not exist yet."""
    try:
        with os.scandir(jobs_dir) as entries:  # names, not Paths, sorted: 1,000 Path comparisons were a cost
            names = sorted(e.name for e in entries if e.name.endswith(".toml") and not e.name.startswith("."))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise DropInError(jobs_dir, "", f"cannot read the jobs_dir: {exc.strerror}") from None
    paths = [jobs_dir / name for name in names]
    out = [cache.read(path) for path in paths]
    cache.keep_only(paths)
    return out


def with_paths_under(job: dict[str, Any], base: Path) -> dict[str, Any]:
    """A relative log_root or isaaclab_dir in a job file is relative to the file's directory (as the host config's
    are to its own)."""
    out = dict(job)
    for key in ("log_root", "isaaclab_dir"):
        v = out.get(key)
        if isinstance(v, str) and not os.path.isabs(v):  # (Path(v).is_absolute(), without a Path per file)
            out[key] = str((base / v).resolve())
    return out


# uid -> who they are, or why they are no one: one reload's lookups (a reload reads every file, and 1,000 files of
# one owner were 1,000 getpwuid + getgrouplist). Made afresh by each reload: a user or group changed since is seen.
UserLookups = dict[int, User | UnknownUser]


def owned(drop_in: DropIn, admin_group: str | None, users: UserLookups | None = None) -> dict[str, Any]:
    """The job with its owner: the file's owner, or the `owner =` an admin's file names. Another user's file that
    names someone else is refused (a job cannot be slipped in under another user's name)."""
    who = (users if users is not None else {}).get(drop_in.uid)
    if who is None:
        try:
            who = user_by_uid(drop_in.uid)
        except UnknownUser as exc:
            who = exc
        if users is not None:
            users[drop_in.uid] = who
    if isinstance(who, UnknownUser):
        raise DropInError(drop_in.path, "", f"owned by {who}; chown it to the job's user")
    named = drop_in.job.get("owner")
    if named is not None and named != who.name and not is_admin(who, admin_group):
        raise DropInError(drop_in.path, "jobs[0].owner", f"only an admin may give a job another owner, and this file "
                                                         f"is {who.name}'s; remove owner (the job is then "
                                                         f"{who.name}'s)")
    return drop_in.job if named is not None else {**drop_in.job, "owner": who.name}


def open_to_others(jobs_dir: Path) -> str | None:
    """Why the drop-in directory is not the supervisor's alone, or None. On a host with users (issue 32) each job
    file is its submitter's (0600, chowned to them): a directory they can search would let them rewrite their file
    after its submit (priority = 100, a log_root anywhere), past every check a submit makes."""
    try:
        st = jobs_dir.stat()
    except FileNotFoundError:
        return None
    if st.st_mode & 0o077:
        return (f"{jobs_dir} is open to other users (mode {st.st_mode & 0o777:04o}): they could rewrite the jobs "
                f"they submitted past [access]; chmod 700 {jobs_dir}")
    return None


def job_file(jobs_dir: Path, name: str) -> Path:
    return jobs_dir / f"{name}.toml"


def write_atomically(path: Path, text: str, owner: tuple[int, int] | None = None) -> None:
    """The whole file or none: written beside it under a hidden name (never read), synced, renamed into place.
    `owner` (uid, gid): the file is theirs before it has its name, so it is never read as anyone else's job (issue
    32: a job file's owner is the job's). Mode 0600: its environment may hold secrets."""
    write_all_atomically([(path, text)], owner)


def write_all_atomically(files: Sequence[tuple[Path, str]], owner: tuple[int, int] | None = None) -> None:
    """Each file as write_atomically writes one, their syncs waited for together (a sweep's 100 trial files: one wait
    for the disk, not 100; os_seam/durable.py), every one synced before any is renamed into place. On an error none
    is left: the hidden files are removed, and so are those already in place."""
    tmps: list[Path] = []
    placed: list[Path] = []
    try:
        for path, text in files:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # root's alone: see open_to_others
            tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            tmps.append(tmp)
            with open(fd, "w", encoding="utf-8") as f:
                if owner is not None:
                    os.fchown(f.fileno(), *owner)
                f.write(text)
        fsync_all(tmps)
        for (path, _), tmp in zip(files, tmps):
            os.replace(tmp, path)
            placed.append(path)
    except BaseException:
        for leftover in tmps + placed:
            leftover.unlink(missing_ok=True)
        raise


def set_aside(path: Path) -> Path:
    """A cancelled job's file, moved into `.cancelled/` with the time (kept, no longer read)."""
    dest = path.parent / CANCELLED / f"{path.stem}.{time.strftime('%Y%m%dT%H%M%S')}.toml"
    dest.parent.mkdir(exist_ok=True)
    os.replace(path, dest)
    return dest
