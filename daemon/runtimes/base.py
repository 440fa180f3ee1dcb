"""The one interface every runtime implements: process, podman, systemd, ray (built by factory.make_runtime).

A runtime that places jobs on several nodes (ray) also implements control.Fleet, what the operator may do to them.

The contract the supervisor relies on (the runner calls these from its tick, under the supervisor
lock, so none of them may wait for anything slow):

- **Every method returns within a few milliseconds** and never sleeps. What is slow (the Podman API,
  `systemctl`, `journalctl`, `podman kill`) runs on one background worker thread per runtime
  (`worker.Worker`); the calls below only queue work for it and read what it last observed.
  Exceptions: `adopt` and `find`, called once per job at recovery (supervisor start, before the
  first tick), may make a few bounded synchronous calls (each under a timeout) to answer.
- `start(spec) -> Handle` launches *asynchronously* for the container runtimes: it checks what can
  be checked at once (binaries present, the spec renders; errors raise `RuntimeFailure`, a failed
  attempt), queues the launch and returns a Handle at once. Anything that goes wrong later
  (image missing, a stale unit of the job that will not stop) shows up as an `ExitStatus` from
  `poll` with `start_failed=True`. The process runtime forks directly (a fork+exec, ~ms).
- `poll(handle)` answers from the last observation and queues the next one: None while the trainer
  is starting or running, its `ExitStatus` once it has ended (then the same status on every later
  call). Observations lag by at most one tick plus the worker's latency; `Handle.state` is updated
  (container id, pid, unit invocation) by `poll`, in the caller's thread only.
- `signal(handle, sig)` / `kill(handle)`: fire and forget. A graceful stop is `signal(SIGINT)`, then,
  when the supervisor's own deadline passes, `kill`; `poll` reports the end. A signal sent while the
  launch is still queued cancels it (poll then reports an exit without a trainer ever running).
- `pids`, `describe`: read local state only (/proc, cgroup files, cached observations).
- `cleanup(handle) -> bool`: call after `poll` reported the end; returns True once everything the
  attempt held is released. The runner calls it again (once per tick) until True. A caller that
  ignores the result loses nothing: the release runs on the worker either way, and runs before
  anything queued after it (a next `start` of the same job included).
- `adopt(job, state)`: reattach to the attempt whose `Handle.state` was saved; `find(job, token)`:
  find the attempt launched with `LaunchSpec.token` when no state was saved (a supervisor crash
  between `start` and saving). Both return a Handle the other methods accept, or None when nothing
  of that attempt is left, in which case launching again cannot make a duplicate.
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..caches.compile_caches import CacheDir
from ..config.schema import JobConfig
from ..jobs.messages import ReasonClass
from ..os_seam.oscalls import RunAs
from .view import RuntimeView


@dataclass(frozen=True)
class LaunchSpec:
    job: JobConfig
    argv: list[str]  # full host command line (process runtime)
    trainer_args: list[str]  # flags only; container runtimes put them after the image's trainer command
    env: dict[str, str]  # host environment + job.environment (process runtime)
    cwd: Path
    log_path: Path  # where stdout/stderr go when the runtime has no journal of its own
    attempt: int = 0  # the job's attempt number (container label)
    # Recorded by the runner in its state *before* start(): the trainer carries it (env
    # ISAACD_LAUNCH_TOKEN, container label isaacd.token, unit-file header), so `find` can tell
    # whether a launch the state store never heard back from happened. "" = the runtime makes one.
    token: str = ""
    # the job's compile caches (compile_caches.for_job), prepared: container runtimes mount them
    caches: tuple[CacheDir, ...] = ()
    # a warm spare (spare.py), not an attempt: a container runtime names its container as a spare of the job
    # (spare_container_name), runs `container_argv` in it instead of the trainer's command, publishes no ports
    # (the attempt holds them) and mounts `same_path_mounts` at the same path inside (the spare's FIFO, events file
    # and staging; the attempts' events dir, which the go hands it)
    spare: bool = False
    container_argv: tuple[str, ...] = ()
    same_path_mounts: tuple[Path, ...] = ()
    # the job's owner (run_as.job_run_as, issue 32): the process runtime spawns the trainer (or spare) as this user,
    # the container runtimes give its uid:gid as the container's --user; None: the supervisor's own user
    run_as: RunAs | None = None


@dataclass(frozen=True)
class ExitStatus:
    code: int | None = None
    signal: int | None = None
    oom_killed: bool = False
    # stopped outside isaacd, e.g. `systemctl stop` of the job unit by an operator
    external_stop: bool = False
    detail: str = ""
    # the launch itself failed after start() returned (podman create, unit start); detail says why
    start_failed: bool = False
    # the machine the trainer ran on went away (ray: its raylet died, or its GPU reset); detail names it.
    # The next attempt goes to another node, resuming from the newest complete checkpoint.
    node_lost: bool = False

    @property
    def success(self) -> bool:
        return self.code == 0 and self.signal is None and not self.oom_killed

    def describe(self) -> str:
        if self.oom_killed:
            return "OOM-killed"
        if self.node_lost:
            return "node lost" + (f": {self.detail}" if self.detail else "")
        if self.start_failed:
            return f"failed to start: {self.detail}"
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
    def reason_class(self) -> ReasonClass:
        """Low-cardinality label for metrics."""
        if self.oom_killed:
            return ReasonClass.OOM
        if self.node_lost:
            return ReasonClass.NODE_LOST
        if self.external_stop:
            return ReasonClass.OPERATOR
        if self.signal is not None:
            return ReasonClass.SIGNAL
        if self.code is not None:
            return ReasonClass.EXIT_CODE
        return ReasonClass.LOST

    def as_json(self) -> dict[str, Any]:
        out = {"code": self.code, "signal": self.signal, "oom_killed": self.oom_killed,
               "external_stop": self.external_stop, "description": self.describe()}
        if self.node_lost:  # only when set: histories stay as older isaacd wrote them
            out["node_lost"] = True
        return out


@dataclass
class Handle:
    """A running trainer. `state` is JSON-serialisable and enough to adopt it after a supervisor restart."""

    runtime: str
    job: str
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int | None:
        return self.state.get("pid")


class RuntimeFailure(RuntimeError):
    """Launching or controlling a trainer failed; the message says why and what to do."""


class Runtime(Protocol):
    """See the module docstring for the timing contract every method follows."""

    name: str

    def start(self, spec: LaunchSpec) -> Handle:
        """Launch one attempt; returns at once (the launch may still be in flight: see `poll`).
        Raises RuntimeFailure for what can be known without waiting (no podman, no systemd, a bad spec)."""

    def poll(self, handle: Handle) -> ExitStatus | None:
        """None while the trainer starts or runs; its exit status once it has ended. Never waits."""

    def signal(self, handle: Handle, sig: int) -> None:
        """Send `sig` to every process of the trainer (Ctrl-C semantics for SIGINT). Never waits."""

    def kill(self, handle: Handle) -> None:
        """SIGKILL the trainer. Never waits; `poll` reports the end."""

    def pids(self, handle: Handle) -> list[int]:
        """Host PIDs of every process of the job (for GPU attribution); [] when unknown yet."""

    def adopt(self, job: JobConfig, state: dict[str, Any]) -> Handle | None:
        """Reattach to a trainer left running by a previous supervisor, or None if it is gone.
        Recovery only: may make bounded synchronous calls."""

    def find(self, job: JobConfig, token: str) -> Handle | None:
        """The attempt launched with LaunchSpec.token == `token` (live, or ended with its exit status
        still known), or None if no such launch is left. Recovery only: may make bounded synchronous calls."""

    def cleanup(self, handle: Handle) -> bool:
        """Release what start() created once the job has ended. True when done; call again each tick until
        then (the release also completes on its own if the caller stops asking)."""

    def describe(self, handle: Handle) -> RuntimeView:
        """pid, container id, cgroup, unit: whatever `status` should show. From cached state only."""

