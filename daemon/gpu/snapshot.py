"""The GPU snapshot: everything the sampler publishes, frozen after each pass.

The sampler (``sampler.py``) builds a new :class:`GpuSnapshot` after every pass and swaps it in whole;
the exporter, the status and the watchdogs only ever read one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .types import DriverInfo, DurationHistogram, GpuInfo, GpuMap, GpuSample, GpuSlowSample, ProcessMemory, XidCount

DEFAULT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LOOPS = ("fast", "slow")  # loops whose pass durations go into the histogram


def empty_histogram(buckets: tuple[float, ...]) -> DurationHistogram:
    return DurationHistogram(buckets=buckets, counts=(0,) * len(buckets))


@dataclass(frozen=True)
class GpuSnapshot:
    """Everything the exporter and the watchdogs read, frozen at ``taken_at`` (unix seconds).

    ``samples``/``slow`` hold the latest *successful* sample per GPU: a GPU whose last pass failed
    (lost, unexpected error) is absent, so its series disappear instead of freezing.
    """

    taken_at: float
    up: bool
    reason: str | None
    source: str
    driver: DriverInfo
    gpus: GpuMap[GpuInfo]
    samples: GpuMap[GpuSample]
    slow: GpuMap[GpuSlowSample]
    xids: Mapping[tuple[str, int], XidCount]
    errors: Mapping[tuple[str, str, str], int]  # (gpu key, field, kind) -> count
    unhealthy: GpuMap[str]  # gpu key -> reason, set through GpuSampler.mark_unhealthy
    durations: Mapping[str, DurationHistogram]  # loop -> histogram of pass durations
    xid_watch: bool = False
    xid_reason: str | None = None
    last_pass: Mapping[str, float] = field(default_factory=dict)  # loop -> unix time of last pass
    failing: Mapping[str, str] = field(default_factory=dict)  # gpu key -> error kind of its failing fast sample

    @property
    def processes(self) -> tuple[ProcessMemory, ...]:
        return tuple(p for s in self.samples.values() for p in (s.processes or ()))

    def resolve(self, ref: Any) -> GpuInfo | None:
        """GPU by int index, key (``"0"``, ``"0:1"``) or UUID; ``None`` if unknown."""
        return self.gpus.get(ref)

    def sample(self, ref: Any) -> GpuSample | None:
        return self.samples.get(ref)

    def is_up(self, ref: Any) -> bool:
        """The last fast pass over this GPU succeeded."""
        return ref in self.samples

    def xid_total(self, ref: Any | None = None, xid: int | None = None) -> int:
        key = None if ref is None else (g.key if (g := self.resolve(ref)) else str(ref))
        return sum(c.count for (k, x), c in self.xids.items()
                   if (key is None or k == key) and (xid is None or x == xid))


def empty_snapshot(reason: str = "GPU sampler not started", source: str = "none") -> GpuSnapshot:
    return GpuSnapshot(
        taken_at=time.time(), up=False, reason=reason, source=source, driver=DriverInfo(),
        gpus=GpuMap(), samples=GpuMap(), slow=GpuMap(), xids=MappingProxyType({}), errors=MappingProxyType({}),
        unhealthy=GpuMap(), durations=MappingProxyType({l: empty_histogram(DEFAULT_BUCKETS) for l in LOOPS}),
    )
