"""The one interface every runtime implements: process, podman, systemd.

The supervisor never blocks on a runtime: `start` returns once the trainer is launched, `poll`
answers immediately, and a graceful stop is `signal(SIGINT)` followed later by `kill`, timed by
the supervisor's own loop.
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..config import Config, JobConfig


@dataclass(frozen=True)
class LaunchSpec:
    job: JobConfig
    argv: list[str]  # full host command line (process runtime)
    trainer_args: list[str]  # flags only; container runtimes put them after the image's trainer command
    env: dict[str, str]  # host environment + job.environment (process runtime)
    cwd: Path
    log_path: Path  # where stdout/stderr go when the runtime has no journal of its own
    attempt: int = 0  # the job's attempt number (container label)
    token: str = ""  # saved before the spawn; Runtime.find locates the trainer by it


@dataclass(frozen=True)
class ExitStatus:
    code: int | None = None
    signal: int | None = None
    oom_killed: bool = False
    # stopped outside isaacd, e.g. `systemctl stop` of the job unit by an operator
    external_stop: bool = False
    detail: str = ""

    @property
    def success(self) -> bool:
        return self.code == 0 and self.signal is None and not self.oom_killed

    def describe(self) -> str:
        if self.oom_killed:
            return "OOM-killed"
        if self.external_stop:
            return "stopped outside isaacd" + (f" ({self.detail})" if self.detail else "")
        if self.signal is not None:
            try:
                name = _signal.Signals(self.signal).name
            except ValueError:
                name = "?"
            return f"killed by signal {self.signal} ({name})"
        if self.code is not None:
            return f"exited with code {self.code}"
        return self.detail or "exited (status unknown)"

    @property
    def reason_class(self) -> str:
        """Low-cardinality label for metrics."""
        if self.oom_killed:
            return "oom"
        if self.external_stop:
            return "operator"
        if self.signal is not None:
            return "signal"
        if self.code is not None:
            return "exit_code"
        return "lost"

    def as_json(self) -> dict[str, Any]:
        return {"code": self.code, "signal": self.signal, "oom_killed": self.oom_killed,
                "external_stop": self.external_stop, "description": self.describe()}


@dataclass
class Handle:
    """A running trainer. `state` is JSON-serialisable and enough to adopt it after a supervisor restart."""

    runtime: str
    job: str
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int | None:
        return self.state.get("pid")


class RuntimeError_(Exception):
    """Launching or controlling a trainer failed; the message says why and what to do."""


class Runtime(Protocol):
    name: str

    def start(self, spec: LaunchSpec) -> Handle: ...

    def poll(self, handle: Handle) -> ExitStatus | None:
        """None while the trainer runs; its exit status once it has ended."""

    def signal(self, handle: Handle, sig: int) -> None: ...

    def kill(self, handle: Handle) -> None: ...

    def pids(self, handle: Handle) -> list[int]:
        """Host PIDs of every process of the job (for GPU attribution)."""

    def adopt(self, job: JobConfig, state: dict[str, Any]) -> Handle | None:
        """Reattach to a trainer left running by a previous supervisor, or None if it is gone."""

    def cleanup(self, handle: Handle) -> None:
        """Release what start() created once the job has ended (files, units)."""

    def describe(self, handle: Handle) -> dict[str, Any]:
        """pid, container id, cgroup, unit: whatever `status` should show."""


def make_runtime(name: str, config: Config) -> Runtime:
    if name == "process":
        from .process import ProcessRuntime

        return ProcessRuntime()
    if name == "podman":
        from .podman import PodmanRuntime

        return PodmanRuntime(config)
    if name == "systemd":
        from .systemd import SystemdRuntime

        return SystemdRuntime(config)
    raise ValueError(f"unknown runtime {name!r}")
