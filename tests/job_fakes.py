"""Fakes for runner-level tests: a clock that only moves when told, a runtime whose trainers are dicts.

They stand in for the OS seam only (time, processes); the state machine, the runner, the store and the
recovery code under test are the real ones. The real runtimes are proven by the e2e tests.
"""

from __future__ import annotations

import errno
import signal
from dataclasses import dataclass, field
from typing import Any

from isaacd.runtimes.base import ExitStatus, Handle, LaunchSpec
from isaacd.runtimes.view import RuntimeView
from isaacd.history.store import JobHistory, StateStore


class SupervisorCrash(BaseException):
    """Raised from inside a runtime call: the supervisor 'dies' right there, nothing after it runs."""


class FakeClock:
    def __init__(self, mono: float = 1000.0, wall: float = 1.7e9, boot_id: str = "boot-1"):
        self.mono, self.wall_time, self.boot_id = mono, wall, boot_id

    def monotonic(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.wall_time

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall_time += seconds


@dataclass
class FakeTrainer:
    pid: int
    token: str
    argv: list[str]
    exit: ExitStatus | None = None
    signals: list[int] = field(default_factory=list)
    exits_on_sigint: bool = True


class FakeRuntime:
    """Trainers live as long as the test says; they survive a 'supervisor crash' (a new runner)."""

    name = "process"

    def __init__(self) -> None:
        self.trainers: dict[int, FakeTrainer] = {}
        self._next_pid = 4000
        self.fail_start: str | None = None
        self.crash_in_start = False

    def live(self) -> list[FakeTrainer]:
        return [t for t in self.trainers.values() if t.exit is None]

    def start(self, spec: LaunchSpec) -> Handle:
        if self.crash_in_start:
            raise SupervisorCrash()
        if self.fail_start:
            raise RuntimeError(self.fail_start)
        self._next_pid += 1
        self.trainers[self._next_pid] = FakeTrainer(self._next_pid, spec.token, list(spec.argv))
        return Handle("process", spec.job.name, {"pid": self._next_pid})

    def poll(self, handle: Handle) -> ExitStatus | None:
        return self.trainers[handle.state["pid"]].exit

    def signal(self, handle: Handle, sig: int) -> None:
        t = self.trainers[handle.state["pid"]]
        t.signals.append(sig)
        if sig == signal.SIGINT and t.exits_on_sigint and t.exit is None:
            t.exit = ExitStatus(code=0)

    def kill(self, handle: Handle) -> None:
        t = self.trainers[handle.state["pid"]]
        t.signals.append(signal.SIGKILL)
        if t.exit is None:
            t.exit = ExitStatus(signal=signal.SIGKILL)

    def pids(self, handle: Handle) -> list[int]:
        return [handle.state["pid"]]

    def adopt(self, job: Any, state: dict[str, Any]) -> Handle | None:
        t = self.trainers.get(state.get("pid", -1))
        return Handle("process", job.name, dict(state)) if t is not None and t.exit is None else None

    def find(self, job: Any, token: str) -> Handle | None:
        for t in self.live():
            if t.token == token:
                return Handle("process", job.name, {"pid": t.pid})
        return None

    def cleanup(self, handle: Handle) -> bool:
        return True

    def describe(self, handle: Handle) -> RuntimeView:
        return RuntimeView(pid=handle.state["pid"])


class FullDiskStore(StateStore):
    """The real store, with a switch that makes every save fail as a full disk does."""

    full = False

    def save(self, history: JobHistory) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().save(history)
