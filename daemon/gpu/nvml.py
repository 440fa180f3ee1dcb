"""NVML implementation of :class:`~isaacd.gpu.source.GpuSource` (nvidia-ml-py, ``import pynvml``).

Costs measured on an H200 (driver 580): the fast fields are 1-5 µs a call and the batched field
values ~20 µs; total energy ~3 ms and PCIe throughput ~20 ms (it blocks while it measures), which is
why those live in :meth:`NvmlSource.sample_slow`.  Fields the device reports as unsupported are
remembered per device and not asked again.
"""

from __future__ import annotations

import threading
import time
from types import ModuleType
from typing import Any, Callable

from .types import (
    DriverInfo,
    FieldError,
    GpuError,
    GpuInfo,
    GpuLostError,
    GpuNotSupportedError,
    GpuPermissionError,
    GpuSample,
    GpuSlowSample,
    GpuUnavailableError,
    ProcessMemory,
    XidEvent,
)

_NOT_SUPPORTED = {3, 13}  # NOT_SUPPORTED, FUNCTION_NOT_FOUND
_LOST = {15, 16}  # GPU_IS_LOST, RESET_REQUIRED
_NO_PERMISSION = 4
_TIMEOUT = 10
_NO_INSTANCE = 0xFFFFFFFF

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


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def _kind(err: Exception) -> str:
    v = getattr(err, "value", None)
    if v in _NOT_SUPPORTED:
        return "not_supported"
    if v in _LOST:
        return "gpu_lost"
    if v == _NO_PERMISSION:
        return "no_permission"
    if v == _TIMEOUT:
        return "timeout"
    return "error"


def _field_value(nv: ModuleType, v: Any) -> float | int:
    t = v.valueType
    if t == nv.NVML_VALUE_TYPE_DOUBLE:
        return v.value.dVal
    if t == nv.NVML_VALUE_TYPE_UNSIGNED_INT:
        return v.value.uiVal
    if t == nv.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return v.value.ulVal
    if t == nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return v.value.ullVal
    if t == nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return v.value.sllVal
    if t == nv.NVML_VALUE_TYPE_SIGNED_INT:
        return v.value.siVal
    if t == getattr(nv, "NVML_VALUE_TYPE_UNSIGNED_SHORT", 6):
        return v.value.usVal
    raise ValueError(f"unknown NVML value type {t}")


class _Reader:
    """Reads fields of one device, collecting per-field errors; raises GpuLostError at once."""

    def __init__(self, src: "NvmlSource", key: str):
        self.src, self.key, self.errors = src, key, []  # type: ignore[var-annotated]

    def skip(self, field: str) -> bool:
        return (self.key, field) in self.src._unsupported

    def fail(self, field: str, err: Exception) -> None:
        kind = _kind(err)
        if kind == "gpu_lost":
            raise GpuLostError(f"GPU {self.key}: {err} (while reading {field})") from err
        if kind == "not_supported":
            self.src._unsupported.add((self.key, field))
        self.errors.append(FieldError(field, kind, str(err)))

    def call(self, field: str, fn: Callable[..., Any], *args: Any) -> Any:
        if self.skip(field):
            return None
        try:
            return fn(*args)
        except self.src._nv.NVMLError as e:
            self.fail(field, e)
            return None

    def scaled(self, field: str, fn: Callable[..., Any], *args: Any,
               mul: float = 1.0, div: float = 1.0) -> float | None:
        """`call` converted to base units (mW -> W: div=1000; MHz -> Hz: mul=1e6); None stays None."""
        v = self.call(field, fn, *args)
        return None if v is None else float(v) * mul / div


class NvmlSource:
    name = "nvml"

    def __init__(self, nvml: ModuleType | None = None, *, register_xid: bool = True):
        """``nvml``: the pynvml module (injectable for tests); imported lazily otherwise."""
        self._nv: Any = nvml
        self._register_xid = register_xid
        self._lock = threading.Lock()
        self._open = False
        self._devices: list[GpuInfo] = []
        self._handles: dict[str, Any] = {}
        self._unsupported: set[tuple[str, str]] = set()
        self._evset: Any = None
        self._xid_reason: str | None = "not opened"
        self._driver = DriverInfo()
        self._migs_of: dict[str, list[GpuInfo]] = {}

    # ------------------------------------------------------------------ lifecycle
    def open(self) -> list[GpuInfo]:
        with self._lock:
            if self._open:
                return list(self._devices)
            if self._nv is None:
                try:
                    import pynvml  # nvidia-ml-py
                except ImportError as e:  # pragma: no cover - it is a dependency
                    raise GpuUnavailableError(f"nvidia-ml-py is not installed: {e}") from e
                self._nv = pynvml
            nv = self._nv
            try:
                nv.nvmlInit()
            except nv.NVMLError as e:
                raise GpuUnavailableError(f"NVML init failed: {e}") from e
            try:
                self._enumerate()
            except GpuUnavailableError:
                self._shutdown()
                raise
            except nv.NVMLError as e:
                self._shutdown()
                raise GpuUnavailableError(f"NVML device enumeration failed: {e}") from e
            self._open = True
            if self._register_xid:
                self._setup_xid()
            return list(self._devices)

    def _enumerate(self) -> None:
        nv = self._nv
        count = nv.nvmlDeviceGetCount()
        if count == 0:
            raise GpuUnavailableError("NVML reports no GPU")
        devices: list[GpuInfo] = []
        migs: list[GpuInfo] = []
        handles: dict[str, Any] = {}
        for i in range(count):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            pci = _text(nv.nvmlDeviceGetPciInfo(h).busId)
            info = GpuInfo(index=i, uuid=_text(nv.nvmlDeviceGetUUID(h)), model=_text(nv.nvmlDeviceGetName(h)),
                           pci_bus_id=pci)
            devices.append(info)
            handles[info.key] = h
            try:
                mig_on = nv.nvmlDeviceGetMigMode(h)[0] == 1
            except nv.NVMLError:
                mig_on = False
            if not mig_on:
                continue
            for j in range(nv.nvmlDeviceGetMaxMigDeviceCount(h)):
                try:
                    mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
                except nv.NVMLError:
                    continue
                m = GpuInfo(index=j, uuid=_text(nv.nvmlDeviceGetUUID(mh)), model=_text(nv.nvmlDeviceGetName(mh)),
                            pci_bus_id=pci, is_mig=True, parent_index=i)
                migs.append(m)
                handles[m.key] = mh
        self._devices = devices + migs
        self._handles = handles
        self._migs_of = {d.key: [m for m in migs if m.parent_index == d.index] for d in devices}

        def opt(fn: Callable[[], Any]) -> Any:
            try:
                return fn()
            except (nv.NVMLError, AttributeError):
                return None

        cuda = opt(nv.nvmlSystemGetCudaDriverVersion_v2) or opt(nv.nvmlSystemGetCudaDriverVersion)
        self._driver = DriverInfo(
            driver_version=_text(v) if (v := opt(nv.nvmlSystemGetDriverVersion)) is not None else None,
            nvml_version=_text(v) if (v := opt(nv.nvmlSystemGetNVMLVersion)) is not None else None,
            cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
        )

    def _setup_xid(self) -> None:
        nv = self._nv
        try:
            evset = nv.nvmlEventSetCreate()
        except nv.NVMLError as e:
            self._xid_reason = f"nvmlEventSetCreate failed: {e}"
            return
        registered, failures = 0, []
        for d in self._devices:
            if d.is_mig:
                continue
            try:
                nv.nvmlDeviceRegisterEvents(self._handles[d.key], nv.nvmlEventTypeXidCriticalError, evset)
                registered += 1
            except nv.NVMLError as e:
                failures.append(f"GPU {d.key}: {e}")
        if registered == 0:
            self._xid_reason = "XID events not available: " + "; ".join(failures)
            try:
                nv.nvmlEventSetFree(evset)
            except nv.NVMLError:
                pass
            return
        self._evset, self._xid_reason = evset, None

    def _shutdown(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - best effort
            pass

    def close(self) -> None:
        with self._lock:
            if not self._open:
                return
            if self._evset is not None:
                try:
                    self._nv.nvmlEventSetFree(self._evset)
                except self._nv.NVMLError:
                    pass
                self._evset = None
            self._shutdown()
            self._open = False
            self._xid_reason = "closed"

    def devices(self) -> list[GpuInfo]:
        return list(self._devices)

    def driver_info(self) -> DriverInfo:
        return self._driver

    def _handle(self, gpu: GpuInfo) -> Any:
        if not self._open:
            raise GpuError("NVML source is not open")
        try:
            return self._handles[gpu.key]
        except KeyError:
            raise GpuError(f"unknown GPU {gpu.key}") from None

    # ------------------------------------------------------------------ fast
    def sample_fast(self, gpu: GpuInfo) -> GpuSample:
        nv, h = self._nv, self._handle(gpu)
        r = _Reader(self, gpu.key)
        now = time.time()
        vals: dict[str, Any] = {}
        mem = r.call("memory_used_bytes", nv.nvmlDeviceGetMemoryInfo, h)
        if mem is not None:
            vals["memory_used_bytes"], vals["memory_total_bytes"] = int(mem.used), int(mem.total)
        if gpu.is_mig:
            # NVML gives no utilization, temperature, power or clocks for a MIG device: those live on
            # the parent GPU.  Leave them None (no series) rather than export zeros.
            vals["processes"] = self._processes(r, gpu, h)
            return GpuSample(gpu=gpu.key, timestamp=now, errors=tuple(r.errors), **vals)
        util = r.call("utilization_gpu_ratio", nv.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            vals["utilization_gpu_ratio"] = util.gpu / 100.0
            vals["utilization_memory_ratio"] = util.memory / 100.0
        vals["temperature_celsius"] = r.call("temperature_celsius", self._temperature, h)
        vals["thermal_margin_celsius"] = r.scaled("thermal_margin_celsius", nv.nvmlDeviceGetMarginTemperature, h)
        vals["power_watts"] = r.scaled("power_watts", nv.nvmlDeviceGetPowerUsage, h, div=1000.0)
        vals["power_limit_watts"] = r.scaled("power_limit_watts", nv.nvmlDeviceGetEnforcedPowerLimit, h, div=1000.0)
        vals["sm_clock_hertz"] = r.scaled("sm_clock_hertz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM, mul=1e6)
        vals["memory_clock_hertz"] = r.scaled(
            "memory_clock_hertz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM, mul=1e6)
        vals["clock_event_reasons"] = r.call("clock_event_reasons", self._clock_reasons, h)
        vals.update(self._field_values(r, h))
        if self._migs_of.get(gpu.key):
            vals["processes"] = None  # with MIG on, processes are reported per MIG device
        else:
            vals["processes"] = self._processes(r, gpu, h)
        return GpuSample(gpu=gpu.key, timestamp=now, errors=tuple(r.errors), **vals)

    def _temperature(self, h: Any) -> float:
        nv = self._nv
        fn = getattr(nv, "nvmlDeviceGetTemperatureV", None)
        if fn is not None:
            try:
                return float(fn(h, nv.NVML_TEMPERATURE_GPU))
            except nv.NVMLError as e:
                if _kind(e) != "not_supported":
                    raise
        return float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))

    def _clock_reasons(self, h: Any) -> int:
        nv = self._nv
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if fn is not None:
            try:
                return int(fn(h))
            except nv.NVMLError as e:
                if _kind(e) != "not_supported":
                    raise
        return int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))

    def _field_values(self, r: _Reader, h: Any) -> dict[str, Any]:
        nv = self._nv
        wanted = [(name, fid) for name, fid in _FIELD_IDS.items() if not r.skip(name)]
        out: dict[str, Any] = {}
        if not wanted:
            return out
        if r.skip("field_values"):
            return self._field_fallback(r, h)
        try:
            values = nv.nvmlDeviceGetFieldValues(h, [fid for _, fid in wanted])
        except nv.NVMLError as e:
            r.fail("field_values", e)
            return self._field_fallback(r, h) if _kind(e) == "not_supported" else out
        for (name, _), v in zip(wanted, values):
            if v.nvmlReturn != 0:
                r.fail(name, nv.NVMLError(v.nvmlReturn))
                continue
            x = _field_value(nv, v)
            out[name] = bool(x) if name in _BOOL_FIELDS else (float(x) if name.endswith("celsius") else int(x))
        return out

    def _field_fallback(self, r: _Reader, h: Any) -> dict[str, Any]:
        """Drivers without field values: the classic calls (no HBM temperature then)."""
        nv = self._nv
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

    def _processes(self, r: _Reader, gpu: GpuInfo, h: Any) -> tuple[ProcessMemory, ...] | None:
        nv = self._nv
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

    # ------------------------------------------------------------------ slow
    def sample_slow(self, gpu: GpuInfo) -> GpuSlowSample:
        nv, h = self._nv, self._handle(gpu)
        r = _Reader(self, gpu.key)
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

    # ------------------------------------------------------------------ XID
    def wait_xid(self, timeout: float) -> list[XidEvent]:
        nv = self._nv
        if self._evset is None:
            raise GpuNotSupportedError(self._xid_reason or "XID events not available")
        events: list[XidEvent] = []
        wait_ms = max(0, int(timeout * 1000))
        while len(events) < 256:
            try:
                data = nv.nvmlEventSetWait_v2(self._evset, wait_ms)
            except nv.NVMLError as e:
                if _kind(e) == "timeout":
                    break
                if events:
                    break
                if _kind(e) == "gpu_lost":
                    raise GpuLostError(f"XID wait: {e}") from e
                raise GpuError(f"XID wait failed: {e}") from e
            wait_ms = 0  # drain whatever else is queued, then return
            if not data.eventType & nv.nvmlEventTypeXidCriticalError:
                continue
            events.append(XidEvent(
                gpu=self._event_gpu(data.device), xid=int(data.eventData), timestamp=time.time(),
                gpu_instance_id=None if data.gpuInstanceId == _NO_INSTANCE else int(data.gpuInstanceId),
                compute_instance_id=None if data.computeInstanceId == _NO_INSTANCE else int(data.computeInstanceId),
            ))
        return events

    def _event_gpu(self, handle: Any) -> str:
        nv = self._nv
        try:
            return str(nv.nvmlDeviceGetIndex(handle))
        except nv.NVMLError:
            try:
                uuid = _text(nv.nvmlDeviceGetUUID(handle))
                return next(d.key for d in self._devices if d.uuid == uuid)
            except (nv.NVMLError, StopIteration):
                return "unknown"

    # ------------------------------------------------------------------ power
    def get_power_limit(self, gpu: GpuInfo) -> float:
        nv, h = self._nv, self._handle(gpu)
        try:
            return nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
        except nv.NVMLError as e:
            raise self._power_error(e, gpu, "read") from e

    def set_power_limit(self, gpu: GpuInfo, watts: float) -> None:
        nv, h = self._nv, self._handle(gpu)
        if gpu.is_mig:
            raise GpuNotSupportedError(f"GPU {gpu.key} is a MIG device: set the power limit on GPU {gpu.parent_index}")
        try:
            lo, hi = nv.nvmlDeviceGetPowerManagementLimitConstraints(h)
        except nv.NVMLError:
            lo = hi = None
        if lo is not None and not lo / 1000.0 <= watts <= hi / 1000.0:
            raise ValueError(f"GPU {gpu.key}: power limit {watts:g} W outside the device's range "
                             f"{lo / 1000.0:g}..{hi / 1000.0:g} W")
        try:
            nv.nvmlDeviceSetPowerManagementLimit(h, int(round(watts * 1000)))
        except nv.NVMLError as e:
            raise self._power_error(e, gpu, "set") from e

    @staticmethod
    def _power_error(e: Exception, gpu: GpuInfo, verb: str) -> GpuError:
        kind = _kind(e)
        if kind == "no_permission":
            return GpuPermissionError(f"GPU {gpu.key}: cannot {verb} the power limit: {e} "
                                      "(setting power limits needs root)")
        if kind == "not_supported":
            return GpuNotSupportedError(f"GPU {gpu.key}: power limit {verb} not supported: {e}")
        if kind == "gpu_lost":
            return GpuLostError(f"GPU {gpu.key}: {e}")
        return GpuError(f"GPU {gpu.key}: cannot {verb} the power limit: {e}")
