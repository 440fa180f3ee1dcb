"""NvmlSource against a fake pynvml module: error mapping, unsupported-field memory, XID waits,
power-limit permissions. The real NVML is exercised on an H200 (bench/metrics.py --nvml)."""

from __future__ import annotations

import types

import pynvml
import pytest

from isaacd.gpu import GpuLostError, GpuNotSupportedError, GpuPermissionError, GpuSampler, GpuUnavailableError
from isaacd.gpu.nvml import NvmlSource


class FakeNvml(types.SimpleNamespace):
    """Just enough of pynvml's surface, with pynvml's real constants and error classes."""

    def __init__(self, gpus=2, mig=False):
        for k in dir(pynvml):
            if k.startswith(("NVML_", "nvmlEventType", "nvmlClocksEventReason")):
                setattr(self, k, getattr(pynvml, k))
        self.NVMLError = pynvml.NVMLError
        self.n = gpus
        self.mig = mig
        self.calls: dict[str, int] = {}
        self.lost: set[int] = set()
        self.unsupported: set[str] = {"nvmlDeviceGetMarginTemperature"}
        self.field_unsupported = {82}
        self.events: list[tuple[int, int]] = []
        self.init_error: int | None = None
        self.root = False
        self.limit = {i: 700_000 for i in range(gpus)}

    def _c(self, name, h=None):
        self.calls[name] = self.calls.get(name, 0) + 1
        if h is not None and h in self.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if name in self.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlInit(self):
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self):
        self._c("nvmlShutdown")

    def nvmlDeviceGetCount(self):
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0".encode())

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-fake-{h}"

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H200" if isinstance(h, int) else "NVIDIA H200 MIG 1g.18gb"

    def nvmlDeviceGetMigMode(self, h):
        return [1 if self.mig and h == 0 else 0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        # a real H100 with MIG disabled answers 0 (bench/results/issue42-mig-device.txt); in MIG mode, its slots
        return 2 if self.nvmlDeviceGetMigMode(h)[0] else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, j):
        if j == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return f"mig-{h}-{j}"

    def nvmlSystemGetDriverVersion(self):
        return b"580.159.04"

    def nvmlSystemGetNVMLVersion(self):
        return "13.580.159.04"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 13000

    def nvmlEventSetCreate(self):
        return "evset"

    def nvmlDeviceRegisterEvents(self, h, types_, evset):
        self._c("nvmlDeviceRegisterEvents", h)

    def nvmlEventSetFree(self, evset):
        self._c("nvmlEventSetFree")

    def nvmlEventSetWait_v2(self, evset, ms):
        self._c("nvmlEventSetWait_v2")
        if not self.events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        h, xid = self.events.pop(0)
        return types.SimpleNamespace(device=h, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=xid,
                                     gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)

    def nvmlDeviceGetIndex(self, h):
        return h

    def nvmlDeviceGetMemoryInfo(self, h):
        self._c("nvmlDeviceGetMemoryInfo", h)
        return types.SimpleNamespace(used=2 * 2**30, total=141 * 2**30)

    def nvmlDeviceGetUtilizationRates(self, h):
        self._c("nvmlDeviceGetUtilizationRates", h)
        return types.SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetTemperatureV(self, h, sensor):
        self._c("nvmlDeviceGetTemperatureV", h)
        return 61

    def nvmlDeviceGetMarginTemperature(self, h):
        self._c("nvmlDeviceGetMarginTemperature", h)
        return 26

    def nvmlDeviceGetPowerUsage(self, h):
        self._c("nvmlDeviceGetPowerUsage", h)
        return 612_345

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        self._c("nvmlDeviceGetEnforcedPowerLimit", h)
        return self.limit[h]

    def nvmlDeviceGetClockInfo(self, h, which):
        self._c("nvmlDeviceGetClockInfo", h)
        return 1980 if which == pynvml.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        self._c("nvmlDeviceGetCurrentClocksEventReasons", h)
        return 0x40 | 0x20

    def nvmlDeviceGetFieldValues(self, h, ids):
        self._c("nvmlDeviceGetFieldValues", h)
        out = []
        for fid in ids:
            v = types.SimpleNamespace(valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                                      nvmlReturn=0, value=types.SimpleNamespace(ullVal=fid))
            if fid in self.field_unsupported:
                v.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            out.append(v)
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._c("nvmlDeviceGetComputeRunningProcesses", h)
        return [types.SimpleNamespace(pid=100, usedGpuMemory=1000), types.SimpleNamespace(pid=101, usedGpuMemory=None)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h):
        self._c("nvmlDeviceGetGraphicsRunningProcesses", h)
        return [types.SimpleNamespace(pid=100, usedGpuMemory=3000)]

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self._c("nvmlDeviceGetTotalEnergyConsumption", h)
        return 5_000_000

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        self._c("nvmlDeviceGetPcieThroughput", h)
        return 1000

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetMaxClockInfo(self, h, which):
        return 1980

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return 700_000

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        return [200_000, 700_000]

    def nvmlDeviceGetTemperatureThreshold(self, h, which):
        return {0: 95, 1: 89, 2: 95, 3: 87}[which]

    def nvmlDeviceSetPowerManagementLimit(self, h, mw):
        if not self.root:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        self.limit[h] = mw


def opened(fake):
    src = NvmlSource(fake)
    gpus = src.open()
    return src, gpus


def test_open_enumerates_and_reads_driver_info():
    src, gpus = opened(FakeNvml(2))
    assert [g.key for g in gpus] == ["0", "1"]
    assert gpus[0].pci_bus_id == "00000000:18:00.0" and gpus[0].uuid == "GPU-fake-0"
    d = src.driver_info()
    assert d.driver_version == "580.159.04" and d.cuda_driver_version == "13.0"


def test_fast_sample_units_and_fields():
    fake = FakeNvml(1)
    src, (g,) = opened(fake)
    s = src.sample_fast(g)
    assert s.utilization_gpu_ratio == pytest.approx(0.97) and s.utilization_memory_ratio == pytest.approx(0.40)
    assert s.temperature_celsius == 61 and s.power_watts == pytest.approx(612.345)
    assert s.power_limit_watts == 700 and s.sm_clock_hertz == 1980e6 and s.memory_clock_hertz == 3201e6
    assert s.clock_event_reason_names == {"hw_thermal_slowdown", "sw_thermal_slowdown"}
    assert s.memory_used_bytes == 2 * 2**30
    assert s.ecc_uncorrected_volatile == 4 and s.remapped_rows_pending is True  # fake returns the field id
    assert s.memory_temperature_celsius is None and s.thermal_margin_celsius is None
    assert {e.field for e in s.errors} == {"memory_temperature_celsius", "thermal_margin_celsius"}
    assert {(p.pid, p.used_bytes) for p in s.processes} == {(100, 3000), (101, None)}
    # unsupported fields are not asked again
    s2 = src.sample_fast(g)
    assert s2.errors == ()
    assert fake.calls["nvmlDeviceGetMarginTemperature"] == 1


def test_slow_sample_units():
    src, (g,) = opened(FakeNvml(1))
    s = src.sample_slow(g)
    assert s.energy_joules == 5000 and s.pcie_tx_bytes_per_second == 1000 * 1024
    assert s.temperature_thresholds_celsius == {"shutdown": 95, "slowdown": 89, "memory_max": 95, "gpu_max": 87}
    assert s.power_limit_min_watts == 200 and s.power_limit_max_watts == 700


def test_gpu_lost_raises_and_sampler_counts_it():
    fake = FakeNvml(2)
    sampler = GpuSampler(NvmlSource(fake))
    sampler.poll_fast()
    fake.lost.add(1)
    sampler.poll_fast()
    snap = sampler.snapshot()
    assert set(snap.samples) == {"0"} and snap.errors[("1", "device", "gpu_lost")] == 1
    src = sampler.source
    with pytest.raises(GpuLostError):
        src.sample_fast(snap.gpus[1])


def test_init_failure_is_unavailable():
    fake = FakeNvml(1)
    fake.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    with pytest.raises(GpuUnavailableError, match="Driver Not Loaded"):
        NvmlSource(fake).open()
    fake = FakeNvml(0)
    with pytest.raises(GpuUnavailableError, match="no GPU"):
        NvmlSource(fake).open()


def test_xid_wait_timeout_and_events():
    fake = FakeNvml(2)
    src, _ = opened(fake)
    assert src.wait_xid(0.01) == []
    fake.events = [(1, 79), (0, 13)]
    evs = src.wait_xid(0.01)
    assert [(e.gpu, e.xid, e.gpu_instance_id) for e in evs] == [("1", 79, None), ("0", 13, None)]


def test_xid_unsupported_everywhere():
    fake = FakeNvml(1)
    fake.unsupported.add("nvmlDeviceRegisterEvents")
    src, _ = opened(fake)
    with pytest.raises(GpuNotSupportedError, match="XID events not available"):
        src.wait_xid(0.01)


def test_power_limit_needs_root():
    fake = FakeNvml(1)
    src, (g,) = opened(fake)
    with pytest.raises(PermissionError, match="needs root") as ei:
        src.set_power_limit(g, 500)
    assert isinstance(ei.value, GpuPermissionError)
    with pytest.raises(ValueError, match="outside"):
        src.set_power_limit(g, 900)
    fake.root = True
    src.set_power_limit(g, 500)
    assert src.get_power_limit(g) == 500


def test_mig_devices_enumerated_without_utilization():
    fake = FakeNvml(1, mig=True)
    src, gpus = opened(fake)
    assert [g.key for g in gpus] == ["0", "0:0"]
    mig = gpus[1]
    assert mig.is_mig and mig.parent_index == 0 and "MIG" in mig.model
    s = src.sample_fast(mig)
    assert s.utilization_gpu_ratio is None and s.temperature_celsius is None and s.memory_total_bytes
    assert s.processes
    assert src.sample_fast(gpus[0]).processes is None
    with pytest.raises(GpuNotSupportedError):
        src.set_power_limit(mig, 300)


def test_close_frees_event_set_and_shuts_down():
    fake = FakeNvml(1)
    src, _ = opened(fake)
    src.close()
    assert fake.calls["nvmlEventSetFree"] == 1 and fake.calls["nvmlShutdown"] == 1


def test_every_field_value_type_reads_its_union_member():
    """nvmlDeviceGetFieldValues fills pynvml's own c_nvmlFieldValue_t; each value type names one union member."""
    from isaacd.gpu.nvml_fields import _field_value

    # values that read differently through any other member of the union (all bits set underneath)
    for type_name, member, x in (("DOUBLE", "dVal", 41.5), ("UNSIGNED_INT", "uiVal", 2**32 - 5),
                                 ("UNSIGNED_LONG", "ulVal", 2**40 + 8), ("UNSIGNED_LONG_LONG", "ullVal", 2**63 + 1),
                                 ("SIGNED_LONG_LONG", "sllVal", -3), ("SIGNED_INT", "siVal", -4),
                                 ("UNSIGNED_SHORT", "usVal", 9)):
        fv = pynvml.c_nvmlFieldValue_t()
        fv.valueType = getattr(pynvml, f"NVML_VALUE_TYPE_{type_name}")
        fv.value.ullVal = 2**64 - 1
        setattr(fv.value, member, x)
        assert _field_value(pynvml, fv) == x, type_name
    fv.valueType = pynvml.NVML_VALUE_TYPE_COUNT
    with pytest.raises(ValueError, match="unknown NVML value type"):
        _field_value(pynvml, fv)
