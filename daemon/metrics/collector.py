"""prometheus-client custom collector over the supervisor's status and the GPU snapshot.

A scrape reads two in-memory things - ``status_provider()`` and ``sampler.snapshot()`` - and never
calls NVML.  Anything wrong with one job or one GPU costs that part of the scrape (counted in
``isaacd_scrape_errors_total``), never the whole scrape.

The status is a `status.Status` (the supervisor's) or its JSON (tests, benchmarks); JSON rows are read
one by one, so a malformed row costs only itself. Fields are read by attribute, and every number is
checked before it is exported (`_num`): a row from JSON carries whatever types it was given.
"""

from __future__ import annotations

import math
import platform
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..gpu.assign import assigned_keys
from ..gpu.sampler import GpuSampler, GpuSnapshot
from ..gpu.types import CLOCK_EVENT_REASONS, GpuInfo, xid_class
from ..jobs.messages import ReasonClass
from ..jobs.model import JobState, OomPhase
from ..status.types import JobStatus, Status, SupervisorInfo, WatchdogState
from ..status.sweeps import SweepStatus
from .attribution import attribute_pids
from .families import Families as _Families
from .families import num as _num
from .eval_collector import collect_evals
from .queue_collector import collect_queue
from .sweep_collector import collect_sweep, sweeps_of

log = structlog.get_logger("isaacd.metrics")

# Label values, read from the enums that define them: every state and phase is exported from 0, so a
# dashboard sees each series before its first 1 and increase() sees the first event.
JOB_STATES = tuple(s.value for s in JobState)
WATCHDOG_STATES = tuple(s.value for s in WatchdogState)
# Every reason a restart can be counted under, from 0: all but config_error (never restarted) and node_lost
# (only a Ray job can lose its node: added per job below).
RESTART_REASONS = tuple(r.value for r in ReasonClass if r not in (ReasonClass.CONFIG_ERROR, ReasonClass.NODE_LOST))
OOM_PHASES = tuple(p.value for p in OomPhase)

StatusProvider = Callable[[], "Status | Mapping[str, Any]"]
VolumesProvider = Callable[[], list[Any]]  # -> [volumes.Volume]
SnapshotProvider = Callable[[], GpuSnapshot]


class IsaacdCollector(Collector):
    def __init__(
        self,
        status_provider: StatusProvider | None = None,
        gpu: GpuSampler | SnapshotProvider | None = None,
        *,
        proc_root: str = "/proc",
        clock: Callable[[], float] = time.time,
        volumes: VolumesProvider | None = None,
    ):
        self._status_provider = status_provider
        self._volumes = volumes
        if isinstance(gpu, GpuSampler):
            self._snapshot: SnapshotProvider | None = gpu.snapshot
        else:
            self._snapshot = gpu
        self._proc_root = proc_root
        self._clock = clock
        self._lock = threading.Lock()
        self._scrape_errors = {"status": 0, "gpu": 0}
        self._last_error: dict[str, str] = {}

    def describe(self) -> list[Metric]:
        return []  # don't run collect() at registration time (the supervisor may not be up yet)

    def _error(self, source: str, err: BaseException, **ctx: Any) -> None:
        with self._lock:
            self._scrape_errors[source] = self._scrape_errors.get(source, 0) + 1
            msg = f"{type(err).__name__}: {err}"
            first = self._last_error.get(source) != msg
            self._last_error[source] = msg
        if first:  # log each distinct failure once, not on every scrape
            log.error("metrics scrape error", source=source, error=msg, **ctx)

    # ------------------------------------------------------------------ collect
    def collect(self) -> Iterable[Metric]:
        f = _Families()
        now = self._clock()
        status: Status | Mapping[str, Any] | None = None
        if self._status_provider is not None:
            try:
                status = self._status_provider()
                if not isinstance(status, (Status, Mapping)):
                    raise TypeError(f"status provider returned {type(status).__name__}, not a status")
            except Exception as e:  # noqa: BLE001
                status = None
                self._error("status", e)
        rows: list[JobStatus | Mapping[str, Any]] = []
        sup: SupervisorInfo | None = None
        if isinstance(status, Status):
            rows, sup = list(status.jobs), status.supervisor
        elif status is not None:
            rows = [j for j in (status.get("jobs") or []) if isinstance(j, Mapping)]
            raw_sup = status.get("supervisor")
            sup = SupervisorInfo.from_json(raw_sup) if isinstance(raw_sup, Mapping) else SupervisorInfo()
        self._supervisor(f, sup, now)
        snap: GpuSnapshot | None = None
        if self._snapshot is not None:
            try:
                snap = self._snapshot()
            except Exception as e:  # noqa: BLE001
                self._error("gpu", e)
        jobs: list[JobStatus] = []
        for row in rows:
            try:
                job = row if isinstance(row, JobStatus) else JobStatus.from_json(row)
                jobs.append(job)  # its pids still count on the GPUs if one of its fields is odd
                self._job(f, job, snap)
                collect_evals(f, job.name, job.evals)  # eval_collector.py ([jobs.eval], issue 41)
            except Exception as e:  # noqa: BLE001 - one odd job must not cost the others
                self._error("status", e, job=row.name if isinstance(row, JobStatus) else row.get("name"))
        self._gpu(f, snap, jobs)
        try:  # the host's queue (queue_collector.py): its failure costs only its own series
            collect_queue(f, jobs, snap, now)
        except Exception as e:  # noqa: BLE001
            self._error("status", e, part="queue")
        for sweep in sweeps_of(status):  # sweep_collector.py: one odd sweep costs only its own series
            try:
                collect_sweep(f, sweep)
            except Exception as e:  # noqa: BLE001
                self._error("status", e, sweep=sweep.name if isinstance(sweep, SweepStatus) else sweep.get("name"))
        self._volume_space(f)
        with self._lock:
            errors = dict(self._scrape_errors)
        for source, n in sorted(errors.items()):
            f.add("isaacd_scrape_errors_total", [source], n)
        return f.families()

    def _supervisor(self, f: _Families, sup: SupervisorInfo | None, now: float) -> None:
        """`sup` is None when the status could not be read."""
        from .. import __version__

        info = sup if sup is not None else SupervisorInfo()
        version = info.version if isinstance(info.version, str) else __version__
        f.add("isaacd_build_info", [version, platform.python_version()], 1)
        f.add("isaacd_status_up", [], 1 if sup is not None else 0)
        started = _num(info.started_at)
        f.add("isaacd_start_time_seconds", [], started)
        uptime = _num(info.uptime_seconds)
        if uptime is None and started is not None:
            uptime = max(0.0, now - started)
        f.add("isaacd_uptime_seconds", [], uptime)
        f.add("isaacd_config_reloads_total", [], _num(info.config_reloads_total))
        f.add("isaacd_config_errors_total", [], _num(info.config_errors_total))

    def _volume_space(self, f: _Families) -> None:
        """statvfs of each volume at scrape time: a syscall, no I/O on the supervisor's tick."""
        if self._volumes is None:
            return
        from ..volumes import space

        try:
            vols = self._volumes()
        except Exception as e:  # noqa: BLE001
            self._error("status", e)
            return
        for v in vols:
            sp = space(v.path)
            if sp is None:
                continue
            labels = [v.use, v.job, str(v.path)]
            f.add("isaacd_volume_free_bytes", labels, sp.free_bytes)
            f.add("isaacd_volume_size_bytes", labels, sp.size_bytes)

    def _job(self, f: _Families, job: JobStatus, snap: GpuSnapshot | None) -> None:
        name = job.name
        if not isinstance(name, str) or not name:
            raise ValueError(f"job without a name in status: {job!r:.200}")
        # the node its trainer runs on (runtime = "ray"); "" otherwise, so every series of a metric has one label set.
        # Only on gauges of the current attempt: counters and the checkpoint series stay per job, so a move to
        # another node never looks like a counter reset.
        node = str(job.node or "")
        f.add("isaacd_job_info", [name, str(job.runtime or ""), node], 1)
        state = job.state
        states = JOB_STATES if state in JOB_STATES or not isinstance(state, str) else JOB_STATES + (state,)
        for s in states:
            f.add("isaacd_job_state", [name, s], 1 if s == state else 0)
        f.add("isaacd_job_iteration", [name, node], _num(job.iteration))
        f.add("isaacd_job_max_iterations", [name], _num(job.max_iterations))
        f.add("isaacd_job_mean_reward", [name, node], _num(job.mean_reward))
        f.add("isaacd_job_env_steps_per_second", [name, node], _num(job.fps))
        for tag, v in sorted(job.scalars.items()):
            f.add("isaacd_job_scalar", [name, node, str(tag)], _num(v))
        f.add("isaacd_job_last_progress_timestamp_seconds", [name, node], _num(job.last_progress_time))
        ck = job.checkpoint
        if ck is not None:
            f.add("isaacd_job_checkpoint_iteration", [name], _num(ck.iteration))
            f.add("isaacd_job_checkpoint_timestamp_seconds", [name], _num(ck.time))
        f.add("isaacd_job_start_time_seconds", [name, node], _num(job.started_at))
        reasons: dict[str, float] = {r: 0.0 for r in RESTART_REASONS + ((ReasonClass.NODE_LOST.value,)
                                                                         if job.runtime == "ray" else ())}
        for r, count in job.restarts_by_reason.items():
            if (n := _num(count)) is not None:
                reasons[str(r)] = n
        total = _num(job.restarts)
        if total is not None and total > sum(reasons.values()):
            reasons["other"] = reasons.get("other", 0.0) + total - sum(reasons.values())
        for r, total_r in sorted(reasons.items()):
            f.add("isaacd_job_restarts_total", [name, r], total_r)
        if job.cuda_ooms is not None:  # both phases from 0, so increase() sees the first one
            for phase in OOM_PHASES:
                f.add("isaacd_job_cuda_ooms_total", [name, phase], _num(job.cuda_ooms.get(phase, 0)))
        f.add("isaacd_job_num_envs", [name], _num(job.num_envs))
        f.add("isaacd_job_num_envs_configured", [name], _num(job.num_envs_configured))
        spare = job.spare
        if spare is not None and spare.live:
            f.add("isaacd_job_spare_ready", [name], 1 if spare.state == "ready" else 0)
            f.add("isaacd_job_spare_memory_bytes", [name], _num(spare.rss_bytes))
            f.add("isaacd_job_spare_gpu_memory_bytes", [name], _num(spare.cuda_memory_bytes))
        elif spare is not None:
            f.add("isaacd_job_spare_ready", [name], 0)
        for cache in job.compile_caches:
            f.add("isaacd_job_compile_cache_bytes", [name, str(cache.name)], _num(cache.size_bytes))
        backup = job.backup
        if backup is not None:  # a job with a backup target ([jobs.backup])
            last = backup.last_upload
            if last is not None:
                f.add("isaacd_backup_last_success_timestamp_seconds", [name], _num(last.time))
                f.add("isaacd_backup_last_iteration", [name], _num(last.iteration))
            f.add("isaacd_backup_lag_iterations", [name], _num(backup.lag_iterations))
            f.add("isaacd_backup_bytes_total", [name], _num(backup.bytes_total))
            f.add("isaacd_backup_failures_total", [name], _num(backup.failures_total))
            if backup.lease is not None:  # one writer per prefix (backup/lease.py)
                f.add("isaacd_backup_lease_held", [name], 1 if backup.lease.state == "held" else 0)
        for key in assigned_keys(job.gpus, snap):  # "all" -> every GPU; refs -> GPU keys
            f.add("isaacd_job_gpu_assigned", [name, key], 1)
        wds = job.watchdogs
        for wd, w in sorted(wds.items()):
            st = w.state
            for s in (WATCHDOG_STATES if st in WATCHDOG_STATES or not isinstance(st, str)
                      else WATCHDOG_STATES + (st,)):
                f.add("isaacd_watchdog_state", [name, str(wd), s], 1 if s == st else 0)
            f.add("isaacd_watchdog_state_since_timestamp_seconds", [name, str(wd)], _num(w.since))
        trips: dict[tuple[str, str], float] = {}
        # A watchdog whose status names its configured action gets a 0 counter before its first
        # trip, so increase() sees the first one.
        for wd, w in wds.items():
            # every action the watchdog can take starts at 0, so increase() sees the first trip
            for action in w.actions or ((w.action,) if isinstance(w.action, str) else ()):
                trips[(str(wd), str(action))] = 0.0
        for trip in job.watchdog_trips:
            if (trips_n := _num(trip.count)) is not None:
                trips[(str(trip.watchdog), str(trip.action))] = trips_n
        for (wd, action), trips_n in sorted(trips.items()):
            f.add("isaacd_watchdog_trips_total", [name, wd, action], trips_n)

    # ------------------------------------------------------------------ GPU
    def _gpu(self, f: _Families, snap: GpuSnapshot | None, jobs: list[JobStatus]) -> None:
        f.add("isaacd_gpu_collector_up", [], 1 if snap is not None and snap.up else 0)
        f.add("isaacd_gpu_xid_watch_up", [], 1 if snap is not None and snap.up and snap.xid_watch else 0)
        hist = f.get("isaacd_gpu_sample_duration_seconds")
        if snap is None:
            return
        for loop, h in sorted(snap.durations.items()):
            buckets = [(_le(b), c) for b, c in zip(h.buckets, h.counts)] + [("+Inf", h.count)]
            hist.add_metric([loop], buckets, sum_value=h.sum)  # type: ignore[attr-defined]
        for (gpu, field, kind), n in sorted(snap.errors.items()):
            f.add("isaacd_gpu_collector_errors_total", [gpu, field, kind], n)
        if not snap.gpus:
            return
        try:
            self._gpu_series(f, snap, jobs)
        except Exception as e:  # noqa: BLE001
            self._error("gpu", e)

    def _gpu_series(self, f: _Families, snap: GpuSnapshot, jobs: list[JobStatus]) -> None:
        d = snap.driver
        f.add("isaacd_gpu_driver_info", [d.driver_version or "", d.nvml_version or "", d.cuda_driver_version or ""], 1)
        owner = attribute_pids({p.pid for p in snap.processes}, jobs, self._proc_root) if jobs else {}
        for key, info in snap.gpus.items():
            base = [info.key, info.uuid, info.model, info.pci_bus_id]
            parent = "" if info.parent_index is None else str(info.parent_index)
            f.add("isaacd_gpu_info", base + ["true" if info.is_mig else "false", parent], 1)
            s = snap.samples.get(key)
            f.add("isaacd_gpu_up", base, 1 if s is not None else 0)
            if key in snap.unhealthy:
                f.add("isaacd_gpu_unhealthy", base + [snap.unhealthy[key]], 1)
            if s is not None:
                self._fast(f, base, s, info, owner)
            sl = snap.slow.get(key)
            if sl is not None:
                f.add("isaacd_gpu_energy_joules_total", base, sl.energy_joules)
                f.add("isaacd_gpu_pcie_throughput_bytes_per_second", base + ["tx"], sl.pcie_tx_bytes_per_second)
                f.add("isaacd_gpu_pcie_throughput_bytes_per_second", base + ["rx"], sl.pcie_rx_bytes_per_second)
                f.add("isaacd_gpu_pcie_link_generation", base, sl.pcie_link_generation)
                f.add("isaacd_gpu_pcie_link_width", base, sl.pcie_link_width)
                f.add("isaacd_gpu_sm_clock_max_hertz", base, sl.sm_clock_max_hertz)
                f.add("isaacd_gpu_memory_clock_max_hertz", base, sl.memory_clock_max_hertz)
                for c, v in (("min", sl.power_limit_min_watts), ("max", sl.power_limit_max_watts),
                             ("default", sl.power_limit_default_watts)):
                    f.add("isaacd_gpu_power_limit_constraint_watts", base + [c], v)
                for t, v in sorted(sl.temperature_thresholds_celsius.items()):
                    f.add("isaacd_gpu_temperature_threshold_celsius", base + [t], v)
        for (gkey, xid), seen in sorted(snap.xids.items()):
            xid_gpu = snap.gpus.get(gkey)
            xid_base = [xid_gpu.key, xid_gpu.uuid, xid_gpu.model, xid_gpu.pci_bus_id] if xid_gpu else [gkey, "", "", ""]
            f.add("isaacd_gpu_xid_errors_total", xid_base + [str(xid), xid_class(xid)], seen.count)
            f.add("isaacd_gpu_xid_last_timestamp_seconds", xid_base + [str(xid), xid_class(xid)], seen.last_seen)

    def _fast(self, f: _Families, base: list[str], s: Any, info: GpuInfo, owner: Mapping[int, str]) -> None:
        f.add("isaacd_gpu_last_sample_timestamp_seconds", base, s.timestamp)
        f.add("isaacd_gpu_utilization_ratio", base, s.utilization_gpu_ratio)
        f.add("isaacd_gpu_memory_utilization_ratio", base, s.utilization_memory_ratio)
        f.add("isaacd_gpu_temperature_celsius", base, s.temperature_celsius)
        f.add("isaacd_gpu_memory_temperature_celsius", base, s.memory_temperature_celsius)
        f.add("isaacd_gpu_thermal_margin_celsius", base, s.thermal_margin_celsius)
        f.add("isaacd_gpu_power_watts", base, s.power_watts)
        f.add("isaacd_gpu_power_limit_watts", base, s.power_limit_watts)
        f.add("isaacd_gpu_sm_clock_hertz", base, s.sm_clock_hertz)
        f.add("isaacd_gpu_memory_clock_hertz", base, s.memory_clock_hertz)
        if s.clock_event_reasons is not None:
            for reason, bit in CLOCK_EVENT_REASONS.items():
                f.add("isaacd_gpu_clock_event_reason", base + [reason], 1 if s.clock_event_reasons & bit else 0)
        f.add("isaacd_gpu_memory_used_bytes", base, s.memory_used_bytes)
        f.add("isaacd_gpu_memory_total_bytes", base, s.memory_total_bytes)
        f.add("isaacd_gpu_ecc_errors_total", base + ["corrected"], s.ecc_corrected_volatile)
        f.add("isaacd_gpu_ecc_errors_total", base + ["uncorrected"], s.ecc_uncorrected_volatile)
        f.add("isaacd_gpu_ecc_errors_aggregate_total", base + ["corrected"], s.ecc_corrected_aggregate)
        f.add("isaacd_gpu_ecc_errors_aggregate_total", base + ["uncorrected"], s.ecc_uncorrected_aggregate)
        f.add("isaacd_gpu_remapped_rows_total", base + ["correctable"], s.remapped_rows_correctable)
        f.add("isaacd_gpu_remapped_rows_total", base + ["uncorrectable"], s.remapped_rows_uncorrectable)
        f.add("isaacd_gpu_row_remap_pending", base, None if s.remapped_rows_pending is None
              else float(s.remapped_rows_pending))
        f.add("isaacd_gpu_row_remap_failure", base, None if s.remapped_rows_failure is None
              else float(s.remapped_rows_failure))
        jobs_here: set[str] = set()
        for p in s.processes or ():
            job = owner.get(p.pid, "")
            if job:
                jobs_here.add(job)
            f.add("isaacd_gpu_process_memory_used_bytes", base + [str(p.pid), job], p.used_bytes)
        for job in sorted(jobs_here):
            f.add("isaacd_gpu_job_info", [info.key, info.uuid, job], 1)


def _le(b: float) -> str:
    return "+Inf" if math.isinf(b) else repr(float(b))
