"""NVML's XID events: the event set registered on every full GPU when the source opens, the wait the
sampler's XID thread sits in, and freeing the set when the source closes.

A MIG device has no events of its own (its parent GPU's are registered); a driver where no GPU takes
the registration leaves XIDs unwatched, with the reason :meth:`NvmlXidEvents.wait` then raises.
"""

from __future__ import annotations

import time
from typing import Any

from .nvml_codes import NO_INSTANCE, kind, text
from .types import GpuError, GpuInfo, GpuLostError, GpuNotSupportedError, XidEvent


class NvmlXidEvents:
    def __init__(self) -> None:
        self._nv: Any = None
        self._evset: Any = None
        self._devices: list[GpuInfo] = []
        self.reason: str | None = "not opened"  # why XIDs are not watched; None while they are

    def register(self, nv: Any, devices: list[GpuInfo], handles: dict[str, Any]) -> None:
        self._nv, self._devices = nv, devices
        try:
            evset = nv.nvmlEventSetCreate()
        except nv.NVMLError as e:
            self.reason = f"nvmlEventSetCreate failed: {e}"
            return
        registered, failures = 0, []
        for d in devices:
            if d.is_mig:
                continue
            try:
                nv.nvmlDeviceRegisterEvents(handles[d.key], nv.nvmlEventTypeXidCriticalError, evset)
                registered += 1
            except nv.NVMLError as e:
                failures.append(f"GPU {d.key}: {e}")
        if registered == 0:
            self.reason = "XID events not available: " + "; ".join(failures)
            try:
                nv.nvmlEventSetFree(evset)
            except nv.NVMLError:
                pass
            return
        self._evset, self.reason = evset, None

    def free(self) -> None:
        """Before NVML shuts down (the source's close)."""
        if self._evset is not None:
            try:
                self._nv.nvmlEventSetFree(self._evset)
            except self._nv.NVMLError:
                pass
            self._evset = None
        self.reason = "closed"

    def wait(self, timeout: float) -> list[XidEvent]:
        nv = self._nv
        if self._evset is None:
            raise GpuNotSupportedError(self.reason or "XID events not available")
        events: list[XidEvent] = []
        wait_ms = max(0, int(timeout * 1000))
        while len(events) < 256:
            try:
                data = nv.nvmlEventSetWait_v2(self._evset, wait_ms)
            except nv.NVMLError as e:
                if kind(e) == "timeout":
                    break
                if events:
                    break
                if kind(e) == "gpu_lost":
                    raise GpuLostError(f"XID wait: {e}") from e
                raise GpuError(f"XID wait failed: {e}") from e
            wait_ms = 0  # drain whatever else is queued, then return
            if not data.eventType & nv.nvmlEventTypeXidCriticalError:
                continue
            events.append(XidEvent(
                gpu=self._event_gpu(data.device), xid=int(data.eventData), timestamp=time.time(),
                gpu_instance_id=None if data.gpuInstanceId == NO_INSTANCE else int(data.gpuInstanceId),
                compute_instance_id=None if data.computeInstanceId == NO_INSTANCE else int(data.computeInstanceId),
            ))
        return events

    def _event_gpu(self, handle: Any) -> str:
        nv = self._nv
        try:
            return str(nv.nvmlDeviceGetIndex(handle))
        except nv.NVMLError:
            try:
                uuid = text(nv.nvmlDeviceGetUUID(handle))
                return next(d.key for d in self._devices if d.uuid == uuid)
            except (nv.NVMLError, StopIteration):
                return "unknown"
