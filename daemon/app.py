"""Wires a Supervisor together with its optional parts: GPU sampler, watchdogs, metrics.

Data flows one way: the sampler and the runners produce state; the watchdog engine reads it and
acts on jobs; the status API and the exporter only read.
"""

from __future__ import annotations

from typing import Any

from .config import Config
from .gpumemory import MemoryHistory, oom_note
from .supervisor import Supervisor
from .volumes import volumes
from .watchdogs.engine import WatchdogEngine
from .watchdogs.gpufeed import SamplerFeed


class MetricsUnavailable(RuntimeError):
    """The metrics address cannot be bound (taken, or not ours to bind): the supervisor must not start."""

    def __init__(self, listen: str, exc: OSError):
        super().__init__(f"cannot listen on {listen}: {exc.strerror or exc}")
        self.listen, self.errno = listen, exc.errno


class _SamplerExtension:
    def __init__(self, sampler: Any):
        self.sampler = sampler

    def start(self) -> None:
        self.sampler.start()
        self.sampler.wait_ready(5.0)  # jobs are checked against the GPU inventory before their first launch

    def stop(self) -> None:
        self.sampler.stop()


class _MetricsExtension:
    def __init__(self, sup: Supervisor, sampler: Any):
        self.sup, self.sampler, self.server = sup, sampler, None

    def start(self) -> None:
        from .metrics import build_registry, serve

        cfg = self.sup.config.metrics
        registry = build_registry(self.sup.status, self.sampler, volumes=lambda: volumes(self.sup.config))
        try:
            self.server = serve(cfg.listen, cfg.path, registry)  # logs the URL itself: no second line here
        except OSError as exc:
            raise MetricsUnavailable(cfg.listen, exc) from None

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()


class _BackupDrain:
    """Stopped first at shutdown, after the trainers saved: their last checkpoints go to the backup targets."""

    DRAIN_SECONDS = 30.0

    def __init__(self, sup: Supervisor):
        self.sup = sup

    def start(self) -> None:
        pass

    def stop(self) -> None:
        from .backup.keeper import close_all

        close_all([r.backup for r in self.sup.runners.values() if r.backup is not None], self.DRAIN_SECONDS)


def missing_gpus(sampler: Any, job: Any) -> str | None:
    """Why a job's GPUs are not on this host, or None (see isaacd.gpu.assign.missing_gpus)."""
    from .gpu.assign import missing_gpus as _missing

    return _missing(job, sampler.snapshot())


def build_supervisor(cfg: Config, config_path: str | None) -> Supervisor:
    sup = Supervisor(cfg, config_path)
    from .gpu import GpuSampler
    from .metrics import gpu_status

    # source = "none" still gets a sampler: it reports the collector down (once, with the reason)
    sampler = GpuSampler.from_config(cfg.gpu)
    sampler.gpus_optional = not any(j.device.startswith("cuda") or j.gpus for j in cfg.jobs)
    sup.extensions.append(_SamplerExtension(sampler))
    sup.gpu_check = lambda job: missing_gpus(sampler, job)
    # a CUDA out-of-memory exit quotes who holds the job's GPUs (the published GPU status: NVML's processes,
    # attributed to jobs) and what their memory did during the attempt (the history of the sampler's snapshots)
    memory = MemoryHistory()
    sup.tick_hooks.append(lambda now: memory.observe(sampler.snapshot()))
    sup.gpu_memory = lambda job, since: oom_note(job, sup.status().gpus, memory, since)
    sup.status_hooks.append(lambda jobs: {"gpus": gpu_status(sampler.snapshot(), jobs)})
    sup.extensions.append(WatchdogEngine(sup, SamplerFeed(sampler)))
    if cfg.metrics.enabled:
        sup.extensions.append(_MetricsExtension(sup, sampler))
    sup.extensions.append(_BackupDrain(sup))  # last in, first stopped
    return sup
