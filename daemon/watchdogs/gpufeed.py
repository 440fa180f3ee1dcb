"""Adapts the GPU sampler's snapshot (isaacd.gpu) to what the watchdogs read.

Hardware data reaches the watchdogs only through the sampler, whatever its source (NVML, or a
scripted timeline in tests), so a heat curve in a test travels the same path as a hot H200.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .base import GpuReading, XidEvent

HW_THERMAL = ("hw_thermal_slowdown",)


@dataclass
class FeedTick:
    readings: list[GpuReading] = field(default_factory=list)
    processes: dict[int, set[int]] = field(default_factory=dict)  # GPU index -> host PIDs
    new_xids: list[XidEvent] = field(default_factory=list)


def _physical_index(key: str) -> int:
    return int(key.split(":")[0])  # a MIG device "p:i" counts for its parent GPU p


class SamplerFeed:
    def __init__(self, sampler: Any):
        self.sampler = sampler
        self._xid_counts: dict[tuple[str, int], int] | None = None

    def poll(self) -> FeedTick:
        snap = self.sampler.snapshot()
        tick = FeedTick()
        for key, s in snap.samples.items():
            info = snap.gpus.get(key)
            if info is None or info.is_mig:
                continue
            slow = snap.slow.get(key)
            thresholds = dict(slow.temperature_thresholds_celsius) if slow else {}
            tick.readings.append(GpuReading(
                index=info.index, uuid=info.uuid,
                temperature_celsius=s.temperature_celsius,
                memory_temperature_celsius=s.memory_temperature_celsius,
                slowdown_celsius=thresholds.get("slowdown"),
                memory_max_celsius=thresholds.get("memory_max"),
                utilization_ratio=s.utilization_gpu_ratio,
                power_watts=s.power_watts,
                power_limit_watts=s.power_limit_watts,
                default_power_limit_watts=slow.power_limit_default_watts if slow else None,
                hw_thermal_slowdown=bool(s.clock_event_reason_names & set(HW_THERMAL)),
            ))
        for p in snap.processes:
            tick.processes.setdefault(_physical_index(p.gpu), set()).add(p.pid)
        counts = {k: c.count for k, c in snap.xids.items()}
        if self._xid_counts is not None:  # the first snapshot is history, not news
            for (key, xid), n in counts.items():
                for _ in range(n - self._xid_counts.get((key, xid), 0)):
                    tick.new_xids.append(XidEvent(_physical_index(key), xid, snap.xids[(key, xid)].last_seen))
        self._xid_counts = counts
        return tick

    def set_power_limit(self, gpu: int, watts: float) -> None:
        self.sampler.set_power_limit(gpu, watts)

    def mark_unhealthy(self, gpu: int, reason: str) -> None:
        self.sampler.mark_unhealthy(gpu, reason)

