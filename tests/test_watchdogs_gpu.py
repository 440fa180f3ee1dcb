"""GPU watchdogs end to end: a real supervisor whose GPU sampler replays a scripted timeline.

Heat, XIDs and a stuck duty cycle cannot be caused on this machine; they enter through the same
GpuSource interface NVML implements (`[gpu] source = "scripted"`), never by patching internals.
"""

from __future__ import annotations

import json
import time

import pytest
from helpers import builtin_job, wait_for, write_config

pytestmark = pytest.mark.slow

ALL_QUIET = {"no_progress": {"enabled": False}, "duty_cycle": {"enabled": False},
             "loss_stagnation": {"enabled": False}, "reward_plateau": {"enabled": False},
             "divergence": {"enabled": False}, "gpu_temperature": {"enabled": False}, "xid": {"enabled": False}}


def gpu_job(tmp_path, script: dict, watchdogs: dict, command=("sh", "-c", "sleep 1000"), **over) -> "Path":  # noqa: ANN001, F821
    (tmp_path / "gpu.json").write_text(json.dumps(script))
    wd = {**ALL_QUIET, **watchdogs}
    job = builtin_job("g", command=list(command), gpus=[0], **over)
    job += "".join(f"\n[jobs.watchdogs.{name}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in table.items())
                   for name, table in wd.items())
    extra = '\n[gpu]\nsource = "scripted"\nscript = "gpu.json"\nsample_interval = 0.2\nslow_interval = 0.5\n'
    cfg = write_config(tmp_path, job)
    cfg.write_text(cfg.read_text().replace('[gpu]\nsource = "none"\n', extra))
    return cfg


def trips(sp, job="g"):  # noqa: ANN001, ANN201
    return [e for e in sp.events(job) if e["event"] == "watchdog_trip"]


def gpu0(sp):  # noqa: ANN001, ANN201
    return sp.status()["gpus"]["devices"][0]


def test_heat_power_caps_then_parks_then_resumes_when_cool(tmp_path, supervisor_factory):
    script = {"gpus": 1, "defaults": {"temperature_celsius": 40, "power_watts": 600, "utilization_gpu_ratio": 0.95},
              "events": [{"t": 3, "gpu": 0, "temperature_celsius": 88},
                         {"t": 8, "gpu": 0, "temperature_celsius": 93},
                         {"t": 12, "gpu": 0, "temperature_celsius": 60}]}
    cfg = gpu_job(tmp_path, script, {"gpu_temperature": {"for": 1.0, "threshold_celsius": 85.0, "stop_celsius": 92.0,
                                                         "resume_celsius": 75.0, "cooldown": 1.5,
                                                         "power_cap_step_watts": 50.0, "warmup_seconds": 0.0}})
    sp = supervisor_factory(cfg)
    t0 = time.time()
    first = wait_for(lambda: trips(sp), 10, what="first heat trip")[0]
    assert first["action"] == "power-cap" and "88 C > 85 C" in first["detail"]
    assert time.time() - t0 >= 3.9  # 3 s until hot + the 1 s hold, not earlier
    wait_for(lambda: gpu0(sp)["power_limit_watts"] == 650, 3, what="power limit lowered by one step")
    assert sp.job("g")["watchdogs"]["gpu_temperature"]["state"] in ("tripped", "cooldown", "pending")

    wait_for(lambda: sp.job("g")["state"] == "stopped", 10, what="parked above the hard limit")
    stop = [t for t in trips(sp) if t["action"] == "stop"][0]
    assert "hard limit 92 C" in stop["detail"]
    assert gpu0(sp)["power_limit_watts"] < 700

    # hysteresis: back to work only once under 75 C (t=12), with the power limit restored
    j = wait_for(lambda: (x := sp.job("g"))["state"] in ("starting", "running") and x, 10, what="resumed when cool")
    assert time.time() - t0 >= 11.9
    assert j["restarts"] == 1 and "back under 75 C" in j["last_restart_reason"]
    wait_for(lambda: gpu0(sp)["power_limit_watts"] == 700, 3, what="power limit restored")
    metrics = {(t["watchdog"], t["action"]): t["count"] for t in sp.job("g")["watchdog_trips"]}
    assert metrics[("gpu_temperature", "stop")] == 1 and metrics[("gpu_temperature", "power-cap")] >= 1


def test_no_heat_trip_during_warmup(tmp_path, supervisor_factory):
    script = {"gpus": 1, "events": [{"t": 0, "gpu": 0, "temperature_celsius": 90},
                                    {"t": 3, "gpu": 0, "temperature_celsius": 50}]}
    cfg = gpu_job(tmp_path, script, {"gpu_temperature": {"for": 0.5, "warmup_seconds": 4.0, "action": "log"}})
    sp = supervisor_factory(cfg)
    wait_for(lambda: sp.job("g")["watchdogs"]["gpu_temperature"]["state"] == "warmup", 5, what="warm-up state")
    time.sleep(5)
    assert trips(sp) == []
    assert sp.job("g")["watchdogs"]["gpu_temperature"]["state"] == "ok"


def test_power_cap_without_permission_degrades_to_log(tmp_path, supervisor_factory):
    script = {"gpus": 1, "power_limit_settable": False, "events": [{"t": 1, "gpu": 0, "temperature_celsius": 88}]}
    cfg = gpu_job(tmp_path, script, {"gpu_temperature": {"for": 0.5, "warmup_seconds": 0.0, "cooldown": 30.0}})
    sp = supervisor_factory(cfg)
    trip = wait_for(lambda: trips(sp), 8, what="heat trip")[0]
    assert trip["configured_action"] == "power-cap" and trip["action"] == "log"
    assert "needs root" in trip["note"]
    assert sp.job("g")["state"] in ("starting", "running")


def test_application_xid_restarts_reset_xid_stops_and_marks_gpu_unhealthy(tmp_path, supervisor_factory):
    script = {"gpus": 1, "events": [{"t": 2, "gpu": 0, "xid": 13}, {"t": 6, "gpu": 0, "xid": 79}]}
    cfg = gpu_job(tmp_path, script, {"xid": {}})
    sp = supervisor_factory(cfg)
    pid = sp.job("g")["pid"]
    j = wait_for(lambda: (x := sp.job("g"))["restarts"] == 1 and x, 8, what="restart on XID 13")
    assert "XID 13" in j["last_restart_reason"] and j["pid"] != pid
    wait_for(lambda: sp.job("g")["state"] == "stopped", 10, what="stop on XID 79")
    assert gpu0(sp)["health"].startswith("unhealthy") and "XID 79" in gpu0(sp)["health"]
    time.sleep(1.5)
    j = sp.job("g")
    assert j["state"] == "stopped" and j["restarts"] == 1  # no restart loop
    assert [t["action"] for t in trips(sp)] == ["restart", "stop"]
    assert "XID 79" in sp.cli("status").stdout


def test_idle_gpu_without_progress_is_restarted_after_hold_not_in_warmup(tmp_path, supervisor_factory):
    script = {"gpus": 1, "defaults": {"utilization_gpu_ratio": 0.02, "power_watts": 80}}
    cfg = gpu_job(tmp_path, script, {"duty_cycle": {"for": 1.5, "warmup_seconds": 2.0, "cooldown": 60.0,
                                                    "progress_grace": 1.0}})
    sp = supervisor_factory(cfg)
    t0 = time.time()
    trip = wait_for(lambda: trips(sp), 10, what="duty-cycle trip")[0]
    assert time.time() - t0 >= 3.4  # warm-up 2 s + hold 1.5 s
    assert trip["action"] == "restart" and "below 10%" in trip["detail"]
    wait_for(lambda: sp.job("g")["restarts"] == 1, 5, what="restart")


def test_spin_hang_busy_gpu_at_idle_power_is_caught(tmp_path, supervisor_factory):
    script = {"gpus": 1, "defaults": {"utilization_gpu_ratio": 0.99, "power_watts": 95}}
    cfg = gpu_job(tmp_path, script, {"duty_cycle": {"for": 1.0, "warmup_seconds": 0.5, "action": "log",
                                                    "progress_grace": 1.0}})
    sp = supervisor_factory(cfg)
    trip = wait_for(lambda: trips(sp), 8, what="spin-hang trip")[0]
    assert "spin hang" in trip["detail"]


def test_idle_gpu_with_training_progress_is_not_a_hang(tmp_path, supervisor_factory):
    """CPU-bound phases (checkpointing, evaluation) idle the GPU while steps keep arriving."""
    script = {"gpus": 1, "defaults": {"utilization_gpu_ratio": 0.01, "power_watts": 80}}
    cfg = gpu_job(tmp_path, script, {"duty_cycle": {"for": 1.0, "warmup_seconds": 0.0, "progress_grace": 20.0}},
                  command=[str(__import__("helpers").BIN / "isaacd-train")], extra_args=["agent.num_steps_per_env=8"])
    sp = supervisor_factory(cfg)
    wait_for(lambda: (sp.job("g")["iteration"] or 0) >= 6, 120, what="training progress")
    assert [t for t in trips(sp) if t["watchdog"] == "duty_cycle"] == []


def test_a_gpu_the_host_does_not_have_fails_the_job_once_with_the_reason(tmp_path, supervisor_factory):
    cfg = gpu_job(tmp_path, {"gpus": 2}, {})
    cfg.write_text(cfg.read_text().replace("gpus = [0]", "gpus = [0, 3]"))
    sp = supervisor_factory(cfg)
    j = wait_for(lambda: (x := sp.job("g"))["state"] == "failed" and x, 10, what="failed")
    assert "GPU 3 is not on this host" in j["state_reason"] and "GPUs here: 0 (" in j["state_reason"]
    assert [e for e in sp.events("g") if e["event"] == "started"] == []
    assert j["restarts"] == 0
