"""The one interface hardware data enters isaacd through.

Implementations:

* :class:`isaacd.gpu.nvml.NvmlSource` - the real thing (nvidia-ml-py, ``import pynvml``).
* :class:`isaacd.gpu.scripted.ScriptedSource` - replays a scripted timeline (heat, throttling,
  XIDs, a GPU falling off the bus) for tests and for supervisor runs with ``[gpu] source = "scripted"``.
* :class:`NoSource` - ``[gpu] source = "none"``: the collector reports itself down on purpose.

Only the :class:`~isaacd.gpu.sampler.GpuSampler`'s threads call a source's sampling methods; the
power-limit methods may be called from a watchdog thread (both implementations are thread-safe).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

from .nvml import NvmlSource
from .scripted import ScriptedSource
from .types import DriverInfo, GpuInfo, GpuSample, GpuSlowSample, GpuUnavailableError, XidEvent


@runtime_checkable
class GpuSource(Protocol):
    name: str

    def open(self) -> list[GpuInfo]:
        """Initialise and enumerate devices. Raises :class:`GpuUnavailableError` with a human reason."""

    def devices(self) -> list[GpuInfo]:
        """Devices found by the last :meth:`open` (physical GPUs first, then MIG devices)."""

    def driver_info(self) -> DriverInfo:
        ...

    def sample_fast(self, gpu: GpuInfo) -> GpuSample:
        """Cheap fields (µs each). Per-field failures go to ``sample.errors`` with the field ``None``;
        raises :class:`GpuLostError` when the whole device is gone."""

    def sample_slow(self, gpu: GpuInfo) -> GpuSlowSample:
        """Expensive fields (energy, PCIe throughput: ms each). Same error contract as sample_fast."""

    def wait_xid(self, timeout: float) -> list[XidEvent]:
        """Block up to ``timeout`` seconds for XID events; ``[]`` on timeout.
        Raises :class:`GpuNotSupportedError` if XID events cannot be watched at all."""

    def get_power_limit(self, gpu: GpuInfo) -> float:
        """Enforced power limit in watts."""

    def set_power_limit(self, gpu: GpuInfo, watts: float) -> None:
        """Raises :class:`GpuPermissionError` (a PermissionError) when not allowed (not root),
        :class:`ValueError` outside the device's constraints, :class:`GpuNotSupportedError`."""

    def close(self) -> None:
        ...


class NoSource:
    """``[gpu] source = "none"``: no GPUs, collector down with a clear reason."""

    name = "none"

    def __init__(self, reason: str = 'GPU collection disabled ([gpu] source = "none")'):
        self.reason = reason

    def open(self) -> list[GpuInfo]:
        raise GpuUnavailableError(self.reason)

    def devices(self) -> list[GpuInfo]:
        return []

    def driver_info(self) -> DriverInfo:
        return DriverInfo()

    def sample_fast(self, gpu: GpuInfo) -> GpuSample:  # pragma: no cover - never opened
        raise GpuUnavailableError(self.reason)

    def sample_slow(self, gpu: GpuInfo) -> GpuSlowSample:  # pragma: no cover
        raise GpuUnavailableError(self.reason)

    def wait_xid(self, timeout: float) -> list[XidEvent]:  # pragma: no cover
        raise GpuUnavailableError(self.reason)

    def get_power_limit(self, gpu: GpuInfo) -> float:  # pragma: no cover
        raise GpuUnavailableError(self.reason)

    def set_power_limit(self, gpu: GpuInfo, watts: float) -> None:  # pragma: no cover
        raise GpuUnavailableError(self.reason)

    def close(self) -> None:
        pass


def make_source(kind: str, script: str | Path | None = None, *,
                clock: Callable[[], float] | None = None) -> GpuSource:
    """Build the source named by ``[gpu] source``: ``"nvml"``, ``"scripted"`` (needs ``script``) or ``"none"``."""
    if kind == "nvml":
        return NvmlSource()
    if kind == "scripted":
        if script is None:
            raise ValueError('[gpu] source = "scripted" needs script = "/path/to/timeline.json"')
        kwargs: dict[str, Any] = {} if clock is None else {"clock": clock}
        return ScriptedSource(script, **kwargs)
    if kind == "none":
        return NoSource()
    raise ValueError(f'unknown [gpu] source {kind!r}; use "nvml", "scripted" or "none"')
