"""What a CUDA out-of-memory report says about the job's GPUs (daemon/gpu/oom_memory.py): whose memory fills them, and
what their memory did during the attempt, from a scripted GPU through the real sampler and status."""

from __future__ import annotations

import os

from isaacd.gpu import GpuSampler, ManualClock, ScriptedSource
from isaacd.gpu.oom_memory import MemoryHistory, oom_note
from isaacd.metrics.status import gpu_status
from isaacd.status.types import GpusStatus, JobStatus

GiB = 2**30
T0 = 1_700_000_000.0


def sampled(script: dict, seconds: list[float]) -> tuple[GpuSampler, MemoryHistory]:
    """Sample the script at these times (from T0), feeding the history as the supervisor's tick does."""
    clock = ManualClock(T0)
    sampler = GpuSampler(ScriptedSource(script, clock=clock), clock=clock)
    history = MemoryHistory()
    for t in seconds:
        clock.set(T0 + t)
        sampler.poll_fast()
        history.observe(sampler.snapshot())
        history.observe(sampler.snapshot())  # a tick that saw no new sample adds nothing
    return sampler, history


# a neighbour's pid that no process here can have (above the kernel's largest pid_max, 2**22): the note names a
# process by its /proc comm when one exists, and a CI run once had a real "python" as pid 4242
NOT_A_PID = 2**22 + 1
NEIGHBOUR = {"gpus": 1, "defaults": {"memory_used_bytes": 130 * GiB},
             "events": [{"t": 0, "gpu": 0, "processes": [{"pid": NOT_A_PID, "used_bytes": 120 * GiB},
                                                         {"pid": "self", "used_bytes": 9 * GiB}]}]}


def jobs_row(name: str = "cp", pids: tuple[int, ...] = (), **more: object) -> JobStatus:
    return JobStatus.from_json({"name": name, "pids": list(pids), "gpus": ["0"], **more})


def test_note_names_the_gpu_its_memory_and_who_holds_it():
    sampler, history = sampled(NEIGHBOUR, [0, 1])
    gpus = gpu_status(sampler.snapshot(), [jobs_row(pids=(os.getpid(),))])
    note = oom_note("cp", gpus, history, T0)
    assert note.gpu == (f"GPU 0 (NVIDIA H200) has 130.0 of 140.4 GiB in use: 120.0 GiB by pid {NOT_A_PID} "
                        "(not an isaacd job), 9.0 GiB by this job")
    facts = note.facts["gpus"][0]
    assert facts["gpu"] == "0" and facts["memory_used_bytes"] == 130 * GiB
    assert {p["pid"]: p["job"] for p in facts["processes"]} == {NOT_A_PID: None, os.getpid(): "cp"}


def test_the_jobs_warm_spare_is_the_jobs_memory_not_a_neighbours():
    script = {"gpus": 1, "events": [{"t": 0, "gpu": 0, "processes": [{"pid": 4242, "used_bytes": 1 * GiB}]}]}
    sampler, history = sampled(script, [0])
    row = jobs_row(spare={"state": "ready", "pid": 4242})
    note = oom_note("cp", gpu_status(sampler.snapshot(), [row]), history, T0)
    assert note.gpu.endswith(": 1.0 GiB by this job") and "not an isaacd job" not in note.gpu


def test_a_neighbour_in_our_pid_namespace_is_named():
    script = {"gpus": 1, "events": [{"t": 0, "gpu": 0, "processes": [{"pid": "self", "used_bytes": 5 * GiB}]}]}
    sampler, history = sampled(script, [0])
    note = oom_note("cp", gpu_status(sampler.snapshot(), [jobs_row()]), history, T0)
    with open(f"/proc/{os.getpid()}/comm") as fh:
        assert f"5.0 GiB by pid {os.getpid()} ({fh.read().strip()}, not an isaacd job)" in note.gpu


def test_trend_spans_the_attempt_only():
    script = {"gpus": 1, "events": [{"t": 0, "gpu": 0, "memory_used_bytes": 100 * GiB},
                                    {"t": 10, "gpu": 0, "memory_used_bytes": 20 * GiB},
                                    {"t": 310, "gpu": 0, "memory_used_bytes": 139 * GiB, "ramp": True},
                                    {"t": 320, "gpu": 0, "memory_used_bytes": 60 * GiB}]}
    sampler, history = sampled(script, [0, 5, 10, 160, 310, 320])
    note = oom_note("cp", gpu_status(sampler.snapshot(), [jobs_row()]), history, T0 + 10)  # attempt from t=10
    assert note.trend == ("GPU 0 memory in use went from 20.0 GiB to 60.0 GiB of 140.4 GiB over 5 min "
                          "(peak 139.0 GiB)")
    assert note.facts["gpus"][0]["trend"] == {"start_bytes": 20 * GiB, "peak_bytes": 139 * GiB,
                                              "end_bytes": 60 * GiB, "seconds": 310.0}


def test_one_sample_is_no_trend():
    sampler, history = sampled(NEIGHBOUR, [0])
    assert oom_note("cp", gpu_status(sampler.snapshot(), [jobs_row()]), history, T0).trend is None


def test_history_keeps_the_whole_span_at_lower_resolution_when_full():
    history = MemoryHistory(max_points=8)
    script = {"gpus": 1, "events": [{"t": 0, "gpu": 0, "memory_used_bytes": 1 * GiB},
                                    {"t": 100, "gpu": 0, "memory_used_bytes": 101 * GiB, "ramp": True}]}
    clock = ManualClock(T0)
    sampler = GpuSampler(ScriptedSource(script, clock=clock), clock=clock)
    for t in range(0, 101):
        clock.set(T0 + t)
        sampler.poll_fast()
        history.observe(sampler.snapshot())
    t = history.trend("0", T0 - 1)
    assert t is not None and t.end == 101 * GiB and t.seconds > 90 and len(history._points["0"]) <= 8


def test_collector_down_says_so():
    note = oom_note("cp", GpusStatus(up=False, reason="NVML Shared Library Not Found"), MemoryHistory(), T0)
    assert note.gpu == "no GPU memory figures (GPU collector down: NVML Shared Library Not Found)"


def test_a_job_on_no_gpu_says_isaacd_cannot_tell():
    sampler, history = sampled(NEIGHBOUR, [0])
    note = oom_note("cpu-job", gpu_status(sampler.snapshot(), [JobStatus(name="cpu-job", gpus=[])]), history, T0)
    assert note.gpu.startswith("no GPU memory figures for this job: none of this host's GPUs is assigned to it")
