"""GPU telemetry: one source interface (NVML or a scripted timeline) and a background sampler.

    from isaacd.gpu import GpuSampler, make_source
    sampler = GpuSampler(make_source("nvml"), sample_interval=1.0, slow_interval=10.0).start()
    snap = sampler.snapshot()          # immutable; never blocks on NVML
    snap.samples[0].temperature_celsius

Beside the telemetry, the GPU helpers of a CUDA out-of-memory: `oom_message.py` finds it in a trainer's output,
`oom_memory.py` says who held the memory and how it grew.
"""

from .nvml import NvmlSource  # pynvml itself is imported when NVML is first opened, not here
from .sampler import GpuSampler, build_sampler
from .scripted import ManualClock, ScriptedSource, ScriptError, load_script
from .snapshot import DEFAULT_BUCKETS, GpuSnapshot, empty_snapshot
from .source import GpuSource, NoSource, make_source
from .types import (
    CLOCK_EVENT_REASONS,
    TEMPERATURE_THRESHOLDS,
    XID_APPLICATION,
    XID_REBOOT,
    XID_RESET,
    DriverInfo,
    DurationHistogram,
    FieldError,
    GpuError,
    GpuInfo,
    GpuLostError,
    GpuMap,
    GpuNotSupportedError,
    GpuPermissionError,
    GpuSample,
    GpuSlowSample,
    GpuUnavailableError,
    ProcessMemory,
    XidCount,
    XidEvent,
    clock_event_mask,
    clock_event_names,
    xid_class,
)


__all__ = [
    "CLOCK_EVENT_REASONS", "DEFAULT_BUCKETS", "TEMPERATURE_THRESHOLDS", "XID_APPLICATION", "XID_REBOOT",
    "XID_RESET", "DriverInfo", "DurationHistogram", "FieldError", "GpuError", "GpuInfo", "GpuLostError", "GpuMap",
    "GpuNotSupportedError", "GpuPermissionError", "GpuSample", "GpuSampler", "GpuSlowSample", "GpuSnapshot",
    "GpuSource", "GpuUnavailableError", "ManualClock", "NoSource", "NvmlSource", "ProcessMemory", "ScriptError",
    "ScriptedSource", "XidCount", "XidEvent", "build_sampler", "clock_event_mask", "clock_event_names",
    "empty_snapshot", "load_script", "make_source", "xid_class",
]
