"""Fakes for tests and benchmarks (not shipped in the isaacd package): a status dict shaped like
``isaacd status --json`` and a GPU script that exercises every GPU series (used by tests/test_metrics.py
and bench/metrics.py)."""

from __future__ import annotations

import time
from typing import Any

from isaacd.status import JobStatus


def fake_job(name: str, *, pids: list[int] | None = None, state: str = "running", iteration: int = 120,
             now: float | None = None, cgroup: str | None = None, gpus: list[Any] | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    return {
        "name": name, "state": state, "runtime": "process", "pid": (pids or [None])[0], "pids": pids or [],
        "cgroup": cgroup, "iteration": iteration, "max_iterations": 1500, "mean_reward": 3.25, "fps": 48213.0,
        "scalars": {
            "Loss/surrogate": -0.0123, "Loss/value_function": 0.0871, "Loss/entropy": 0.91,
            "Loss/learning_rate": 0.001, "Policy/mean_noise_std": 0.72, "Train/mean_reward": 3.25,
            "Train/mean_episode_length": 412.0, "Perf/total_fps": 48213.0, "Perf/collection time": 0.41,
        },
        "last_progress_time": now - 2.0,
        "checkpoint": {"iteration": 100, "path": f"/var/lib/isaacd/{name}/model_100.pt", "time": now - 300.0},
        "restarts": 3, "last_restart_reason": "exit_code",
        "restarts_by_reason": {"exit_code": 2, "signal": 1, "oom": 0, "watchdog": 0, "operator": 0},
        "num_envs": 2048, "num_envs_configured": 4096, "cuda_ooms": {"startup": 1},
        "gpus": [0] if gpus is None else gpus,
        "watchdogs": {"no_progress": {"state": "ok", "since": now - 600.0},
                      "duty_cycle": {"state": "warmup", "since": now - 30.0}},
        "watchdog_trips": [{"watchdog": "no_progress", "action": "restart", "count": 1}],
        "run_dir": f"/var/lib/isaacd/{name}/logs", "started_at": now - 900.0,
        "spare": {"state": "ready", "pid": 4242, "rss_bytes": 812_000_000, "preload_seconds": 6.1,
                  "cuda_memory_bytes": 520_000_000},
        "backup": {"url": f"s3://bucket/isaacd/{name}", "last_upload": {"iteration": 90, "time": now - 400.0,
                   "key": "run/model_90.pt", "size": 1000}, "lag_iterations": 10, "error": "upload to ...: refused",
                   "error_since": now - 60.0, "retry_at": now + 30.0, "failures_total": 4, "bytes_total": 123456,
                   "uploads_total": 9, "restoring": None,
                   "lease": {"state": "held", "holder": None, "expires": now + 100.0, "conditional": True}},
        "compile_caches": [{"name": "warp", "path": f"/var/lib/isaacd/caches/{name}/warp", "size_bytes": 4096}],
        "evals": fake_evals(name, now),
    }


def fake_evals(name: str, now: float) -> dict[str, Any]:
    """[jobs.eval] (issue 41): two checkpoints evaluated, the older the best; one attempt failed, one given up."""
    def result(it: int, mean: float) -> dict[str, Any]:
        return {"iteration": it, "checkpoint": f"/var/lib/isaacd/{name}/model_{it}.pt", "episodes": 100,
                "return_mean": mean, "return_std": 12.3, "length_mean": 299.0, "length_std": 1.5,
                "success_rate": 0.9, "seed": 42, "num_envs": 100, "device": "cpu", "duration_seconds": 31.2,
                "finished_at": now - 100.0}
    return {"every": "1", "last": result(100, 487.1), "best": result(50, 495.4), "running": None, "waiting": 0,
            "done": 2, "failed": 1, "given_up": [75], "last_error": "exit 1", "video_unavailable": None,
            "where": "cpu", "cost_seconds": 0.24, "cost_share": 0.0186, "paced_until": None}


def fake_sweep(name: str = "lr") -> dict[str, Any]:
    """A sweep part way through ASHA (issue 39): one trial running, one paused at the first rung, one pending."""
    def trial(n: int, state: str, objective: float | None, rung_values: list[float]) -> dict[str, Any]:
        return {"number": n, "job": f"{name}-t{n:03d}", "values": {"agent.algorithm.learning_rate": 1e-3 * n},
                "state": state, "iteration": 60 if objective is not None else None, "objective": objective,
                "rung": len(rung_values), "rung_values": rung_values, "gpu_seconds": 120.0 if objective else 0.0}
    return {"name": name, "owner": "alice", "state": "running", "trials_total": 3, "concurrency": 2,
            "rungs": [50, 150], "max_iterations": 300, "best": 1, "best_objective": 3.25, "gpu_seconds": 240.0,
            "trials": [trial(1, "running", 3.25, [3.0]), trial(2, "paused", 1.5, [1.5]), trial(3, "pending", None, [])]}


def fake_status(jobs: list[dict[str, Any]] | None = None, *, started_at: float | None = None,
                sweeps: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    now = time.time()
    started = now - 3600.0 if started_at is None else started_at
    return {**({"sweeps": sweeps} if sweeps else {}),
        "supervisor": {"version": "0.1.0", "pid": 1234, "started_at": started, "uptime_seconds": now - started,
                       "config_path": "/etc/isaacd/isaacd.toml", "config_reloads_total": 2,
                       "config_errors_total": 1},
        "jobs": jobs if jobs is not None else [fake_job("anymal")],
    }


def rows(jobs: list[dict[str, Any]]) -> list[JobStatus]:
    """Status rows as the supervisor hands them to gpu_status and attribute_pids (typed, not JSON)."""
    return [JobStatus.from_json(j) for j in jobs]


def demo_gpu_script(gpus: int = 2, *, job_pid: Any = "self", xids: bool = True) -> dict[str, Any]:
    """A timeline where every GPU series exists: load on GPU 0, a hot GPU 1 that throttles, an
    application XID and a reset-class XID, ECC and remap counters, a process per GPU."""
    events: list[dict[str, Any]] = [
        {"t": 0, "gpu": "all", "utilization_gpu_ratio": 0.96, "utilization_memory_ratio": 0.41, "power_watts": 612,
         "sm_clock_hertz": 1.98e9, "memory_clock_hertz": 3.201e9, "clock_event_reasons": ["sw_power_cap"],
         "memory_used_bytes": 61 * 2**30, "pcie_tx_bytes_per_second": 2.1e9, "pcie_rx_bytes_per_second": 0.4e9,
         "ecc_corrected_volatile": 3, "ecc_corrected_aggregate": 17, "remapped_rows_correctable": 1,
         "processes": [{"pid": job_pid, "used_bytes": 60 * 2**30}]},
        {"t": 0, "gpu": 0, "temperature_celsius": 58, "memory_temperature_celsius": 66},
    ]
    if gpus > 1:
        events += [
            {"t": 0, "gpu": 1, "temperature_celsius": 84, "memory_temperature_celsius": 80},
            {"t": 30, "gpu": 1, "temperature_celsius": 90, "ramp": True},
            {"t": 1, "gpu": 1, "clock_event_reasons": ["sw_thermal_slowdown", "hw_thermal_slowdown"]},
        ]
    if xids:
        events += [{"t": 0, "gpu": 0, "xid": 13}, {"t": 0.5, "gpu": gpus - 1, "xid": [48, 48]}]
    return {"gpus": gpus, "events": events}
