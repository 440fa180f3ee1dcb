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

from isaacd_trainer.shim_protocol import LAUNCH_TOKEN_ENV

from ..config import JobConfig
from .base import ExitStatus, Handle, LaunchSpec
from .proctree import process_tree

TOKEN_ENV = LAUNCH_TOKEN_ENV  # set in the trainer's environment: `find` reads it back from /proc


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


class ProcessRuntime:
    name = "process"

    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, spec: LaunchSpec) -> Handle:
        """fork+exec of the trainer (a few ms); nothing waits for it."""
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(spec.env)
        if spec.token:
            env[TOKEN_ENV] = spec.token
        with open(spec.log_path, "ab", buffering=0) as log:
            log_offset = log.seek(0, os.SEEK_END)  # where this attempt's output starts (exit reasons quote it)
            proc = subprocess.Popen(
                spec.argv, cwd=spec.cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
            )
        self._children[proc.pid] = proc
        state = {"pid": proc.pid, "pgid": proc.pid, "start_time": _proc_start_time(proc.pid),
                 "log_path": str(spec.log_path), "log_offset": log_offset}
        if spec.token:
            state["token"] = spec.token
        return Handle("process", spec.job.name, state)

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
            return self.find(job, state.get("token", "")) if state.get("token") and not pid else None
        return Handle("process", job.name, dict(state))

    def find(self, job: JobConfig, token: str) -> Handle | None:
        """The live trainer started with ISAACD_LAUNCH_TOKEN=<token>: a session leader (start() gives
        each trainer its own session; its children inherit the variable but are not leaders) owned by
        our uid, found in /proc/*/environ. One /proc walk: ~1-5 ms for a few hundred processes."""
        if not token:
            return None
        needle = f"{TOKEN_ENV}={token}".encode()
        uid = os.getuid()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                if entry.stat().st_uid != uid:
                    continue
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    if needle not in fh.read().split(b"\0"):
                        continue
                if os.getsid(pid) != pid or os.getpgid(pid) != pid or _is_zombie(pid):
                    continue
            except (OSError, ProcessLookupError):
                continue
            start_time = _proc_start_time(pid)
            if start_time is None:
                continue
            return Handle("process", job.name, {"pid": pid, "pgid": pid, "start_time": start_time, "token": token})
        return None

    def cleanup(self, handle: Handle) -> bool:
        return True  # start() holds nothing that outlives the trainer (the group was reaped by poll)

    def describe(self, handle: Handle) -> dict[str, Any]:
        return {"pid": handle.state.get("pid"), "log_path": handle.state.get("log_path")}
