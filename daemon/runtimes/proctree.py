"""A process and its descendants, from /proc. Stdlib only: the Ray actor imports it on the node too."""

from __future__ import annotations

import os
import time
from pathlib import Path

_CHILDREN_MAX_AGE = 0.5  # seconds one /proc walk serves every job: 64 jobs cost one walk, not 64
_children_cache: tuple[float, dict[int, list[int]]] = (float("-inf"), {})


def _children_map() -> dict[int, list[int]]:
    """ppid -> pids, from one walk of /proc, shared by all jobs for _CHILDREN_MAX_AGE seconds."""
    global _children_cache
    now = time.monotonic()
    if now - _children_cache[0] < _CHILDREN_MAX_AGE:
        return _children_cache[1]
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    _children_cache = (now, children)
    return children


def process_tree(root: int) -> list[int]:
    """root and all its descendants, from /proc (children files need CONFIG_PROC_CHILDREN)."""
    children = _children_map()
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
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
