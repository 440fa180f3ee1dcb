"""Prometheus exporter: supervisor, job and GPU metrics from in-memory state.

    from isaacd.metrics import build_registry, serve
    registry = build_registry(supervisor.status, sampler)      # sampler: isaacd.gpu.GpuSampler or None
    server = serve(cfg.metrics.listen, cfg.metrics.path, registry)
    ...
    server.close()
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from .attribution import attribute_pids, cgroup_contains
from .catalog import GPU_LABELS, METRICS, MetricDef
from .collector import JOB_STATES, RESTART_REASONS, WATCHDOG_STATES, IsaacdCollector
from .server import DEFAULT_LISTEN, MetricsServer, make_app, parse_listen, serve
from .status import gpu_status


def build_registry(status_provider: Any = None, gpu: Any = None, *, process_metrics: bool = True,
                   proc_root: str = "/proc", volumes: Any = None) -> CollectorRegistry:
    """A fresh registry with the isaacd collector (and the process_*/python_* collectors unless
    ``process_metrics=False``).  ``gpu``: a GpuSampler, a ``() -> GpuSnapshot`` callable, or None.
    ``volumes``: ``() -> [isaacd.volumes.Volume]`` for the free-space metrics, or None."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(IsaacdCollector(status_provider, gpu, proc_root=proc_root, volumes=volumes))
    if process_metrics:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
    return registry


__all__ = [
    "DEFAULT_LISTEN", "GPU_LABELS", "JOB_STATES", "METRICS", "RESTART_REASONS", "WATCHDOG_STATES", "IsaacdCollector",
    "MetricDef", "MetricsServer", "attribute_pids", "build_registry", "cgroup_contains", "gpu_status", "make_app",
    "parse_listen", "serve",
]
