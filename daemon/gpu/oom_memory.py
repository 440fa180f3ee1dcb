"""A job's GPUs at a CUDA out-of-memory: whose memory fills them now, and what their memory did during the attempt.

The GPU sampler keeps only the latest sample per GPU. `MemoryHistory` remembers, per GPU, the device memory in
use at each sample for as long as an attempt can last (halving its resolution when full, so it always spans the
whole attempt). `oom_note` turns the supervisor's published GPU status (NVML's processes, already attributed to
jobs) and that history into the words an OOM event, restart reason or failure line quotes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

GiB = 2**30
MAX_POINTS = 2048  # per GPU; past it every other point goes
MAX_AGE = 7 * 86400.0  # seconds: older points tell nothing about the current attempt
TOP_HOLDERS = 3  # processes named per GPU, the largest first


@dataclass(frozen=True)
class Trend:
    gpu: str
    start: int  # bytes in use at the first sample in the span
    peak: int
    end: int  # at the last sample
    seconds: float
    total: int | None

    def describe(self) -> str:
        total = f" of {_gib(self.total)}" if self.total else ""
        return (f"GPU {self.gpu} memory in use went from {_gib(self.start)} to {_gib(self.end)}{total} over "
                f"{_duration(self.seconds)} (peak {_gib(self.peak)})")


class MemoryHistory:
    """Device memory in use per GPU, one point per sample. Fed from the supervisor's tick; read at an exit."""

    def __init__(self, max_points: int = MAX_POINTS, max_age: float = MAX_AGE):
        self.max_points, self.max_age = max_points, max_age
        self._points: dict[str, list[tuple[float, int, int | None]]] = {}

    def observe(self, snapshot: Any) -> None:
        """Take the snapshot's new samples (a GpuSnapshot; the same sample seen twice is kept once)."""
        for key, s in snapshot.samples.items():
            if s.memory_used_bytes is None:
                continue
            pts = self._points.setdefault(str(key), [])
            if pts and s.timestamp <= pts[-1][0]:
                continue
            pts.append((s.timestamp, int(s.memory_used_bytes), s.memory_total_bytes))
            while pts and pts[0][0] < s.timestamp - self.max_age:
                pts.pop(0)
            if len(pts) > self.max_points:
                pts[:] = pts[-1::-2][::-1]  # every other point, the newest kept

    def trend(self, gpu: str, since: float) -> Trend | None:
        """What GPU `gpu`'s memory did from `since` (unix seconds) on; None with fewer than two samples."""
        pts = [p for p in self._points.get(gpu, ()) if p[0] >= since]
        if len(pts) < 2:
            return None
        return Trend(gpu, pts[0][1], max(p[1] for p in pts), pts[-1][1], pts[-1][0] - pts[0][0], pts[-1][2])


@dataclass(frozen=True)
class OomNote:
    gpu: str  # one clause: each of the job's GPUs, its memory in use and by whom
    trend: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)


class GpuProcessView(Protocol):
    """A GPU process as the published status has it (status/types.py GpuProcessStatus; gpu/ may not import
    status/, which reads gpu/ through the config)."""

    @property
    def pid(self) -> int | None: ...

    @property
    def used_bytes(self) -> int | None: ...

    @property
    def job(self) -> str | None: ...


class GpuDeviceView(Protocol):
    """A device row of the published status (status/types.py GpuDeviceStatus)."""

    @property
    def index(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def memory_used_bytes(self) -> int | None: ...

    @property
    def memory_total_bytes(self) -> int | None: ...

    @property
    def processes(self) -> Sequence[GpuProcessView]: ...

    @property
    def jobs(self) -> Sequence[str]: ...

    @property
    def assigned(self) -> Sequence[str]: ...


class GpusView(Protocol):
    """The GPUs part of the published status (status/types.py GpusStatus)."""

    @property
    def up(self) -> bool: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def devices(self) -> Sequence[GpuDeviceView]: ...


def oom_note(job: str, gpus: GpusView | None, history: MemoryHistory, since: float | None,
             proc_root: str = "/proc") -> OomNote:
    """`gpus`: the supervisor status's GPUs (metrics/status.py: devices with memory and attributed processes);
    `since`: the attempt's start (unix seconds)."""
    if gpus is None or not gpus.up:
        why = (gpus.reason if gpus is not None else None) or "no GPU source"
        return OomNote(f"no GPU memory figures (GPU collector down: {why})")
    mine = [d for d in gpus.devices if job in d.assigned or job in d.jobs]
    if not mine:
        return OomNote("no GPU memory figures for this job: none of this host's GPUs is assigned to it (gpus / "
                       "device) or held by its processes (a ray job's GPU is on its node)")
    clauses, facts, trends = [], [], []
    for d in mine:
        key = str(d.index)
        clauses.append(_gpu_clause(d, job, proc_root))
        facts.append({"gpu": key, "model": d.model, "memory_used_bytes": d.memory_used_bytes,
                      "memory_total_bytes": d.memory_total_bytes,
                      "processes": [{"pid": p.pid, "used_bytes": p.used_bytes, "job": p.job,
                                     "name": _comm(p.pid, proc_root)} for p in d.processes]})
        t = history.trend(key, since) if since is not None else None
        if t is not None:
            trends.append(t.describe())
            facts[-1]["trend"] = {"start_bytes": t.start, "peak_bytes": t.peak, "end_bytes": t.end,
                                  "seconds": round(t.seconds, 1)}
    return OomNote("; ".join(clauses), "; ".join(trends) or None, {"gpus": facts})


def _gpu_clause(d: GpuDeviceView, job: str, proc_root: str) -> str:
    used, total = d.memory_used_bytes, d.memory_total_bytes
    head = f"GPU {d.index} ({d.model or 'unknown model'})"
    if used is None:
        return f"{head}: memory in use not reported"
    head += f" has {used / GiB:.1f} of {_gib(total)} in use" if total else f" has {_gib(used)} in use"
    by_job: dict[str, int] = {}
    others: list[tuple[int, str]] = []
    for p in d.processes:
        amount = p.used_bytes
        if p.job:
            by_job[p.job] = by_job.get(p.job, 0) + (amount or 0)
        else:
            name = _comm(p.pid, proc_root)
            who = f"pid {p.pid}" + (f" ({name}, not an isaacd job)" if name else " (not an isaacd job)")
            others.append((amount or 0, f"{_gib(amount) if amount is not None else 'an unreported amount'} by {who}"))
    holders = others + [(n, f"{_gib(n)} by {'this job' if j == job else 'job ' + j}") for j, n in by_job.items()]
    if not holders:
        return f"{head}, by no process NVML lists (another container's, or the driver's)"
    holders.sort(key=lambda h: -h[0])
    named = [text for _, text in holders[:TOP_HOLDERS]]
    more = len(holders) - len(named)
    return f"{head}: " + ", ".join(named) + (f" and {more} more" if more > 0 else "")


def _comm(pid: Any, proc_root: str) -> str | None:
    """The process's name, when it is in our PID namespace (not a container's)."""
    try:
        return (Path(proc_root) / str(int(pid)) / "comm").read_text().strip() or None
    except (OSError, ValueError, TypeError):
        return None


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GiB:.1f} GiB"


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"
