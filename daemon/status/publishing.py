"""What the tick hands its hooks and its readers (a part of the Supervisor, its base, as attempt/ending.py's
EndedJobs is): every job's signals for the tick hooks, and the status snapshot that `isaacd status`, /metrics and
the control socket read without a lock. One bad job is left out of either, never every job."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

from ..clock import Clock
from ..daemon_log import log
from .signals import JobSignals
from .types import GpusStatus, JobStatus, Status


# every row through every job_status hook at least this often: a hook's part that moves without its saying so
# (none is known) is at most this stale
REMAKE_SECONDS = 10.0


class _Runner(Protocol):  # what publishing reads of a JobRunner
    setting: Any

    def signals(self) -> JobSignals: ...

    def snapshot(self, wm: float | None = None) -> JobStatus: ...


class _Hooks(Protocol):  # the supervisor's Hooks: per-job rows, what of them changed, then the host-wide part
    job_status: Sequence[Callable[[JobStatus], JobStatus]]
    row_changes: Sequence[Callable[[], Collection[str] | None]]
    status: Sequence[Callable[[list[JobStatus]], GpusStatus | None]]


class _Sweeps(Protocol):
    def snapshot(self) -> Any: ...


class Publishing:
    clock: Clock
    runners: Mapping[str, _Runner]  # name -> its JobRunner
    hooks: _Hooks
    sweeps: _Sweeps | None
    _snapshot: Status
    _rows: dict[str, tuple[JobStatus, JobStatus]]
    _rows_made_at: float

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
        """Build the next status snapshot (under the supervisor's lock); readers get it without a lock. A job's row
        goes through the job_status hooks again only when its runner's row is another object or a hook says its part
        may have changed (issue 39: 1,000 queued rows through three hooks at every tick was a third of the
        supervisor's CPU at rest); every row goes through them every REMAKE_SECONDS all the same."""
        jobs: list[JobStatus] = []
        job_hooks = tuple(self.hooks.job_status)
        changed = self._rows_changed()
        rows = self._rows
        wm = self.clock.wall() - self.clock.monotonic()  # the runners run on this clock: read once, not per job
        for name, r in self.runners.items():
            try:
                row = r.snapshot(wm)
                last = rows.get(name)
                if last is not None and last[0] is row and changed is not None and name not in changed:
                    jobs.append(last[1])
                    continue
                out = row
                for job_hook in job_hooks:
                    out = job_hook(out)
                rows[name] = (row, out)
                jobs.append(out)
            except Exception:  # noqa: BLE001
                log.exception("job_snapshot_failed", job=r.setting.cfg.name)
        if len(rows) > len(self.runners):  # a job gone: its rows go too
            self._rows = {k: v for k, v in rows.items() if k in self.runners}
        gpus = None
        for hook in self.hooks.status:
            try:
                gpus = hook(jobs) or gpus
            except Exception:  # noqa: BLE001
                log.exception("status_hook_failed", hook=getattr(hook, "__qualname__", str(hook)))
        sweeps = self.sweeps.snapshot() if self.sweeps else ()  # one reference swap: a reader sees the old or the new
        self._snapshot = Status(jobs=tuple(jobs), gpus=gpus, sweeps=sweeps)

    def _rows_changed(self) -> Collection[str] | None:
        """The jobs whose part of the row some job_status hook may have changed since the last publish; None: every
        row is made again (a hook that cannot say, or REMAKE_SECONDS since every row was). Every hook is asked each
        time: asking is what starts its next count."""
        reporters = tuple(self.hooks.row_changes)
        said: list[Collection[str] | None] = []
        for report in reporters:
            try:
                said.append(report())
            except Exception:  # noqa: BLE001 - a hook that cannot say: every row made, as without it
                log.exception("row_changes_failed", hook=getattr(report, "__qualname__", str(report)))
                said.append(None)
        now = self.clock.monotonic()
        if len(reporters) != len(self.hooks.job_status) or any(s is None for s in said) \
                or now - self._rows_made_at >= REMAKE_SECONDS:
            self._rows_made_at = now
            return None
        return set().union(*said)  # type: ignore[arg-type]  (None is ruled out above)
