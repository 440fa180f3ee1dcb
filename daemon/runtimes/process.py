"""runtime = "process": the trainer as a direct child in its own process group.

The child gets its own session (process group) so a signal reaches the trainer and everything it
spawned (torchrun ranks, Isaac Sim helpers), and a Ctrl-C on the supervisor's terminal does not
hit the trainer before the supervisor decides how to stop it.

Every child started here is reaped (issue 37): a trainer by `poll`, which the observer calls until it
reports the exit; a child someone stopped watching before it ended (a killed warm spare) by `cleanup`,
which its caller repeats each tick until it answers True, and which this runtime repeats on its own at
each later poll, start and cleanup (base.py's contract: the release completes even if the caller stops
asking). Never a blocking wait: Popen.poll is waitpid(WNOHANG). Until then the kernel keeps the dead
child as a zombie (`<defunct>` under the supervisor), one per killed spare.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from isaacd_trainer.shim_protocol import LAUNCH_TOKEN_ENV

from ..config.schema import JobConfig
from ..os_seam.oscalls import HOST_OS, Child, OsCalls, ProcFs
from .base import ExitStatus, Handle, LaunchSpec, RuntimeFailure
from ..access.owner import OwnerProblem, job_run_as
from ..os_seam.proctree import proc_start_time, process_tree, read_stat
from .view import RuntimeView

TOKEN_ENV = LAUNCH_TOKEN_ENV  # set in the trainer's environment: `find` reads it back from /proc


def _is_zombie(pid: int, procfs: ProcFs = HOST_OS) -> bool:
    stat = read_stat(procfs, pid)
    return stat is None or stat.state == "Z"


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW, 0o644)


ADOPTED_EXIT = "ended, not this supervisor's child (adopted after a restart): exit status unknown"


class ProcessRuntime:
    name = "process"

    def __init__(self, oscalls: OsCalls = HOST_OS) -> None:
        self.oscalls = oscalls
        self._children: dict[int, Child] = {}  # every child not yet reaped, by pid (a zombie keeps its pid)
        self._released: set[int] = set()  # of those, the ones cleanup() was asked for: reaped here, not by poll

    def start(self, spec: LaunchSpec) -> Handle:
        """fork+exec of the trainer (a few ms); nothing waits for it."""
        self._reap_released()
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(spec.env)
        if spec.token:
            env[TOKEN_ENV] = spec.token
        # O_NOFOLLOW: a booted spare's boot.log lies in a staging dir its owner may write (a symlink planted there
        # must not make root append the spare's output to another file)
        with open(spec.log_path, "ab", buffering=0, opener=_no_follow) as log:
            log_offset = log.seek(0, os.SEEK_END)  # where this attempt's output starts (exit reasons quote it)
            try:
                proc = self.oscalls.spawn(spec.argv, cwd=spec.cwd, env=env, stdout=log, new_session=True,
                                          run_as=spec.run_as)
            except PermissionError as exc:
                if spec.run_as is None:
                    raise
                who = spec.run_as.name or f"uid {spec.run_as.uid}"
                raise RuntimeFailure(f"{exc.filename or spec.argv[0]}: permission denied for {who}, who runs the job: "
                                     f"its program (launcher, command) and working directory must be ones {who} may "
                                     "use") from None
        self._children[proc.pid] = proc
        state = {"pid": proc.pid, "pgid": proc.pid, "start_time": proc_start_time(proc.pid, self.oscalls),
                 "log_path": str(spec.log_path), "log_offset": log_offset}
        if spec.token:
            state["token"] = spec.token
        return Handle("process", spec.job.name, state)

    def poll(self, handle: Handle) -> ExitStatus | None:
        self._reap_released()
        pid = handle.state["pid"]
        proc = self._children.get(pid)
        if proc is not None:
            rc = proc.poll()
            if rc is None:
                return None
            self._forget(pid)
            self._reap_group(handle)
            return ExitStatus(signal=-rc) if rc < 0 else ExitStatus(code=rc)
        # Adopted: not our child, so no exit status; watch the pid (and its start time) instead.
        if self._same_process(pid, handle.state.get("start_time")):
            return None
        # (it may have ended while a supervisor watched it: one that adopted it after a restart has no exit code)
        return ExitStatus(detail=ADOPTED_EXIT)

    def _reap_group(self, handle: Handle) -> None:
        # Helpers the trainer spawned may outlive it; they belong to the attempt, not the host.
        try:
            self.oscalls.killpg(handle.state["pgid"], signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def signal(self, handle: Handle, sig: int) -> None:
        try:
            self.oscalls.killpg(handle.state["pgid"], sig)
        except ProcessLookupError:
            pass

    def kill(self, handle: Handle) -> None:
        self.signal(handle, signal.SIGKILL)

    def pids(self, handle: Handle) -> list[int]:
        pid = handle.state["pid"]
        return process_tree(pid, self.oscalls) if self.oscalls.proc_exists(pid) else []

    def adopt(self, job: JobConfig, state: dict[str, Any]) -> Handle | None:
        pid = state.get("pid")
        if not pid or not self._same_process(pid, state.get("start_time")):
            return self.find(job, state.get("token", "")) if state.get("token") and not pid else None
        return Handle("process", job.name, dict(state))

    def find(self, job: JobConfig, token: str) -> Handle | None:
        """The live trainer started with ISAACD_LAUNCH_TOKEN=<token>: a session leader (start() gives
        each trainer its own session; its children inherit the variable but are not leaders) owned by
        our uid (the job owner's, for a job that runs as its owner), found in /proc/*/environ. One /proc walk: ~1-5 ms
        for a few hundred processes."""
        if not token:
            return None
        needle = f"{TOKEN_ENV}={token}".encode()
        try:
            owner = job_run_as(job)
        except OwnerProblem:
            return None  # it could not have been started as its owner
        uid = owner.uid if owner is not None else self.oscalls.getuid()
        for pid in self.oscalls.list_pids():
            try:
                if self.oscalls.proc_owner(pid) != uid:
                    continue
                if needle not in self.oscalls.read_proc(pid, "environ").split(b"\0"):
                    continue
                if self.oscalls.getsid(pid) != pid or self.oscalls.getpgid(pid) != pid \
                        or _is_zombie(pid, self.oscalls):
                    continue
            except (OSError, ProcessLookupError):
                continue
            start_time = proc_start_time(pid, self.oscalls)
            if start_time is None:
                continue
            return Handle("process", job.name, {"pid": pid, "pgid": pid, "start_time": start_time, "token": token})
        return None

    def _same_process(self, pid: int, start_time: int | None) -> bool:
        """pid is still the live process that had `start_time` (not ended, not a zombie, not a reused pid)."""
        stat = read_stat(self.oscalls, pid)
        return stat is not None and stat.start_time == start_time and stat.state != "Z"

    def cleanup(self, handle: Handle) -> bool:
        """True once this start's child is reaped (or was never ours: an adopted trainer, a previous supervisor's
        spare). A trainer is reaped by the poll that saw its exit; a killed spare, which nobody polls, is polled
        here: False until its SIGKILL has landed and its exit status is collected, then forgotten."""
        self._reap_released()
        pid = handle.state.get("pid")
        if pid not in self._children:
            return True
        self._released.add(pid)
        self._reap_released()
        return pid not in self._children

    def _reap_released(self) -> None:
        """Collect the released children that have ended (waitpid WNOHANG each; none blocks)."""
        for pid in [p for p in self._released if self._children[p].poll() is not None]:
            self._forget(pid)

    def _forget(self, pid: int) -> None:
        del self._children[pid]
        self._released.discard(pid)

    def describe(self, handle: Handle) -> RuntimeView:
        return RuntimeView(pid=handle.state.get("pid"), log_path=handle.state.get("log_path"))
