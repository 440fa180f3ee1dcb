"""A process and its descendants, from /proc, and the parse of /proc/<pid>/stat.

Stdlib only: the Ray actor imports it on the node too. /proc is read through `ProcFs` (oscalls.py) so the walk
and the parse are unit-tested on a fake /proc.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

from .oscalls import HOST_OS, ProcFs, signal_pid

_CHILDREN_MAX_AGE = 0.5  # seconds one /proc walk serves every job: 64 jobs cost one walk, not 64
# one (taken at, ppid -> pids) per /proc reader: the host's is shared by every runtime, as before the seam
_children_cache: weakref.WeakKeyDictionary[ProcFs, tuple[float, dict[int, list[int]]]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat the supervisor reads."""

    state: str  # R, S, D, Z (zombie), ...
    ppid: int
    start_time: int  # clock ticks since boot: with the pid, names one process for good (guards against PID reuse)


def parse_stat(raw: bytes) -> ProcStat:
    # comm may contain spaces and parentheses; the fields after the last ')' are fixed
    fields = raw[raw.rindex(b")") + 2 :].split()
    return ProcStat(state=fields[0].decode(), ppid=int(fields[1]), start_time=int(fields[19]))


def read_stat(procfs: ProcFs, pid: int) -> ProcStat | None:
    """The pid's stat, or None once it is gone."""
    try:
        return parse_stat(procfs.read_proc(pid, "stat"))
    except OSError:
        return None


def proc_start_time(pid: int, procfs: ProcFs = HOST_OS) -> int | None:
    """Kernel start time of a pid (clock ticks since boot): guards adoption against PID reuse."""
    stat = read_stat(procfs, pid)
    return None if stat is None else stat.start_time


def _children_map(procfs: ProcFs) -> dict[int, list[int]]:
    """ppid -> pids, from one walk of /proc, shared by all jobs for _CHILDREN_MAX_AGE seconds."""
    now = time.monotonic()
    taken_at, cached = _children_cache.get(procfs, (float("-inf"), {}))
    if now - taken_at < _CHILDREN_MAX_AGE:
        return cached
    children: dict[int, list[int]] = {}
    for pid in procfs.list_pids():
        stat = read_stat(procfs, pid)
        if stat is None:  # ended between the listing and the read
            continue
        children.setdefault(stat.ppid, []).append(pid)
    _children_cache[procfs] = (now, children)
    return children


def process_tree(root: int, procfs: ProcFs = HOST_OS) -> list[int]:
    """root and all its descendants, from /proc (children files need CONFIG_PROC_CHILDREN)."""
    children = _children_map(procfs)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def signal_each(pids: list[int], sig: int) -> None:
    """Send `sig` to every pid; one that has exited meanwhile, or is not ours to signal, is skipped."""
    for pid in pids:
        try:
            signal_pid(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
