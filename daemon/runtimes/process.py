"""runtime = "process": the trainer as a direct child in its own process group.

The child gets its own session (process group) so a signal reaches the trainer and everything it
spawned (torchrun ranks, Isaac Sim helpers), and a Ctrl-C on the supervisor's terminal does not
hit the trainer before the supervisor decides how to stop it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from ..config import JobConfig
from .base import ExitStatus, Handle, LaunchSpec


def _proc_start_time(pid: int) -> int | None:
    """Kernel start time of a pid (clock ticks since boot): guards adoption against PID reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces and parentheses; fields after the last ')' are fixed
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def process_tree(root: int) -> list[int]:
    """root and all its descendants, from /proc (children files need CONFIG_PROC_CHILDREN)."""
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
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


class ProcessRuntime:
    name = "process"

    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, spec: LaunchSpec) -> Handle:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(spec.log_path, "ab", buffering=0) as log:
            log_offset = log.seek(0, os.SEEK_END)  # where this attempt's output starts (exit reasons quote it)
            proc = subprocess.Popen(
                spec.argv, cwd=spec.cwd, env=spec.env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
            )
        self._children[proc.pid] = proc
        return Handle("process", spec.job.name, {"pid": proc.pid, "pgid": proc.pid,
                                                  "start_time": _proc_start_time(proc.pid),
                                                  "log_path": str(spec.log_path), "log_offset": log_offset})

    def poll(self, handle: Handle) -> ExitStatus | None:
        pid = handle.state["pid"]
        proc = self._children.get(pid)
        if proc is not None:
            rc = proc.poll()
            if rc is None:
                return None
            del self._children[pid]
            self._reap_group(handle)
            return ExitStatus(signal=-rc) if rc < 0 else ExitStatus(code=rc)
        # Adopted: not our child, so no exit status; watch the pid (and its start time) instead.
        if _proc_start_time(pid) == handle.state.get("start_time") and not _is_zombie(pid):
            return None
        return ExitStatus(detail="ended while the supervisor was not running; exit status unknown")

    def _reap_group(self, handle: Handle) -> None:
        # Helpers the trainer spawned may outlive it; they belong to the attempt, not the host.
        try:
            os.killpg(handle.state["pgid"], signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def signal(self, handle: Handle, sig: int) -> None:
        try:
            os.killpg(handle.state["pgid"], sig)
        except ProcessLookupError:
            pass

    def kill(self, handle: Handle) -> None:
        self.signal(handle, signal.SIGKILL)

    def pids(self, handle: Handle) -> list[int]:
        pid = handle.state["pid"]
        return process_tree(pid) if Path(f"/proc/{pid}").exists() else []

    def adopt(self, job: JobConfig, state: dict[str, Any]) -> Handle | None:
        pid = state.get("pid")
        if not pid or _proc_start_time(pid) != state.get("start_time") or _is_zombie(pid):
            return None
        return Handle("process", job.name, dict(state))

    def cleanup(self, handle: Handle) -> None:
        pass

    def describe(self, handle: Handle) -> dict[str, Any]:
        return {"pid": handle.state.get("pid"), "log_path": handle.state.get("log_path")}
