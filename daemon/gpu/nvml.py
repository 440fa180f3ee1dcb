"""NVML implementation of :class:`~isaacd.gpu.source.GpuSource` (nvidia-ml-py, ``import pynvml``).

:class:`NvmlSource` opens NVML, lists the GPUs and their MIG devices, and sets power limits; reading a
device's fields is ``nvml_fields.py``, the XID event set ``nvml_xid.py``, NVML's error codes
``nvml_codes.py``.  Fields the device reports as unsupported are remembered per device and not asked
again.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any, Callable

from .nvml_codes import power_error, text
from .nvml_fields import FieldReader, read_fast, read_slow
from .nvml_xid import NvmlXidEvents
from .types import (
    DriverInfo,
    GpuError,
    GpuInfo,
    GpuNotSupportedError,
    GpuSample,
    GpuSlowSample,
    GpuUnavailableError,
    XidEvent,
)


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
        self._unsupported: set[tuple[str, str]] = set()  # (gpu key, field) the device does not support
        self._xid = NvmlXidEvents()
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
                self._xid.register(nv, self._devices, self._handles)
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
            pci = text(nv.nvmlDeviceGetPciInfo(h).busId)
            try:
                mig_on = nv.nvmlDeviceGetMigMode(h)[0] == 1
            except nv.NVMLError:
                mig_on = False
            info = GpuInfo(index=i, uuid=text(nv.nvmlDeviceGetUUID(h)), model=text(nv.nvmlDeviceGetName(h)),
                           pci_bus_id=pci, mig_mode=mig_on)
            devices.append(info)
            handles[info.key] = h
            if not mig_on:
                continue
            for j in range(nv.nvmlDeviceGetMaxMigDeviceCount(h)):
                try:
                    mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
                except nv.NVMLError:
                    continue
                m = GpuInfo(index=j, uuid=text(nv.nvmlDeviceGetUUID(mh)), model=text(nv.nvmlDeviceGetName(mh)),
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
            driver_version=text(v) if (v := opt(nv.nvmlSystemGetDriverVersion)) is not None else None,
            nvml_version=text(v) if (v := opt(nv.nvmlSystemGetNVMLVersion)) is not None else None,
            cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
        )

    def _shutdown(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except Exception:  # noqa: BLE001 - best effort
            pass

    def close(self) -> None:
        with self._lock:
            if not self._open:
                return
            self._xid.free()
            self._shutdown()
            self._open = False

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

    # ------------------------------------------------------------------ samples and XIDs
    def sample_fast(self, gpu: GpuInfo) -> GpuSample:
        nv, h = self._nv, self._handle(gpu)
        has_migs = bool(self._migs_of.get(gpu.key))
        return read_fast(FieldReader(nv, gpu.key, self._unsupported), gpu, h, has_migs=has_migs)

    def sample_slow(self, gpu: GpuInfo) -> GpuSlowSample:
        nv, h = self._nv, self._handle(gpu)
        return read_slow(FieldReader(nv, gpu.key, self._unsupported), gpu, h)

    def wait_xid(self, timeout: float) -> list[XidEvent]:
        return self._xid.wait(timeout)

    # ------------------------------------------------------------------ power
    def get_power_limit(self, gpu: GpuInfo) -> float:
        nv, h = self._nv, self._handle(gpu)
        try:
            return nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
        except nv.NVMLError as e:
            raise power_error(e, gpu.key, "read") from e

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
            raise power_error(e, gpu.key, "set") from e
