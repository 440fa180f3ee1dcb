"""What the tick hands its hooks and its readers (a part of the Supervisor, its base, as attempt/ending.py's
EndedJobs is): every job's signals for the tick hooks, and the status snapshot that `isaacd status`, /metrics and
the control socket read without a lock. One bad job is left out of either, never every job."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..clock import Clock
from ..daemon_log import log
from .signals import JobSignals
from .types import GpusStatus, JobStatus, Status


class _Runner(Protocol):  # what publishing reads of a JobRunner
    setting: Any

    def signals(self) -> JobSignals: ...

    def snapshot(self, wm: float | None = None) -> JobStatus: ...


class _Hooks(Protocol):  # the supervisor's Hooks: per-job rows, then the host-wide part
    job_status: Sequence[Callable[[JobStatus], JobStatus]]
    status: Sequence[Callable[[list[JobStatus]], GpusStatus | None]]


class _Sweeps(Protocol):
    def snapshot(self) -> Any: ...


class Publishing:
    clock: Clock
    runners: Mapping[str, _Runner]  # name -> its JobRunner
    hooks: _Hooks
    sweeps: _Sweeps | None
    _snapshot: Status

    def _signals(self) -> list[JobSignals]:
        """Every job's signals for the tick hooks; a job whose signals fail is left out, not every job."""
        out = []
        for r in self.runners.values():
            try:
                out.append(r.signals())
            except Exception:  # noqa: BLE001
                log.exception("job_signals_failed", job=r.setting.cfg.name)
        return out

    def _publish(self) -> None:
        """Build the next status snapshot (under the supervisor's lock); readers get it without a lock."""
        jobs: list[JobStatus] = []
        job_hooks = tuple(self.hooks.job_status)
        wm = self.clock.wall() - self.clock.monotonic()  # the runners run on this clock: read once, not per job
        for r in self.runners.values():
            try:
                row = r.snapshot(wm)
                for job_hook in job_hooks:
                    row = job_hook(row)
                jobs.append(row)
            except Exception:  # noqa: BLE001
                log.exception("job_snapshot_failed", job=r.setting.cfg.name)
        gpus = None
        for hook in self.hooks.status:
            try:
                gpus = hook(jobs) or gpus
            except Exception:  # noqa: BLE001
                log.exception("status_hook_failed", hook=getattr(hook, "__qualname__", str(hook)))
        sweeps = self.sweeps.snapshot() if self.sweeps else ()  # one reference swap: a reader sees the old or the new
        self._snapshot = Status(jobs=tuple(jobs), gpus=gpus, sweeps=sweeps)
