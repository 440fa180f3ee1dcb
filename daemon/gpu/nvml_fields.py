"""Reading one device's fields through NVML: the fast fields (each pass), the slow ones (blocking or
expensive), in base units, with a per-field error list instead of a failed sample.

Costs measured on an H200 (driver 580): the fast fields are 1-5 µs a call and the batched field
values ~20 µs; total energy ~3 ms and PCIe throughput ~20 ms (it blocks while it measures), which is
why those are slow fields.  A field the device reports as unsupported is remembered (in the set the
source keeps per device) and not asked again; a lost GPU fails the whole sample at once.
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any, Callable

from .nvml_codes import kind
from .types import FieldError, GpuInfo, GpuLostError, GpuSample, GpuSlowSample, ProcessMemory

# Field values read in one batched call: name -> NVML field id.
_FIELD_IDS = {
    "memory_temperature_celsius": 82,  # NVML_FI_DEV_MEMORY_TEMP (HBM)
    "ecc_corrected_volatile": 3,  # NVML_FI_DEV_ECC_SBE_VOL_TOTAL
    "ecc_uncorrected_volatile": 4,  # NVML_FI_DEV_ECC_DBE_VOL_TOTAL
    "ecc_corrected_aggregate": 5,  # NVML_FI_DEV_ECC_SBE_AGG_TOTAL
    "ecc_uncorrected_aggregate": 6,  # NVML_FI_DEV_ECC_DBE_AGG_TOTAL
    "remapped_rows_correctable": 142,  # NVML_FI_DEV_REMAPPED_COR
    "remapped_rows_uncorrectable": 143,  # NVML_FI_DEV_REMAPPED_UNC
    "remapped_rows_pending": 144,  # NVML_FI_DEV_REMAPPED_PENDING
    "remapped_rows_failure": 145,  # NVML_FI_DEV_REMAPPED_FAILURE
}
_BOOL_FIELDS = {"remapped_rows_pending", "remapped_rows_failure"}
_THRESHOLDS = {"shutdown": 0, "slowdown": 1, "memory_max": 2, "gpu_max": 3}


# A field value's type -> the member of pynvml's c_nvmlValue_t union that holds it. UNSIGNED_SHORT (6) is
# missing from older pynvml releases, hence its default.
_VALUE_MEMBERS = (
    ("NVML_VALUE_TYPE_DOUBLE", "dVal"), ("NVML_VALUE_TYPE_UNSIGNED_INT", "uiVal"),
    ("NVML_VALUE_TYPE_UNSIGNED_LONG", "ulVal"), ("NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", "ullVal"),
    ("NVML_VALUE_TYPE_SIGNED_LONG_LONG", "sllVal"), ("NVML_VALUE_TYPE_SIGNED_INT", "siVal"),
)


def _field_value(nv: ModuleType, v: Any) -> float | int:
    t = v.valueType
    for type_name, member in _VALUE_MEMBERS:
        if t == getattr(nv, type_name):
            return getattr(v.value, member)
    if t == getattr(nv, "NVML_VALUE_TYPE_UNSIGNED_SHORT", 6):
        return v.value.usVal
    raise ValueError(f"unknown NVML value type {t}")


class FieldReader:
    """Reads fields of one device, collecting per-field errors; raises GpuLostError at once.

    ``unsupported`` is the source's set of (gpu key, field) the device said it does not support."""

    def __init__(self, nv: Any, key: str, unsupported: set[tuple[str, str]]):
        self.nv, self.key, self.unsupported = nv, key, unsupported
        self.errors: list[FieldError] = []

    def skip(self, field: str) -> bool:
        return (self.key, field) in self.unsupported

    def fail(self, field: str, err: Exception) -> None:
        k = kind(err)
        if k == "gpu_lost":
            raise GpuLostError(f"GPU {self.key}: {err} (while reading {field})") from err
        if k == "not_supported":
            self.unsupported.add((self.key, field))
        self.errors.append(FieldError(field, k, str(err)))

    def call(self, field: str, fn: Callable[..., Any], *args: Any) -> Any:
        if self.skip(field):
            return None
        try:
            return fn(*args)
        except self.nv.NVMLError as e:
            self.fail(field, e)
            return None

    def scaled(self, field: str, fn: Callable[..., Any], *args: Any,
               mul: float = 1.0, div: float = 1.0) -> float | None:
        """`call` converted to base units (mW -> W: div=1000; MHz -> Hz: mul=1e6); None stays None."""
        v = self.call(field, fn, *args)
        return None if v is None else float(v) * mul / div


# ---------------------------------------------------------------------- fast
def read_fast(r: FieldReader, gpu: GpuInfo, h: Any, *, has_migs: bool) -> GpuSample:
    """``has_migs``: MIG is on for this GPU, so its processes are reported per MIG device."""
    nv = r.nv
    now = time.time()
    vals: dict[str, Any] = {}
    mem = r.call("memory_used_bytes", nv.nvmlDeviceGetMemoryInfo, h)
    if mem is not None:
        vals["memory_used_bytes"], vals["memory_total_bytes"] = int(mem.used), int(mem.total)
    if gpu.is_mig:
        # NVML gives no utilization, temperature, power or clocks for a MIG device: those live on
        # the parent GPU.  Leave them None (no series) rather than export zeros.
        vals["processes"] = _processes(r, gpu, h)
        return GpuSample(gpu=gpu.key, timestamp=now, errors=tuple(r.errors), **vals)
    util = r.call("utilization_gpu_ratio", nv.nvmlDeviceGetUtilizationRates, h)
    if util is not None:
        vals["utilization_gpu_ratio"] = util.gpu / 100.0
        vals["utilization_memory_ratio"] = util.memory / 100.0
    vals["temperature_celsius"] = r.call("temperature_celsius", _temperature, nv, h)
    vals["thermal_margin_celsius"] = r.scaled("thermal_margin_celsius", nv.nvmlDeviceGetMarginTemperature, h)
    vals["power_watts"] = r.scaled("power_watts", nv.nvmlDeviceGetPowerUsage, h, div=1000.0)
    vals["power_limit_watts"] = r.scaled("power_limit_watts", nv.nvmlDeviceGetEnforcedPowerLimit, h, div=1000.0)
    vals["sm_clock_hertz"] = r.scaled("sm_clock_hertz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM, mul=1e6)
    vals["memory_clock_hertz"] = r.scaled(
        "memory_clock_hertz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM, mul=1e6)
    vals["clock_event_reasons"] = r.call("clock_event_reasons", _clock_reasons, nv, h)
    vals.update(_field_values(r, h))
    if has_migs:
        vals["processes"] = None  # with MIG on, processes are reported per MIG device
    else:
        vals["processes"] = _processes(r, gpu, h)
    return GpuSample(gpu=gpu.key, timestamp=now, errors=tuple(r.errors), **vals)


def _temperature(nv: Any, h: Any) -> float:
    fn = getattr(nv, "nvmlDeviceGetTemperatureV", None)
    if fn is not None:
        try:
            return float(fn(h, nv.NVML_TEMPERATURE_GPU))
        except nv.NVMLError as e:
            if kind(e) != "not_supported":
                raise
    return float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))


def _clock_reasons(nv: Any, h: Any) -> int:
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if fn is not None:
        try:
            return int(fn(h))
        except nv.NVMLError as e:
            if kind(e) != "not_supported":
                raise
    return int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))


def _field_values(r: FieldReader, h: Any) -> dict[str, Any]:
    nv = r.nv
    wanted = [(name, fid) for name, fid in _FIELD_IDS.items() if not r.skip(name)]
    out: dict[str, Any] = {}
    if not wanted:
        return out
    if r.skip("field_values"):
        return _field_fallback(r, h)
    try:
        values = nv.nvmlDeviceGetFieldValues(h, [fid for _, fid in wanted])
    except nv.NVMLError as e:
        r.fail("field_values", e)
        return _field_fallback(r, h) if kind(e) == "not_supported" else out
    for (name, _), v in zip(wanted, values):
        if v.nvmlReturn != 0:
            r.fail(name, nv.NVMLError(v.nvmlReturn))
            continue
        x = _field_value(nv, v)
        out[name] = bool(x) if name in _BOOL_FIELDS else (float(x) if name.endswith("celsius") else int(x))
    return out


def _field_fallback(r: FieldReader, h: Any) -> dict[str, Any]:
    """Drivers without field values: the classic calls (no HBM temperature then)."""
    nv = r.nv
    out: dict[str, Any] = {}
    for name, etype, ctype in (
        ("ecc_corrected_volatile", 0, 0), ("ecc_uncorrected_volatile", 1, 0),
        ("ecc_corrected_aggregate", 0, 1), ("ecc_uncorrected_aggregate", 1, 1),
    ):
        v = r.call(name, nv.nvmlDeviceGetTotalEccErrors, h, etype, ctype)
        if v is not None:
            out[name] = int(v)
    rows = r.call("remapped_rows_correctable", nv.nvmlDeviceGetRemappedRows, h)
    if rows is not None:
        out["remapped_rows_correctable"], out["remapped_rows_uncorrectable"] = int(rows[0]), int(rows[1])
        out["remapped_rows_pending"], out["remapped_rows_failure"] = bool(rows[2]), bool(rows[3])
    return out


def _processes(r: FieldReader, gpu: GpuInfo, h: Any) -> tuple[ProcessMemory, ...] | None:
    nv = r.nv
    # Isaac Sim renders through Vulkan: its processes show up as graphics (or C+G) processes.
    compute = r.call("processes", nv.nvmlDeviceGetComputeRunningProcesses, h)
    graphics = r.call("graphics_processes", nv.nvmlDeviceGetGraphicsRunningProcesses, h)
    if compute is None and graphics is None:
        return None
    used: dict[int, int | None] = {}
    for p in list(compute or []) + list(graphics or []):
        mem = p.usedGpuMemory
        prev = used.get(p.pid)
        used[p.pid] = mem if prev is None else (prev if mem is None else max(prev, mem))
    return tuple(ProcessMemory(gpu.key, pid, None if m is None else int(m)) for pid, m in sorted(used.items()))


# ---------------------------------------------------------------------- slow
def read_slow(r: FieldReader, gpu: GpuInfo, h: Any) -> GpuSlowSample:
    nv = r.nv
    now = time.time()
    if gpu.is_mig:
        return GpuSlowSample(gpu=gpu.key, timestamp=now)
    vals: dict[str, Any] = {}
    vals["energy_joules"] = r.scaled("energy_joules", nv.nvmlDeviceGetTotalEnergyConsumption, h, div=1000.0)
    # NVML reports KB/s (KiB) averaged over a 20 ms window; the call blocks for that window.
    vals["pcie_tx_bytes_per_second"] = r.scaled(
        "pcie_tx_bytes_per_second", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES, mul=1024.0)
    vals["pcie_rx_bytes_per_second"] = r.scaled(
        "pcie_rx_bytes_per_second", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES, mul=1024.0)
    vals["pcie_link_generation"] = r.call("pcie_link_generation", nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
    vals["pcie_link_width"] = r.call("pcie_link_width", nv.nvmlDeviceGetCurrPcieLinkWidth, h)
    vals["sm_clock_max_hertz"] = r.scaled(
        "sm_clock_max_hertz", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM, mul=1e6)
    vals["memory_clock_max_hertz"] = r.scaled(
        "memory_clock_max_hertz", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM, mul=1e6)
    vals["power_limit_default_watts"] = r.scaled(
        "power_limit_default_watts", nv.nvmlDeviceGetPowerManagementDefaultLimit, h, div=1000.0)
    mm = r.call("power_limit_min_watts", nv.nvmlDeviceGetPowerManagementLimitConstraints, h)
    if mm is not None:
        vals["power_limit_min_watts"], vals["power_limit_max_watts"] = mm[0] / 1000.0, mm[1] / 1000.0
    thresholds: dict[str, float] = {}
    for name, tid in _THRESHOLDS.items():
        t = r.call(f"temperature_threshold_{name}", nv.nvmlDeviceGetTemperatureThreshold, h, tid)
        if t is not None and t > 0:
            thresholds[name] = float(t)
    return GpuSlowSample(gpu=gpu.key, timestamp=now, temperature_thresholds_celsius=thresholds,
                         errors=tuple(r.errors), **vals)
