"""The ``"gpus"`` part of ``isaacd status --json``, built from a GPU snapshot (JSON-serialisable)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..gpu.assign import assigned_keys
from ..gpu.sampler import GpuSnapshot
from ..gpu.types import xid_class
from ..status.types import JobStatus
from .attribution import attribute_pids


def gpu_status(snap: GpuSnapshot, jobs: Iterable[JobStatus] = (), *, proc_root: str = "/proc") -> dict[str, Any]:
    """``{"up", "reason", "source", "driver_version", "xid_watch", "devices": [...]}``; each device has
    index (the GPU key), uuid, model, pci_bus_id, mig, the latest fast fields (None = not reported),
    clock_event_reasons (active names), processes, jobs (names of isaacd jobs seen using it), assigned
    (names of jobs whose gpus/device claim it, by isaacd.gpu.assign), xids
    ({code: {count, last_seen, class}}) and health ("ok", "lost", or "unhealthy: <reason>")."""
    jobs = list(jobs)
    owner = attribute_pids({p.pid for p in snap.processes}, jobs, proc_root) if jobs else {}
    claims = {str(j.name): set(assigned_keys(j.gpus, snap)) for j in jobs}
    devices = []
    for key, info in snap.gpus.items():
        s = snap.samples.get(key)
        dev: dict[str, Any] = {
            "index": key, "uuid": info.uuid, "model": info.model, "pci_bus_id": info.pci_bus_id, "mig": info.is_mig,
        }
        fields = ("temperature_celsius", "memory_temperature_celsius", "thermal_margin_celsius", "power_watts",
                  "power_limit_watts", "sm_clock_hertz", "memory_clock_hertz", "memory_used_bytes",
                  "memory_total_bytes")
        for f in fields:
            dev[f] = getattr(s, f) if s is not None else None
        dev["utilization_ratio"] = s.utilization_gpu_ratio if s is not None else None
        dev["memory_utilization_ratio"] = s.utilization_memory_ratio if s is not None else None
        dev["clock_event_reasons"] = sorted(s.clock_event_reason_names) if s is not None else []
        procs = list(s.processes or ()) if s is not None else []
        dev["processes"] = [{"pid": p.pid, "used_bytes": p.used_bytes, "job": owner.get(p.pid)} for p in procs]
        dev["jobs"] = sorted({owner[p.pid] for p in procs if p.pid in owner})
        dev["assigned"] = sorted(name for name, keys in claims.items() if key in keys)
        dev["xids"] = {str(x): {"count": c.count, "last_seen": c.last_seen, "class": xid_class(x)}
                       for (g, x), c in sorted(snap.xids.items()) if g == key}
        if key in snap.unhealthy:
            dev["health"] = f"unhealthy: {snap.unhealthy[key]}"
        elif key in snap.failing:
            dev["health"] = "lost" if snap.failing[key] == "gpu_lost" else f"error: {snap.failing[key]}"
        elif s is None:
            dev["health"] = "no data yet"
        else:
            dev["health"] = "ok"
        devices.append(dev)
    return {
        "up": snap.up,
        "reason": snap.reason,
        "source": snap.source,
        "driver_version": snap.driver.driver_version,
        "xid_watch": snap.xid_watch,
        "devices": devices,
    }
