"""Wires a Supervisor together with its optional parts: GPU sampler, watchdogs, metrics.

Data flows one way: the sampler and the runners produce state; the watchdog engine reads it and
acts on jobs; the status API and the exporter only read. Every part is handed to the Supervisor at
construction (its hooks, its extensions, the GPU check); nothing is attached to it afterwards.
"""

from __future__ import annotations

from typing import Any

from .backup.keeper import close_all
from .config.schema import Config
from .gpu import GpuSampler
from .gpu.assign import missing_gpus
from .gpu.oom_memory import MemoryHistory, OomNote, oom_note
from .metrics import build_registry, gpu_status, serve
from .status.types import GpusStatus, JobStatus
from .evals.notify import BestAnnouncer
from .scheduling.hook import HostQueue
from .history.store import StateStore
from .sweeps.controller import SweepController
from .supervisor import Extension, Hooks, Running, Supervisor
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

    def start(self, running: Running) -> None:
        self.sampler.start()
        self.sampler.wait_ready(5.0)  # jobs are checked against the GPU inventory before their first launch

    def stop(self) -> None:
        self.sampler.stop()


class _MetricsExtension:
    def __init__(self, sampler: Any):
        self.sampler = sampler
        self.server: Any = None  # the MetricsServer, once start() bound it

    def start(self, running: Running) -> None:
        cfg = running.config.metrics
        registry = build_registry(running.status, self.sampler, volumes=lambda: volumes(running.config))
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

    def __init__(self) -> None:
        self.running: Running | None = None

    def start(self, running: Running) -> None:
        self.running = running

    def stop(self) -> None:
        if self.running is not None:
            close_all(self.running.backups(), self.DRAIN_SECONDS)


class _PublishedGpus:
    """The "gpus" part of each published snapshot (NVML's processes attributed to jobs), kept for the CUDA
    out-of-memory note: a status hook writes it and the note reads it, both under the supervisor's lock."""

    def __init__(self, sampler: Any):
        self.sampler = sampler
        self.latest: GpusStatus | None = None

    def status(self, jobs: list[JobStatus]) -> GpusStatus:
        self.latest = None  # a hook that fails publishes no "gpus": the note then has none either
        self.latest = gpu_status(self.sampler.snapshot(), jobs)
        return self.latest


def build_supervisor(cfg: Config, config_path: str | None) -> Supervisor:
    # source = "none" still gets a sampler: it reports the collector down (once, with the reason)
    sampler = GpuSampler.from_config(cfg.gpu)
    sampler.gpus_optional = not any(j.device.startswith("cuda") or j.gpus or j.placed_by_isaacd for j in cfg.jobs)
    # a CUDA out-of-memory exit quotes who holds the job's GPUs (the published GPU status: NVML's processes,
    # attributed to jobs) and what their memory did during the attempt (the history of the sampler's snapshots)
    memory = MemoryHistory()
    published = _PublishedGpus(sampler)

    def gpu_memory(job: str, since: float | None) -> OomNote:
        return oom_note(job, published.latest, memory, since)

    def observe_memory(now: float, jobs: object) -> None:
        memory.observe(sampler.snapshot())

    watchdogs = WatchdogEngine(SamplerFeed(sampler))
    # jobs that ask for GPUs (issue 31): placed after the watchdogs; an extension too, for the [access] in force
    queue = HostQueue(cfg.queue, sampler.snapshot, cfg.access, cfg.supervisor.admin_group)
    # sweeps (issue 39): before the queue, so a trial it launches is placed in the same tick's pass at the latest next
    sweeps = SweepController(cfg.supervisor.state_dir, StateStore(cfg.supervisor.state_dir).append_event,
                             sampler.snapshot)
    extensions: list[Extension] = [_SamplerExtension(sampler), watchdogs, queue]
    if cfg.metrics.enabled:
        extensions.append(_MetricsExtension(sampler))
    # [notify] (issue 41): a job's new best evaluated checkpoint announced on the webhook in force
    announcer = BestAnnouncer(StateStore(cfg.supervisor.state_dir).append_event)
    extensions.append(announcer)
    extensions.append(_BackupDrain())  # last in, first stopped
    sup = Supervisor(cfg, config_path, gpu_check=lambda job: missing_gpus(job, sampler.snapshot()),
                     gpu_memory=gpu_memory, gpu_snapshot=sampler.snapshot,
                     hooks=Hooks(tick=[observe_memory, watchdogs.tick, sweeps.tick, queue.tick],
                                 job_status=[watchdogs.job_status, queue.job_status, announcer.job_status],
                                 row_changes=[watchdogs.rows_changed, queue.rows_changed, announcer.rows_changed],
                                 status=[published.status]),
                     extensions=extensions, sweeps=sweeps)
    # a PBT exploit rewrites its member's job file: reloaded as a SIGHUP is, once the files are quiet
    sweeps.request_reload = sup.request_reload
    return sup
