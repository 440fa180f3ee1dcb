"""Every metric isaacd exports: name, type, labels, meaning.  The single source of truth for the
collector (it can only emit names defined here), docs/metrics.md (a test checks every name is
documented) and the dashboard/rules tests (every metric they reference must exist here)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..jobs.model import JobState
from ..status.types import WatchdogState
from ..sweeps.asha import TrialState

GPU_LABELS = ("gpu", "uuid", "model", "pci_bus_id")


def _values(e: type[enum.Enum]) -> str:
    """An enum's values as a HELP text lists them: the label values the collector exports, read from the enum."""
    return ", ".join(m.value for m in e)


@dataclass(frozen=True)
class MetricDef:
    name: str
    type: str  # gauge | counter | histogram
    labels: tuple[str, ...]
    help: str
    needs_gpu: bool = False  # only present when a GPU source is up


def _g(name: str, labels: tuple[str, ...], help: str, gpu: bool = False) -> MetricDef:
    return MetricDef(name, "gauge", labels, help, gpu)


def _c(name: str, labels: tuple[str, ...], help: str, gpu: bool = False) -> MetricDef:
    return MetricDef(name, "counter", labels, help, gpu)


G = GPU_LABELS

METRICS: tuple[MetricDef, ...] = (
    # ---- supervisor
    _g("isaacd_build_info", ("version", "python_version"), "Always 1; labels carry the isaacd and Python versions."),
    _g("isaacd_start_time_seconds", (), "Unix time the supervisor started."),
    _g("isaacd_uptime_seconds", (), "Seconds since the supervisor started."),
    _g("isaacd_status_up", (), "1 if the supervisor's status could be read for this scrape (job metrics present), else 0."),
    _c("isaacd_config_reloads_total", (), "Successful configuration reloads (SIGHUP / `isaacd reload`)."),
    _c("isaacd_config_errors_total", (), "Configuration reloads rejected because the new file was invalid."),
    _g("isaacd_volume_free_bytes", ("use", "job", "path"),
       "Bytes free (for unprivileged writers) on the volume of the state dir (use=state, history, journals and "
       "trainer logs) and of each job's log_root (use=log_root, checkpoints and TensorBoard; job = the job)."),
    _g("isaacd_volume_size_bytes", ("use", "job", "path"), "Size of the volume behind isaacd_volume_free_bytes."),
    _c("isaacd_scrape_errors_total", ("source",),
       "Errors while building a scrape; source=status (supervisor status unreadable) or gpu (snapshot unreadable)."),
    # ---- jobs
    _g("isaacd_job_info", ("job", "runtime", "node"),
       "Always 1 per configured job; runtime = process|podman|systemd|ray; node = the Ray node its trainer runs on "
       "(\"\" when the runtime does not place jobs, or between attempts)."),
    _g("isaacd_job_state", ("job", "state"),
       f"1 for the job's current state, 0 for the others ({_values(JobState)})."),
    _g("isaacd_job_iteration", ("job", "node"), "Latest training iteration seen (TensorBoard step / checkpoint)."),
    _g("isaacd_job_max_iterations", ("job",), "Configured number of training iterations."),
    _g("isaacd_job_mean_reward", ("job", "node"),
       "Latest mean episode reward (rsl_rl Train/mean_reward; a rolling mean over finished episodes)."),
    _g("isaacd_job_env_steps_per_second", ("job", "node"), "Latest environment steps per second (rsl_rl Perf/total_fps)."),
    _g("isaacd_job_scalar", ("job", "node", "tag"),
       "Latest value of every TensorBoard scalar the trainer writes; tag is the TensorBoard tag verbatim "
       "(Loss/surrogate, Train/mean_episode_length, Perf/total_fps, ...). NaN is exported as NaN."),
    _g("isaacd_job_last_progress_timestamp_seconds", ("job", "node"), "Unix time a new TensorBoard step was last seen."),
    _g("isaacd_job_checkpoint_iteration", ("job",), "Iteration of the newest valid checkpoint."),
    _g("isaacd_job_checkpoint_timestamp_seconds", ("job",), "Unix time the newest valid checkpoint was written."),
    _g("isaacd_job_start_time_seconds", ("job", "node"), "Unix time the job's current attempt started."),
    _c("isaacd_job_restarts_total", ("job", "reason"),
       "Restarts by isaacd, by reason (exit_code, signal, oom, cuda_oom, watchdog, operator, ...)."),
    _c("isaacd_job_cuda_ooms_total", ("job", "phase"),
       "Trainer exits whose output says CUDA out of memory; phase = startup (before the attempt's first iteration) "
       "or training (after it), including the one that failed the job."),
    _g("isaacd_job_num_envs", ("job",),
       "num_envs the job's launches use: less than isaacd_job_num_envs_configured after a [jobs.oom] step-down."),
    _g("isaacd_job_num_envs_configured", ("job",), "num_envs in the job's config."),
    _g("isaacd_job_spare_ready", ("job",), "1 while a warm spare trainer waits ready to take over at a crash."),
    _g("isaacd_job_spare_memory_bytes", ("job",), "Resident memory of the job's warm spare trainer (host RAM)."),
    _g("isaacd_job_spare_gpu_memory_bytes", ("job",),
       "GPU memory the warm spare holds (its CUDA context), as the spare measured it."),
    _g("isaacd_job_compile_cache_bytes", ("job", "cache"),
       "Bytes in the job's compile cache directory (cache=warp, kit, ov, glcache, computecache), measured at most "
       "once a minute off the supervisor's tick."),
    # ---- backup ([jobs.backup], daemon/backup/): present for jobs with a backup target
    _g("isaacd_backup_last_success_timestamp_seconds", ("job",),
       "Unix time the newest checkpoint in the job's backup target was uploaded (from its manifest)."),
    _g("isaacd_backup_last_iteration", ("job",), "Iteration of the newest checkpoint in the job's backup target."),
    _g("isaacd_backup_lag_iterations", ("job",),
       "Iterations between the newest complete local checkpoint and the newest one in the backup target."),
    _c("isaacd_backup_bytes_total", ("job",), "Bytes of checkpoints uploaded to the backup target since isaacd started."),
    _c("isaacd_backup_failures_total", ("job",),
       "Failed upload passes (store unreachable, write refused, no credentials) since isaacd started; each is "
       "retried with backoff."),
    _g("isaacd_backup_lease_held", ("job",),
       "1 while this supervisor holds the lease of the job's backup prefix (it may upload and resume from it), "
       "0 while another supervisor holds it or it is not taken yet."),
    _g("isaacd_job_gpu_assigned", ("job", "gpu"), "1 for each GPU the job is configured to use (gpu = GPU key or UUID)."),
    _g("isaacd_watchdog_state", ("job", "watchdog", "state"),
       f"1 for the watchdog's current state, 0 for the others ({_values(WatchdogState)})."),
    _g("isaacd_watchdog_state_since_timestamp_seconds", ("job", "watchdog"), "Unix time the watchdog entered its state."),
    _c("isaacd_watchdog_trips_total", ("job", "watchdog", "action"), "Watchdog trips by the action taken (0 before the first trip when the watchdog's status names its action)."),
    # ---- the host's queue (issue 31; metrics/queue_collector.py): jobs that ask for GPUs (gpus = N, gpu_memory)
    _g("isaacd_queue_jobs", ("priority",),
       "Jobs waiting in the host's queue (state queued), by priority; every priority of a job the queue places "
       "(gpus = N or gpu_memory) is reported, from 0."),
    _g("isaacd_queue_wait_seconds", ("job", "priority"),
       "Seconds a queued job has waited since it last entered the queue: since its submission, or since its "
       "requeue after a preemption. Present only while the job is queued."),
    _g("isaacd_job_queue_info", ("job", "priority", "preemptible"),
       "Always 1 per job the host's queue places (gpus = N or gpu_memory): its priority and whether a "
       "higher priority may preempt it (preemptible = true|false)."),
    _c("isaacd_job_preemptions_total", ("job",),
       "Times the queue preempted the job (stopped it with a save at an iteration boundary and queued it again), "
       "from 0 for every job the queue places; kept across supervisor restarts."),
    _g("isaacd_gpu_memory_allocated_bytes", G,
       "GPU memory the queue has given out on this place: a physical GPU not in MIG mode (the sum of gpu_memory "
       "over the placed jobs holding it, a whole-GPU job (gpus = N without gpu_memory) counting the GPU's total), "
       "or a MIG instance (gpu=\"<gpu>:<mig>\"; its total while a job holds it: a job on an instance holds it "
       "whole). A GPU in MIG mode has no series of its own (its instances have; summing both would count its "
       "memory twice); an instance's GPU is isaacd_gpu_info's parent_gpu. Jobs that name their GPUs and warm spares "
       "are not counted (their memory shows in isaacd_gpu_memory_used_bytes).", True),
    _g("isaacd_gpu_memory_idle_bytes", G,
       "GPU memory neither given out by the queue nor in use: isaacd_gpu_memory_total_bytes - "
       "max(isaacd_gpu_memory_allocated_bytes, isaacd_gpu_memory_used_bytes), at least 0, per place as "
       "isaacd_gpu_memory_allocated_bytes (GPUs not in MIG mode, MIG instances). The queue places nothing on a GPU "
       "a pinned job holds, or a cordoned (isaacd_gpu_unhealthy) or hot one.", True),
    # ---- per user (issue 32; metrics/queue_collector.py): the owners of jobs the queue places, as quotas count
    _g("isaacd_user_gpus", ("user",),
       "GPUs held by the user's jobs the queue placed (running, starting, saving): a whole GPU counts 1, a "
       "gpu_memory job its share of the GPU (asked / total), a job on a MIG instance the instance's share of its "
       "GPU (instance memory / GPU memory). user: the job's owner (a job without one: the "
       "supervisor's user). Every owner of a job the queue places, from 0."),
    _g("isaacd_user_gpu_memory_allocated_bytes", ("user",),
       "GPU memory held by the user's jobs the queue placed: gpu_memory on each GPU, a whole GPU its total, a MIG "
       "instance its memory."),
    _g("isaacd_user_queued_jobs", ("user",), "The user's jobs waiting in the host's queue (state queued)."),
    # ---- run-time estimates (issue 42; scheduling/estimates.py, metrics/queue_collector.py)
    _g("isaacd_job_estimated_remaining_seconds", ("job",),
       "Seconds until a placed job ends by isaacd's estimate: its iterations left x the median of its recent "
       "iteration times (before that, the last run of its task, library and num_envs here); negative once past it. "
       "Absent when not known."),
    _g("isaacd_job_estimated_run_seconds", ("job",),
       "A queued job's estimated run once started (start-up included), from the last completed run of its task, "
       "library and num_envs on this host. Absent when there is none."),
    _g("isaacd_job_estimate_error_ratio", ("job",),
       "The job's last completed run: how long it took over how long isaacd's first estimate said (1 = right, 2 = "
       "twice as long; the history's estimate where there was one, else its first rate estimate). Each completion "
       "is an estimate_error event too (`isaacd events JOB`)."),
    # ---- sweeps (issue 39; metrics/sweep_collector.py): one series set per sweep the supervisor knows
    _g("isaacd_sweep_trials", ("sweep", "state"),
       f"The sweep's trials by state, every state from 0 ({_values(TrialState)}); paused = paused by ASHA at a "
       "rung with a save, costing no GPU until promoted; running = holding a place of the sweep's concurrency "
       "(queued, starting or training)."),
    _g("isaacd_sweep_best_objective", ("sweep",),
       "The objective (its TensorBoard tag, smoothed over the last N logged iterations) of the sweep's best trial; "
       "absent until a trial reaches its first rung."),
    _c("isaacd_sweep_gpu_seconds_total", ("sweep",),
       "GPU time the sweep's trials have held so far: seconds of training x GPUs, a gpu_memory trial its share of "
       "one GPU; a paused trial adds nothing."),
    # ---- checkpoint evaluations (issue 41; metrics/eval_collector.py): a job with [jobs.eval]
    _g("isaacd_job_eval_return", ("job",),
       "Mean episode return of the job's newest finished evaluation (its checkpoint played headless, deterministic "
       "actions, the same seed for every checkpoint, over [jobs.eval] episodes); absent until one finishes."),
    _g("isaacd_job_eval_best_return", ("job",),
       "Mean episode return of the job's best evaluated checkpoint (`isaacd best JOB` names it; it is never "
       "pruned)."),
    _g("isaacd_job_eval_success_rate", ("job",),
       "Success rate (0-1) of the job's newest evaluation, only where the task logs one (Metrics/success_rate)."),
    _g("isaacd_job_eval_iteration", ("job",), "Iteration of the checkpoint the job's newest evaluation played."),
    _g("isaacd_job_eval_training_cost_seconds", ("job",),
       "Training time an evaluation of the job costs it (the mean of the newest measures): its iterations' time "
       "while one ran, less their usual time (evals/pacing.py); the next waits by [jobs.eval] max_training_cost. "
       "Absent until measured."),
    _c("isaacd_job_evals_total", ("job", "outcome"),
       "The job's evaluations by outcome, each from 0: done (a score recorded), failed (an attempt that crashed, "
       "passed its deadline or could not load its checkpoint; retried), given_up (a checkpoint given up after "
       "its retries); kept across supervisor restarts."),
    # ---- GPU collector
    _g("isaacd_gpu_collector_up", (), "1 if the GPU source (NVML) is open and sampled; 0 with the reason in the log."),
    _g("isaacd_gpu_xid_watch_up", (), "1 if XID events are being watched (a thread blocked in nvmlEventSetWait_v2)."),
    _g("isaacd_gpu_driver_info", ("driver_version", "nvml_version", "cuda_driver_version"), "Always 1; driver versions.",
       True),
    MetricDef("isaacd_gpu_sample_duration_seconds", "histogram", ("loop",),
              "Time one sampler pass over all GPUs took; loop=fast (every sample_interval) or slow (every "
              "slow_interval)."),
    _c("isaacd_gpu_collector_errors_total", ("gpu", "field", "error"),
       "Failed GPU reads: field (a sample field, or device = the whole GPU, xid_wait) and error kind "
       "(not_supported, gpu_lost, no_permission, error...). not_supported is counted once per GPU and field.", True),
    _g("isaacd_gpu_info", G + ("mig", "parent_gpu"),
       "Always 1 per GPU and MIG device; mig=true|false, parent_gpu = physical GPU of a MIG device.", True),
    _g("isaacd_gpu_up", G, "1 if the last fast sample of this GPU succeeded, 0 if it failed (GPU lost...).", True),
    _g("isaacd_gpu_last_sample_timestamp_seconds", G, "Unix time of the GPU's latest successful fast sample.", True),
    _g("isaacd_gpu_unhealthy", G + ("reason",), "1 while a watchdog has marked the GPU unhealthy.", True),
    _g("isaacd_gpu_job_info", ("gpu", "uuid", "job"),
       "1 for each (GPU, job) where a process of the job holds GPU memory. Join GPU series to jobs with "
       "`isaacd_gpu_power_watts * on(instance, gpu) group_right isaacd_gpu_job_info` (works when jobs share a GPU).",
       True),
    _g("isaacd_gpu_utilization_ratio", G, "Fraction of time a kernel was running (0-1). Not reported on MIG devices.",
       True),
    _g("isaacd_gpu_memory_utilization_ratio", G, "Fraction of time device memory was read or written (0-1).", True),
    _g("isaacd_gpu_temperature_celsius", G, "GPU core temperature.", True),
    _g("isaacd_gpu_memory_temperature_celsius", G, "HBM (memory) temperature (NVML field NVML_FI_DEV_MEMORY_TEMP).",
       True),
    _g("isaacd_gpu_thermal_margin_celsius", G,
       "Degrees below the temperature at which the GPU starts slowing down, as the driver reports it.", True),
    _g("isaacd_gpu_temperature_threshold_celsius", G + ("threshold",),
       "Driver temperature thresholds: slowdown, shutdown, gpu_max, memory_max.", True),
    _g("isaacd_gpu_power_watts", G, "Power draw.", True),
    _g("isaacd_gpu_power_limit_watts", G, "Enforced power limit.", True),
    _g("isaacd_gpu_power_limit_constraint_watts", G + ("constraint",),
       "Power limit bounds: min, max, default.", True),
    _g("isaacd_gpu_sm_clock_hertz", G, "Current SM clock.", True),
    _g("isaacd_gpu_memory_clock_hertz", G, "Current memory clock.", True),
    _g("isaacd_gpu_sm_clock_max_hertz", G, "Maximum SM clock.", True),
    _g("isaacd_gpu_memory_clock_max_hertz", G, "Maximum memory clock.", True),
    _g("isaacd_gpu_clock_event_reason", G + ("reason",),
       "1 while a clock-event (throttle) reason is active, else 0: gpu_idle, applications_clocks_setting, "
       "sw_power_cap, hw_slowdown, sync_boost, sw_thermal_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown, "
       "display_clock_setting.", True),
    _g("isaacd_gpu_memory_used_bytes", G, "Device memory in use.", True),
    _g("isaacd_gpu_memory_total_bytes", G, "Device memory size.", True),
    _c("isaacd_gpu_ecc_errors_total", G + ("type",),
       "ECC errors since the driver loaded (volatile); type = corrected|uncorrected.", True),
    _c("isaacd_gpu_ecc_errors_aggregate_total", G + ("type",),
       "ECC errors over the GPU's lifetime (aggregate, persistent in the InfoROM); type = corrected|uncorrected.", True),
    _c("isaacd_gpu_remapped_rows_total", G + ("cause",),
       "HBM rows remapped; cause = correctable|uncorrectable.", True),
    _g("isaacd_gpu_row_remap_pending", G, "1 if a row remap is pending (takes effect at the next GPU reset).", True),
    _g("isaacd_gpu_row_remap_failure", G, "1 if a row remap failed (the GPU should be serviced).", True),
    _c("isaacd_gpu_energy_joules_total", G, "Energy consumed since the driver loaded (slow loop).", True),
    _g("isaacd_gpu_pcie_throughput_bytes_per_second", G + ("direction",),
       "PCIe throughput over a 20 ms window (slow loop); direction = tx|rx.", True),
    _g("isaacd_gpu_pcie_link_generation", G, "Current PCIe link generation (slow loop).", True),
    _g("isaacd_gpu_pcie_link_width", G, "Current PCIe link width in lanes (slow loop).", True),
    _c("isaacd_gpu_xid_errors_total", G + ("xid", "class"),
       "XID errors seen since isaacd started, per code; class = application|reset|reboot|other.", True),
    _g("isaacd_gpu_xid_last_timestamp_seconds", G + ("xid", "class"), "Unix time the XID code was last seen.", True),
    _g("isaacd_gpu_process_memory_used_bytes", G + ("pid", "job"),
       "Device memory held by one process (host PID); job is empty when the process belongs to no isaacd job.", True),
)

BY_NAME: dict[str, MetricDef] = {m.name: m for m in METRICS}


def series_names(m: MetricDef) -> list[str]:
    """Names that appear in an exposition / in PromQL for this metric."""
    if m.type == "histogram":
        return [m.name + s for s in ("_bucket", "_sum", "_count")]
    return [m.name]
