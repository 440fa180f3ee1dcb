"""The host's queue in /metrics (issue 31, metrics/queue_collector.py): a hand-built status, as the supervisor
publishes it, and a scripted 4-GPU host; the assertions read the exposition a Prometheus would scrape."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from isaacd.gpu import GpuSampler, ManualClock, ScriptedSource
from isaacd.metrics.collector import IsaacdCollector
from isaacd.status.types import JobStatus, QueueStatus, Status

GiB = 2**30
NOW = 1_700_000_000.0
TOTAL = 80 * GiB


def host():
    """4 GPUs of 80 GiB and a MIG device of GPU 3; NVML's used memory: GPU 0 20 GiB (less than the queue gave out
    there), GPU 1 79 GiB, GPU 2 nothing, GPU 3 50 GiB (a pinned job's)."""
    clock = ManualClock(NOW)
    script = {"gpus": [{"index": 0}, {"index": 1}, {"index": 2}, {"index": 3}, {"index": 0, "mig": True, "parent": 3}],
              "defaults": {"memory_total_bytes": TOTAL, "memory_used_bytes": 0},
              "events": [{"t": 0, "gpu": 0, "memory_used_bytes": 20 * GiB},
                         {"t": 0, "gpu": 1, "memory_used_bytes": 79 * GiB},
                         {"t": 0, "gpu": 3, "memory_used_bytes": 50 * GiB}]}
    sampler = GpuSampler(ScriptedSource(script, clock=clock), clock=clock)
    sampler.poll_fast()
    return sampler


def queue(**kw) -> QueueStatus:  # noqa: ANN003
    return QueueStatus(**{"submitted_at": NOW - 3600, **kw})


STATUS = Status(jobs=(
    # two waiting at priority 10: one since its submission 40 min ago, one preempted 2 min ago (submitted a day ago:
    # its place in the queue, not its wait)
    JobStatus("urgent", state="queued", state_since=NOW - 30, queue=queue(priority=10, submitted_at=NOW - 2400,
                                                                            memory_bytes=30 * GiB)),
    JobStatus("bumped", state="queued", state_since=NOW - 120, queue=queue(priority=10, submitted_at=NOW - 86400,
                                                                           memory_bytes=30 * GiB, preemptions=1)),
    JobStatus("sweep", state="queued", state_since=NOW - 5, queue=queue(priority=0, submitted_at=NOW - 5,
                                                                        gpus_asked=2)),
    # placed by memory: 12 + 16 GiB on GPU 0
    JobStatus("cartpole", state="running", queue=queue(memory_bytes=12 * GiB, placement=(0,), placed_at=NOW - 60,
                                                       preemptions=3)),
    JobStatus("anymal", state="starting", queue=queue(memory_bytes=16 * GiB, placement=(0,), preemptible=False,
                                                      priority=5)),
    # a whole GPU (gpus = 1 without gpu_memory): GPU 1 is all given out
    JobStatus("g1", state="running", queue=queue(placement=(1,), priority=5)),
    # names its GPU: not the queue's (its 50 GiB are NVML's used memory on GPU 3)
    JobStatus("pinned", state="running", gpus=["3"]),
))


def scrape(status: Status | dict, sampler: GpuSampler | None) -> dict[str, dict[tuple, float]]:
    """name -> {sorted label items: value}, from the text a scrape returns."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(IsaacdCollector(lambda: status, sampler, clock=lambda: NOW))
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def by(series: dict[tuple, float], label: str) -> dict[str, float]:
    return {dict(k)[label]: v for k, v in series.items()}


def test_waiting_jobs_by_priority_and_how_long_each_has_waited():
    got = scrape(STATUS, host())
    assert by(got["isaacd_queue_jobs"], "priority") == {"10": 2, "0": 1, "5": 0}, \
        "every priority in use, 0 where nothing waits"
    assert got["isaacd_queue_wait_seconds"] == {
        (("job", "urgent"), ("priority", "10")): 2400,  # since its submission
        (("job", "bumped"), ("priority", "10")): 120,  # since its requeue, not its submission a day ago
        (("job", "sweep"), ("priority", "0")): 5,
    }, "only the waiting jobs, each named, with its priority"


def test_preemptions_count_from_zero_for_every_job_the_queue_places():
    got = scrape(STATUS, host())
    assert by(got["isaacd_job_preemptions_total"], "job") == {
        "urgent": 0, "bumped": 1, "sweep": 0, "cartpole": 3, "anymal": 0, "g1": 0}
    info = {dict(k)["job"]: (dict(k)["priority"], dict(k)["preemptible"]) for k in got["isaacd_job_queue_info"]}
    assert info["anymal"] == ("5", "false") and info["cartpole"] == ("0", "true")
    assert "pinned" not in info, "a job that names its GPUs is not the queue's"


def test_allocated_and_idle_memory_per_gpu():
    got = scrape(STATUS, host())
    alloc, idle = by(got["isaacd_gpu_memory_allocated_bytes"], "gpu"), by(got["isaacd_gpu_memory_idle_bytes"], "gpu")
    # GPU 3 is in MIG mode (issue 42): its instance 3:0 is the place, with a row of its own; GPU 3 has none (its
    # memory would count twice in a sum)
    assert alloc == {"0": 28 * GiB, "1": TOTAL, "2": 0, "3:0": 0}
    # GPU 0: 28 GiB asked, 20 GiB used so far: the asks count; GPU 1: a whole-GPU job; 3:0: nothing on it
    # (3:0 is a scripted "1g.18gb" instance: its own memory, 2 of 8 slices of an 80 GiB GPU)
    assert idle == {"0": TOTAL - 28 * GiB, "1": 0, "2": TOTAL, "3:0": TOTAL // 4}
    # the identity labels of every GPU series, so it joins isaacd_gpu_memory_total_bytes without on()
    labels = {k for k in got["isaacd_gpu_memory_idle_bytes"]}
    assert labels == {k for k in got["isaacd_gpu_memory_total_bytes"] if dict(k)["gpu"] != "3"}


def test_memory_used_beyond_the_asks_is_not_idle():
    over = replace(STATUS, jobs=tuple(replace(j, queue=replace(j.queue, memory_bytes=4 * GiB))
                                      if j.name in ("cartpole", "anymal") else j for j in STATUS.jobs))
    idle = by(scrape(over, host())["isaacd_gpu_memory_idle_bytes"], "gpu")
    assert idle["0"] == TOTAL - 20 * GiB, "8 GiB asked but 20 GiB used on GPU 0: NVML's used memory counts"


def test_the_json_status_scrapes_the_same():
    sampler = host()
    assert scrape(STATUS.to_json(), sampler) == scrape(STATUS, sampler)


def test_no_queue_no_gpus():
    plain = Status(jobs=(JobStatus("pinned", state="running", gpus=["3"]),))
    got = scrape(plain, host())
    assert not {"isaacd_queue_jobs", "isaacd_queue_wait_seconds", "isaacd_job_preemptions_total"} & set(got)
    assert by(got["isaacd_gpu_memory_allocated_bytes"], "gpu") == dict.fromkeys(["0", "1", "2", "3:0"], 0)
    # without a GPU collector the queue's job series stay, the GPU memory ones go (never a guess)
    got = scrape(STATUS, None)
    assert "isaacd_gpu_memory_allocated_bytes" not in got and "isaacd_gpu_memory_idle_bytes" not in got
    assert len(got["isaacd_queue_wait_seconds"]) == 3


@pytest.mark.parametrize("odd", [{"priority": "high"}, {"memory_bytes": "12GiB"}, {"placement": [[0]]}])
def test_an_odd_row_costs_only_itself(odd):
    raw = STATUS.to_json()
    row = next(j for j in raw["jobs"] if j["name"] == "cartpole")
    row["queue"] = {**row["queue"], **odd}
    got = scrape(raw, host())
    assert by(got["isaacd_job_preemptions_total"], "job") == {
        "urgent": 0, "bumped": 1, "sweep": 0, "cartpole": 3, "anymal": 0, "g1": 0}
    assert by(got["isaacd_gpu_memory_allocated_bytes"], "gpu")["1"] == TOTAL, "the other jobs' GPUs are all there"
    assert by(got["isaacd_gpu_memory_allocated_bytes"], "gpu")["0"] in (16 * GiB, 28 * GiB)
    assert by(got["isaacd_scrape_errors_total"], "source") == {"status": 0, "gpu": 0}
