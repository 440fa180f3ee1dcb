"""Plain data that leaves the GPU layer: identities, samples, XID events, errors.

Rules that every consumer (exporter, watchdogs, `isaacd status`) relies on:

* ``None`` means "the driver does not report this here" (not supported, MIG device, call failed).
  It never means zero, and the exporter drops the series instead of exporting a fake 0.
* Every GPU is addressed by its *key*: ``"0"`` for physical GPU 0, ``"0:1"`` for MIG device 1 of
  GPU 0 (the same ``<gpu>:<mig>`` form CDI uses for ``nvidia.com/gpu=0:1``).  Mappings in a
  snapshot (:class:`GpuMap`) also accept an ``int`` index or a ``GPU-``/``MIG-`` UUID.
* Base units: ratios 0..1, degrees Celsius, watts, bytes, hertz, joules, seconds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Generic, TypeVar

# --------------------------------------------------------------------------------------- errors


class GpuError(Exception):
    """Base class for errors raised by a :class:`~isaacd.gpu.source.GpuSource`."""

    kind = "error"


class GpuUnavailableError(GpuError):
    """The source cannot start at all: no driver, no library, no GPU, bad script."""

    kind = "unavailable"


class GpuLostError(GpuError):
    """The GPU fell off the bus (NVML_ERROR_GPU_IS_LOST) or is otherwise gone; every call fails."""

    kind = "gpu_lost"


class GpuNotSupportedError(GpuError):
    """This query or operation is not supported on this device / driver."""

    kind = "not_supported"


class GpuPermissionError(GpuError, PermissionError):
    """The operation needs privileges isaacd does not have (setting a power limit needs root)."""

    kind = "no_permission"


# ------------------------------------------------------------------------------ clock reasons

#: NVML clock-event ("throttle") reason bits -> label value used in metrics and scripts.
CLOCK_EVENT_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}


def clock_event_names(mask: int | None) -> frozenset[str]:
    if mask is None:
        return frozenset()
    return frozenset(name for name, bit in CLOCK_EVENT_REASONS.items() if mask & bit)


def clock_event_mask(names: Any) -> int:
    """``["hw_thermal_slowdown", ...]`` (or an int mask) -> bit mask; unknown names raise ValueError."""
    if isinstance(names, bool):
        raise ValueError(f"clock_event_reasons: expected a list of names or an int mask, got {names!r}")
    if isinstance(names, int):
        return names
    mask = 0
    for name in names:
        if name not in CLOCK_EVENT_REASONS:
            raise ValueError(f"unknown clock event reason {name!r}; known: {', '.join(CLOCK_EVENT_REASONS)}")
        mask |= CLOCK_EVENT_REASONS[name]
    return mask


# ------------------------------------------------------------------------------------ XID classes

# From NVIDIA's XID catalogue (see docs/metrics.md).  "application": the app faulted, restarting it
# is the fix.  "reset": the GPU needs a reset (drain it, don't restart jobs in a loop).  "reboot":
# the node needs a reboot.  Anything else is "other".
XID_APPLICATION = frozenset({13, 31, 43, 45})
XID_RESET = frozenset({48, 63, 64, 74, 94, 95, 119, 120})
XID_REBOOT = frozenset({79})


def xid_class(xid: int) -> str:
    """Class of an XID code: ``application``, ``reset``, ``reboot`` or ``other``."""
    if xid in XID_REBOOT:
        return "reboot"
    if xid in XID_RESET:
        return "reset"
    if xid in XID_APPLICATION:
        return "application"
    return "other"


# ------------------------------------------------------------------------------------ identities


@dataclass(frozen=True)
class GpuInfo:
    """Identity of one GPU or MIG device.

    ``index`` is NVML's index: the physical index for a GPU, the MIG device index within its parent
    for a MIG device (then ``parent_index`` is the physical GPU's index).
    """

    index: int
    uuid: str
    model: str
    pci_bus_id: str
    is_mig: bool = False
    parent_index: int | None = None
    # a physical GPU in MIG mode (NVML's current mode), with or without instances: never used whole (CUDA sees
    # only its MIG devices), so the queue places on its instances only (scheduling/room.py)
    mig_mode: bool = False

    @property
    def key(self) -> str:
        return f"{self.parent_index}:{self.index}" if self.is_mig else str(self.index)

    @property
    def labels(self) -> dict[str, str]:
        return {"gpu": self.key, "uuid": self.uuid, "model": self.model, "pci_bus_id": self.pci_bus_id}


@dataclass(frozen=True)
class DriverInfo:
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_driver_version: str | None = None


# --------------------------------------------------------------------------------------- samples


@dataclass(frozen=True)
class ProcessMemory:
    """One process holding memory on one GPU (host PID as NVML reports it)."""

    gpu: str
    pid: int
    used_bytes: int | None  # None: the driver doesn't say (e.g. some container setups)


@dataclass(frozen=True)
class FieldError:
    """One field of one sample that could not be read. ``kind``: not_supported, no_permission, error..."""

    field: str
    kind: str
    message: str = ""


@dataclass(frozen=True)
class GpuSample:
    """Fast-loop fields of one GPU at ``timestamp`` (unix seconds). ``None`` = not reported."""

    gpu: str
    timestamp: float
    utilization_gpu_ratio: float | None = None
    utilization_memory_ratio: float | None = None
    temperature_celsius: float | None = None
    memory_temperature_celsius: float | None = None
    thermal_margin_celsius: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    sm_clock_hertz: float | None = None
    memory_clock_hertz: float | None = None
    clock_event_reasons: int | None = None  # NVML bit mask, see CLOCK_EVENT_REASONS
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_aggregate: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    processes: tuple[ProcessMemory, ...] | None = None
    errors: tuple[FieldError, ...] = ()

    @property
    def clock_event_reason_names(self) -> frozenset[str]:
        return clock_event_names(self.clock_event_reasons)


@dataclass(frozen=True)
class GpuSlowSample:
    """Slow-loop fields (expensive calls: total energy ~3 ms, PCIe throughput ~20 ms on an H200)."""

    gpu: str
    timestamp: float
    energy_joules: float | None = None  # since driver load
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    pcie_link_generation: int | None = None
    pcie_link_width: int | None = None
    sm_clock_max_hertz: float | None = None
    memory_clock_max_hertz: float | None = None
    power_limit_default_watts: float | None = None
    power_limit_min_watts: float | None = None
    power_limit_max_watts: float | None = None
    # Temperature thresholds read from the driver: slowdown, shutdown, gpu_max, memory_max.
    temperature_thresholds_celsius: Mapping[str, float] = field(default_factory=dict)
    errors: tuple[FieldError, ...] = ()


#: Numeric fast-sample fields a script may set (name -> python type).
FAST_FIELDS: dict[str, type] = {
    f.name: f.type  # type: ignore[misc]
    for f in fields(GpuSample)
    if f.name not in {"gpu", "timestamp", "processes", "errors"}
}
SLOW_FIELDS: dict[str, type] = {
    f.name: f.type  # type: ignore[misc]
    for f in fields(GpuSlowSample)
    if f.name not in {"gpu", "timestamp", "errors"}
}

TEMPERATURE_THRESHOLDS = ("slowdown", "shutdown", "gpu_max", "memory_max")


@dataclass(frozen=True)
class XidEvent:
    gpu: str  # key of the physical GPU
    xid: int
    timestamp: float  # unix seconds
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class XidCount:
    count: int
    last_seen: float  # unix seconds of the newest event with this code


@dataclass(frozen=True)
class DurationHistogram:
    """Cumulative histogram of sampler loop durations (seconds)."""

    buckets: tuple[float, ...]  # upper bounds, ascending, without +Inf
    counts: tuple[int, ...]  # cumulative count per bucket, same length as buckets
    count: int = 0
    sum: float = 0.0


# ----------------------------------------------------------------------------------------- GpuMap

T = TypeVar("T")


class GpuMap(Mapping[str, T], Generic[T]):
    """Read-only mapping keyed by GPU key (``"0"``, ``"0:1"``) that also accepts ``int`` indices
    and ``GPU-``/``MIG-`` UUIDs: ``snap.samples[0]``, ``snap.samples["GPU-8d..."]`` both work."""

    __slots__ = ("_data", "_alias")

    def __init__(self, data: Mapping[str, T] | None = None, aliases: Mapping[str, str] | None = None):
        self._data: dict[str, T] = dict(data or {})
        self._alias: dict[str, str] = dict(aliases or {})

    def _norm(self, ref: Any) -> Any:
        if isinstance(ref, bool):
            return ref
        if isinstance(ref, int):
            return str(ref)
        if isinstance(ref, str):
            return self._alias.get(ref, self._alias.get(ref.strip(), ref.strip()))
        return ref

    def __getitem__(self, ref: Any) -> T:
        return self._data[self._norm(ref)]

    def __contains__(self, ref: object) -> bool:
        return self._norm(ref) in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"GpuMap({self._data!r})"
