"""MIG instances as places of the host's queue, end to end (issue 42): a real `isaacd run`, the real built-in trainer
and CLI, on a scripted mixed host (the GPU source interface NVML implements, `[gpu] source = "scripted"`): GPU 0 an
H200 in MIG mode with two 1g.18gb instances, GPU 1 an H200 not in MIG mode that another team's process fills.

Two jobs asking 8 GiB each land on the two instances (one each: a job on an instance never shares it), and each
trainer's own environment, read from /proc, names its own instance as CUDA needs it: CUDA_VISIBLE_DEVICES=MIG-<uuid>.
A gang of two ranks is refused by `isaacd submit`, and written into jobs_dir by hand it waits, saying that ranks run
only on GPUs not in MIG mode. The trainers train on the CPU
(device = "cpu") while the queue places them on the scripted instances.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from helpers import SupervisorProc, wait_for
from test_queue_e2e import GiB, host, job_file

pytestmark = pytest.mark.slow

# MIG devices as NVML lists them (scripted/nvml.py: the key "p:j", a MIG-... UUID per instance)
UUIDS = {"0:0": "MIG-0a1b2c3d-0000-5000-8000-000000000001", "0:1": "MIG-0a1b2c3d-0000-5000-8000-000000000002"}


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").partition("=")[::2] for item in raw if item)


def test_two_jobs_on_two_instances_each_told_its_own_mig_uuid(tmp_path, supervisor_factory):
    cfg = host(tmp_path, free=(0,))
    (tmp_path / "gpu.json").write_text(json.dumps({
        "gpus": [{"index": 0}, {"index": 1},
                 {"index": 0, "mig": True, "parent": 0, "uuid": UUIDS["0:0"], "model": "NVIDIA H200 MIG 1g.18gb"},
                 {"index": 1, "mig": True, "parent": 0, "uuid": UUIDS["0:1"], "model": "NVIDIA H200 MIG 1g.18gb"}],
        "events": [{"t": 0, "gpu": 1, "memory_used_bytes": 135 * GiB,
                    "processes": [{"pid": 4242, "used_bytes": 135 * GiB}]}]}))
    sp: SupervisorProc = supervisor_factory(cfg)
    for name in ("a", "b"):
        said = sp.cli("submit", str(job_file(tmp_path, name, gpu_memory="8GiB", max_iterations=100000))).stdout
        assert "placed on MIG 0:" in said, said
    gang_file = job_file(tmp_path, "gang", gpu_memory=None, gpus=2, device="cuda")
    refused = sp.cli("submit", str(gang_file), check=False)  # it can never run here: refused, saying why
    assert refused.returncode == 1 and '.gpus: needs 2 GPUs (whole); several ranks run only on GPUs not in MIG mode' \
        in refused.stderr, refused.stderr
    (tmp_path / "jobs.d" / "gang.toml").write_text(gang_file.read_text())  # written by hand: it waits, saying so
    sp.cli("reload")
    assert "gang" in [j["name"] for j in sp.status()["jobs"]]  # shown at once: the reload published it

    rows = wait_for(lambda: all((r := sp.job(n))["pid"] and r["state"] in ("starting", "running") for n in "ab")
                    and {n: sp.job(n) for n in "ab"}, 30, what="both trainers started")
    places = {n: rows[n]["queue"]["placement"] for n in "ab"}
    assert sorted(p for ps in places.values() for p in ps) == ["0:0", "0:1"], places  # one instance each
    for n in "ab":
        (place,) = places[n]
        env = environ(rows[n]["pid"])  # what the launch gave the trainer's own process
        assert env.get("CUDA_VISIBLE_DEVICES") == UUIDS[place], (n, place, env.get("CUDA_VISIBLE_DEVICES"))

    # the reload's answer published it (supervisor.reload); why it waits is the queue's next pass: a tick later
    gang = wait_for(lambda: (g := sp.job("gang"))["queue"] and "several ranks" in (g["queue"]["reason"] or "") and g,
                    10, what="the gang queued, saying why")
    assert gang["state"] == "queued" and "several ranks run only on GPUs not in MIG mode" in gang["queue"]["reason"]
    queue = sp.cli("queue").stdout
    assert "gang" in queue and "0:0" in queue and "0:1" in queue, queue
    status = sp.cli("status").stdout
    assert "queue: MIG 0:" in status and "the instance held whole" in status, status
    # the GPU table: each instance its own row, by its profile, with the job the queue placed there
    table = {line.split()[0]: line for line in status.splitlines() if re.match(r"\d+(:\d+)?\s", line)}
    for n in "ab":
        (place,) = places[n]
        assert "MIG 1g.18gb" in table[place] and n in table[place].split(), table
    for n in "ab":
        os.kill(rows[n]["pid"], 0)  # still alive: the supervisor's stop at teardown ends them
