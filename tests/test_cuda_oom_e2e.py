"""CUDA out of memory end to end (issue 23): a real `isaacd run`, the real built-in trainer and CLI.

The trainer's fault flags raise a real torch.OutOfMemoryError with torch's own message, uncaught (Python prints
the traceback, Hydra its trailer, exit 1), at start-up when num_envs is above what the "GPU" fits, or after some
iterations. The GPU it runs short on (and the neighbour holding its memory) cannot be had on this machine: it enters
through the GPU source interface NVML implements (`[gpu] source = "scripted"`), never by patching internals. The
job claims GPU 0 and trains on the CPU.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import builtin_job, wait_for, write_config

pytestmark = pytest.mark.slow

GiB = 2**30
FAST = ["agent.num_steps_per_env=8"]
QUIET = "".join(f"\n[jobs.watchdogs.{w}]\nenabled = false\n" for w in (
    "no_progress", "duty_cycle", "loss_stagnation", "reward_plateau", "divergence", "gpu_temperature", "xid"))
# an H200 whose memory a process that is no isaacd job holds most of
NEIGHBOUR = {"gpus": 1, "defaults": {"memory_used_bytes": 131 * GiB},
             "events": [{"t": 0, "gpu": 0, "processes": [{"pid": 4242, "used_bytes": 120 * GiB}]}]}


def oom_config(tmp_path: Path, script: dict, **job) -> Path:  # noqa: ANN003
    (tmp_path / "gpu.json").write_text(json.dumps(script))
    cfg = write_config(tmp_path, builtin_job("cp", gpus=[0], **job) + QUIET)
    cfg.write_text(cfg.read_text().replace(
        '[gpu]\nsource = "none"\n', '[gpu]\nsource = "scripted"\nscript = "gpu.json"\nsample_interval = 0.2\n'))
    return cfg


def events(sp, name: str) -> list[dict]:  # noqa: ANN001
    return [e for e in sp.events("cp") if e["event"] == name]


def argv_envs(started: dict) -> int:
    argv = started["argv"]
    return int(argv[argv.index("--num_envs") + 1])


def test_startup_oom_is_retried_once_then_fails_with_one_line(tmp_path, supervisor_factory):
    sp = supervisor_factory(oom_config(tmp_path, NEIGHBOUR, num_envs=64,
                                       extra_args=[*FAST, "--fault_cuda_oom_above_envs", "32"]))
    j = wait_for(lambda: (x := sp.job("cp"))["state"] == "failed" and x, 120, what="failed")
    assert len(events(sp, "started")) == 2  # the first try and one retry, not max_restarts of them
    exited = events(sp, "exited")
    assert [e["code"] for e in exited] == [1, 1]  # what Python does with an uncaught exception
    assert exited[0]["description"].startswith("exited with code 1: torch.OutOfMemoryError: CUDA out of memory. "
                                               "Tried to allocate 128.00 MiB. GPU 0 has a total capacity of 80.00 GiB")
    assert [e["phase"] for e in events(sp, "cuda_oom")] == ["startup", "startup"]
    line = j["state_reason"]
    assert line.startswith("CUDA out of memory at start-up, twice with num_envs = 64 (torch.OutOfMemoryError: "
                           "CUDA out of memory. Tried to allocate 128.00 MiB.")
    assert re.search(r"GPU 0 \(NVIDIA H200\) has 131\.0 of 140\.4 GiB in use: 120\.0 GiB by pid 4242 \(.*not an "
                     r"isaacd job\)", line), line
    assert "Fix: free the GPU memory other processes hold, lower num_envs, or let isaacd step it down: [jobs.oom] " \
           "step_down = 0.5" in line and line.endswith("then `isaacd start cp`")
    assert (j["restarts_by_reason"], j["cuda_ooms"]) == ({"cuda_oom": 1}, {"startup": 2})
    out = sp.cli("status").stdout
    assert f"  cp: {line}" in out.splitlines()


def test_startup_oom_steps_num_envs_down_resumes_and_restart_goes_back(tmp_path, supervisor_factory):
    sp = supervisor_factory(oom_config(tmp_path, NEIGHBOUR, num_envs=1024, max_iterations=100000,
                                       oom={"step_down": 0.5, "min_num_envs": 256},
                                       extra_args=[*FAST, "--fault_cuda_oom_above_envs", "300"]))
    j = wait_for(lambda: (x := sp.job("cp"))["state"] == "running" and x["checkpoint"] and x, 240,
                 what="training at 256 envs with a checkpoint")
    assert [argv_envs(e) for e in events(sp, "started")] == [1024, 512, 256]
    assert [(e["from"], e["to"]) for e in events(sp, "num_envs_stepped_down")] == [(1024, 512), (512, 256)]
    assert (j["num_envs"], j["num_envs_configured"], j["cuda_ooms"]) == (256, 1024, {"startup": 2})
    out = sp.cli("status").stdout
    assert "256 of 1024" in out and "cp: num_envs 256 in use of 1024 configured" in out
    assert "num_envs_stepped_down" in sp.cli("events", "cp").stdout

    sp.cli("restart", "cp")  # back to the configured 1024: the GPU still fits 300, so down again, from the checkpoint
    wait_for(lambda: len(events(sp, "started")) == 6 and sp.job("cp")["state"] == "running", 240,
             what="stepped down again after the restart")
    started = events(sp, "started")[3:]
    assert [argv_envs(e) for e in started] == [1024, 512, 256]
    assert events(sp, "num_envs_restored")[0]["to"] == 1024
    assert all(e["resume_from"] is not None for e in started)  # each relaunch resumes the run
    assert sp.job("cp")["restarts_by_reason"] == {"cuda_oom": 4, "operator": 1}


def test_repeated_training_oom_restarts_from_the_checkpoint_and_reports_the_memory_trend(tmp_path,
                                                                                          supervisor_factory):
    rising = {"gpus": 1, "events": [{"t": 0, "gpu": 0, "memory_used_bytes": 20 * GiB},
                                    {"t": 600, "gpu": 0, "memory_used_bytes": 140 * GiB, "ramp": True}]}
    sp = supervisor_factory(oom_config(tmp_path, rising, num_envs=64, max_iterations=100000,
                                       extra_args=[*FAST, "--fault_cuda_oom_after_iterations", "4"]))
    wait_for(lambda: len(events(sp, "restart_scheduled")) >= 2, 240, what="two OOMs after training")
    first, second = events(sp, "restart_scheduled")[:2]
    assert first["reason"].startswith("CUDA out of memory after training ran, num_envs = 64: exited with code 1: "
                                      "torch.OutOfMemoryError")
    assert re.search(r"2 times in a row; GPU 0 memory in use went from \d+\.\d GiB to \d+\.\d GiB of 140\.4 GiB over "
                     r"\d+ s \(peak \d+\.\d GiB\)", second["reason"]), second["reason"]
    assert [e["phase"] for e in events(sp, "cuda_oom")][:2] == ["training", "training"]
    resumed = events(sp, "started")[1]
    assert resumed["resume_from"] is not None and argv_envs(resumed) == 64  # no step-down after training ran
