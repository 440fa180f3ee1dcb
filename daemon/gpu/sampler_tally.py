"""What the GPU sampler's passes counted between two snapshots.

The latest successful sample per GPU, the error counts (a field the device does not support counted
once), which GPUs are failing (so a failure and a recovery are each logged once), the XID counts and
the histogram of pass durations.  :class:`PassTally` takes no lock of its own: the sampler calls it
under its one lock, so a snapshot never holds a sample without the errors counted with it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from .snapshot import LOOPS
from .types import DurationHistogram, FieldError, GpuSample, GpuSlowSample, XidCount, XidEvent


class PassTally:
    def __init__(self, buckets: tuple[float, ...]):
        self.buckets = tuple(buckets)
        self.samples: dict[str, GpuSample] = {}
        self.slow: dict[str, GpuSlowSample] = {}
        self.xids: dict[tuple[str, int], XidCount] = {}
        self.errors: dict[tuple[str, str, str], int] = {}  # (gpu key, field, kind) -> count
        self.failing: dict[tuple[str, str], str] = {}  # (gpu, loop) -> kind, to log transitions once
        self.last_pass: dict[str, float] = {}  # loop -> unix time of its last pass
        self._seen_unsupported: set[tuple[str, str]] = set()
        self._hist: dict[str, list[Any]] = {l: [[0] * len(self.buckets), 0, 0.0] for l in LOOPS}

    def count_error(self, key: str, field: str, kind: str) -> None:
        k = (key, field, kind)
        self.errors[k] = self.errors.get(k, 0) + 1

    def sampled(self, loop: str, key: str, sample: GpuSample | GpuSlowSample) -> None:
        """A device's pass succeeded: keep its sample and count the fields it could not read."""
        if loop == "fast":
            self.samples[key] = sample  # type: ignore[assignment]
        else:
            self.slow[key] = sample  # type: ignore[assignment]
        self._count_field_errors(key, sample.errors)

    def _count_field_errors(self, key: str, errors: Iterable[FieldError]) -> None:
        for fe in errors:
            if fe.kind == "not_supported":
                if (key, fe.field) in self._seen_unsupported:
                    continue  # counted once: it will not start working on its own
                self._seen_unsupported.add((key, fe.field))
            self.count_error(key, fe.field, fe.kind)

    def failed(self, loop: str, key: str, kind: str) -> bool:
        """A device's pass failed: its series go (no frozen values); True the first time it fails this way."""
        (self.samples if loop == "fast" else self.slow).pop(key, None)
        self.count_error(key, "device", kind)
        first = self.failing.get((key, loop)) != kind
        self.failing[(key, loop)] = kind
        return first

    def is_failing(self, key: str, loop: str) -> bool:
        return (key, loop) in self.failing

    def recovered(self, key: str, loop: str) -> str | None:
        """The kind of failure the device came back from, or None if it was not failing."""
        return self.failing.pop((key, loop), None)

    def observe(self, loop: str, seconds: float, now: float) -> None:
        h = self._hist[loop]
        i = bisect.bisect_left(self.buckets, seconds)
        for j in range(i, len(self.buckets)):
            h[0][j] += 1
        h[1] += 1
        h[2] += seconds
        self.last_pass[loop] = now

    def xids_seen(self, events: Iterable[XidEvent]) -> None:
        for ev in events:
            k = (ev.gpu, ev.xid)
            old = self.xids.get(k)
            self.xids[k] = XidCount(count=(old.count if old else 0) + 1,
                                    last_seen=max(ev.timestamp, old.last_seen if old else ev.timestamp))

    def durations(self) -> Mapping[str, DurationHistogram]:
        return MappingProxyType({
            l: DurationHistogram(self.buckets, tuple(h[0]), h[1], h[2]) for l, h in self._hist.items()
        })

    def failing_fast(self) -> Mapping[str, str]:
        """GPU key -> error kind of its failing fast sample."""
        return MappingProxyType({g: k for (g, loop), k in self.failing.items() if loop == "fast"})
