"""`isaacd status`'s GPU table on a host whose jobs the queue placed (issue 37): a scripted GPU through the real
sampler, `gpu_status` (metrics/status.py) and the render (cli/render.py)."""

from __future__ import annotations

from isaacd.cli.render import format_gpus
from isaacd.gpu import GpuSampler, ManualClock, ScriptedSource
from isaacd.metrics.status import gpu_status
from isaacd.status.types import JobStatus, Status

GiB = 2**30


def placed(name: str, gpus: list[int], memory: int | None, **row: object) -> JobStatus:
    return JobStatus.from_json({"name": name, "state": "running", "queue": {"placement": gpus, "memory_bytes": memory},
                                **row})


def table(script: dict, jobs: list[JobStatus]) -> tuple[list[str], dict]:
    clock = ManualClock(1_700_000_000.0)
    sampler = GpuSampler(ScriptedSource(script, clock=clock), clock=clock)
    sampler.poll_fast()
    gpus = gpu_status(sampler.snapshot(), jobs)
    # through the JSON `isaacd status` reads, as the client sees it
    gpus = Status.from_json({"jobs": [], "gpus": gpus.to_json()}).gpus
    return format_gpus(gpus).splitlines(), {d.index: d for d in gpus.devices}


def test_jobs_the_queue_placed_show_on_their_gpus_with_the_memory_they_were_given():
    """Nothing of theirs on NVML (trainers on the CPU, a scripted host): the JOBS column names them all the same, and
    the memory column tells what NVML sees used from what the queue gave."""
    script = {"gpus": 3, "defaults": {"memory_used_bytes": 0},
              "events": [{"t": 0, "gpu": 2, "memory_used_bytes": 100 * GiB,
                          "processes": [{"pid": 4242, "used_bytes": 100 * GiB}]}]}
    lines, devices = table(script, [placed("anymal", [0], 24 * GiB), placed("g1", [0], 12 * GiB),
                                    placed("gang", [1], None), JobStatus(name="waiting", state="queued")])
    assert lines[0].split() == ["GPU", "MODEL", "TEMP", "UTIL", "POWER", "MEM", "JOBS", "HEALTH"]
    row = {ln.split()[0]: ln for ln in lines[1:]}
    assert "used 0/140 GiB, asked 36 GiB" in row["0"] and "anymal,g1" in row["0"]
    assert "used 0/140 GiB, asked 140 GiB" in row["1"] and " gang " in row["1"]  # a whole GPU: all of it
    assert "used 100/140 GiB" in row["2"] and "asked" not in row["2"]  # another team's process: no job, nothing asked
    assert row["2"].split()[-2:] == ["-", "ok"]
    assert (devices["0"].placed, devices["0"].asked_bytes, devices["0"].jobs) == (("anymal", "g1"), 36 * GiB, ())
    # the columns line up: JOBS starts at one place on every row
    starts = {ln.index(j) for ln, j in zip(lines, ("JOBS", "anymal", "gang", "-  "))}
    assert len(starts) == 1, lines
