"""The launcher shim's warm spare (``shim.py --isaacd-spare``) with real torch and real rsl-rl-lib.

A spare does the state-free start-up (torch, CUDA, ``rsl_rl.runners`` patched, named modules), reports
``spare_ready``, then waits for one JSON line on the FIFO ``ISAACD_SPARE_CONTROL``. On that go line it becomes the
trainer, exactly as ``shim.py ARGV`` would be. It exits 0 and writes nothing when its parent dies, on EOF, or on
SIGINT/SIGTERM while waiting.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from helpers import alive  # noqa: E402
from test_shim import SHIM, by, events, shim_env  # noqa: E402
from test_shim_snapshots import same, snapshots  # noqa: E402
from test_trainer import PY, QUICK, V23, checkpoints, procs, run, run_dirs, start, wait_for  # noqa: E402

__all__ = ["procs"]  # the fixture
JOB = ["-m", "isaacd_trainer"] + QUICK + ["--seed", "5"]


def spare_env(d: Path, **extra: str) -> dict:
    fifo = d / "control"
    os.mkfifo(fifo)
    env = shim_env(d / "spare.jsonl", ISAACD_SPARE_CONTROL=str(fifo), ISAACD_SPARE_DEVICE="cpu",
                   ISAACD_SPARE_PRELOAD="isaacd_trainer.train_v2,isaacd_trainer.runtime")
    env.update(extra)
    return env


def start_spare(d: Path, procs: list, **extra: str) -> subprocess.Popen:
    p = start([PY, SHIM, "--isaacd-spare"], d, env=spare_env(d, **extra), name="spare")
    procs.append(p)
    return p


def send(d: Path, msg: dict | bytes) -> None:
    data = msg if isinstance(msg, bytes) else (json.dumps(msg) + "\n").encode()
    fd = os.open(d / "control", os.O_WRONLY | os.O_NONBLOCK)  # the spare holds the read end open
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def ready(d: Path, p: subprocess.Popen, timeout: float = 90) -> dict:
    return wait_for(lambda: (by(events(d / "spare.jsonl"), "spare_ready") or [None])[0], timeout, "spare_ready", p)


def err(d: Path) -> str:
    return (d / "spare.err").read_text()[-3000:]


# ------------------------------------------------------------------------------------------------ go
@pytest.mark.timeout(240)
def test_a_spare_trains_exactly_like_a_cold_start(tmp_path, procs):
    spare, job, cold = tmp_path / "spare", tmp_path / "job", tmp_path / "cold"
    for d in (spare, job, cold):
        d.mkdir()
    p = start_spare(spare, procs)
    r = ready(spare, p)
    assert r["device"] == "cpu" and r["preload_seconds"] > 0 and r["rss_bytes"] > 50e6 and "preload_errors" not in r
    assert r["rsl_rl_version"]
    time.sleep(1.5)  # waiting is quiet: nothing in the job's directory, only spare_ready on the spare's file
    assert list(job.iterdir()) == [] and [e["event"] for e in events(spare / "spare.jsonl")] == ["spare_ready"]
    argv = JOB + ["--max_iterations", "4"]
    send(spare, {"argv": argv, "env": {"ISAACD_SHIM_EVENTS": str(job / "ev.jsonl"), "ISAACD_SNAPSHOT_KEEP": "5"},
                 "cwd": str(job)})
    assert p.wait(120) == 0, err(spare)
    sev = events(spare / "spare.jsonl")
    assert [e["event"] for e in sev] == ["spare_ready", "spare_go"]
    assert sev[1]["argv"] == argv and sev[1]["cwd"] == str(job) and sev[1]["waited_seconds"] >= 1.5
    jev = events(job / "ev.jsonl")
    names = [e["event"] for e in jev]
    assert names[:3] == ["shim_started", "runner_started", "first_iteration"] and names[-1] == "learn_finished"
    assert jev[0]["script"] == "isaacd_trainer" and jev[0]["argv"] == argv[1:] and jev[0]["pid"] == p.pid
    # go -> first iteration, measurable from the two files
    assert 0 < by(jev, "first_iteration")[0]["time"] - sev[1]["time"] < 30
    (rd,) = run_dirs(job)
    assert by(jev, "runner_started")[0]["run_dir"] == str(rd)
    assert checkpoints(rd) == [0, 3] and snapshots(rd) == [0, 1, 2]  # the go env applies (KEEP=5)
    # the same job started cold through the shim: the same training, bit for bit
    c = run([PY, SHIM] + argv + [], cold, env=shim_env(cold / "ev.jsonl"))
    assert c.returncode == 0, c.stderr[-3000:]
    import torch

    (crd,) = run_dirs(cold)
    same(torch.load(rd / "model_3.pt", weights_only=False), torch.load(crd / "model_3.pt", weights_only=False))


@pytest.mark.timeout(240)
def test_a_spare_resumes_from_a_snapshot_by_path(tmp_path, procs):
    """The go line of a resume: Isaac Lab 2.3 flags naming a snapshot; the run goes on from its iteration."""
    first, spare = tmp_path / "first", tmp_path / "spare"
    first.mkdir(), spare.mkdir()
    r = run([PY, SHIM] + V23[1:] + QUICK + ["--max_iterations", "6"], first, env=shim_env(first / "ev.jsonl"))
    assert r.returncode == 0, r.stderr[-3000:]
    (rd,) = run_dirs(first)
    assert snapshots(rd) == [3, 4]
    p = start_spare(spare, procs)
    ready(spare, p)
    time.sleep(1.0)  # a new run dir name (seconds resolution)
    argv = ["-m", "isaacd_trainer"] + QUICK + ["--max_iterations", "2", "--resume", "--load_run", f"^{rd.name}$",
                                               "--checkpoint", r"^isaacd_snapshot_4\.pt$"]
    send(spare, {"argv": argv, "env": {"ISAACD_SHIM_EVENTS": str(first / "ev2.jsonl")}, "cwd": str(first)})
    assert p.wait(120) == 0, err(spare)
    evs = events(first / "ev2.jsonl")
    (loaded,) = by(evs, "checkpoint_loaded")
    assert loaded["path"] == str(rd / "isaacd_snapshot_4.pt") and loaded["iteration"] == 4
    assert by(evs, "runner_started")[0]["start_iteration"] == 4
    assert by(evs, "first_iteration")[0]["iteration"] == 4 and by(evs, "learn_finished")[0]["iteration"] == 5


# ------------------------------------------------------------------------------------------------ never train unasked
@pytest.mark.timeout(120)
def test_a_spare_dies_with_its_parent(tmp_path):
    """The supervisor (here: a stand-in parent) dies by SIGKILL: its spare notices within ~1 s and exits."""
    env = spare_env(tmp_path)
    parent = subprocess.Popen(
        [PY, "-c", "import subprocess, sys, time\n"
                   f"p = subprocess.Popen([{PY!r}, {SHIM!r}, '--isaacd-spare'])\n"
                   "print(p.pid, flush=True)\ntime.sleep(600)\n"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        wait_for(lambda: by(events(tmp_path / "spare.jsonl"), "spare_ready"), 90, "spare_ready")
        parent.kill()
        parent.wait(10)
        # it exits on its own (it polls its parent; ~1 s here, a figure not asserted: a loaded host is slower)
        wait_for(lambda: not alive(pid), 30, "the orphaned spare to exit")
        assert by(events(tmp_path / "spare.jsonl"), "spare_exited")[0]["reason"] == "parent exited"
        assert sorted(os.listdir(tmp_path)) == ["control", "spare.jsonl"]
    finally:
        parent.kill()
        if alive(locals().get("pid", -1)):
            os.kill(pid, signal.SIGKILL)


def _catches(pid: int, sig: int) -> bool:
    """The process has a handler for ``sig`` (SigCgt in /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            cgt = next(line for line in f if line.startswith("SigCgt:")).split()[1]
    except (OSError, StopIteration):
        return False
    return bool(int(cgt, 16) >> (sig - 1) & 1)


@pytest.mark.timeout(120)
def test_eof_signals_and_a_bad_go_line(tmp_path, procs):
    eof, sigint, sigterm, early, bad = (tmp_path / n for n in ("eof", "sigint", "sigterm", "early", "bad"))
    for d in (eof, sigint, sigterm, early, bad):
        d.mkdir()
    pe, pi, pt, pb = (start_spare(d, procs) for d in (eof, sigint, sigterm, bad))
    for d, p in ((eof, pe), (sigint, pi), (sigterm, pt), (bad, pb)):
        ready(d, p)
    send(eof, b"")  # the daemon opens the FIFO and closes it without a line: go away
    pi.send_signal(signal.SIGINT)
    pt.send_signal(signal.SIGTERM)
    send(bad, {"argv": [], "cwd": str(bad)})
    assert pe.wait(10) == 0 and pi.wait(10) == 0 and pt.wait(10) == 0, (err(eof), err(sigint), err(sigterm))
    assert pb.wait(10) == 2
    for d, reason in ((eof, "eof"), (sigint, "SIGINT"), (sigterm, "SIGTERM")):
        assert [(e["event"], e.get("reason")) for e in events(d / "spare.jsonl")] == [("spare_ready", None),
                                                                                      ("spare_exited", reason)]
        assert sorted(os.listdir(d)) == ["control", "spare.err", "spare.jsonl", "spare.out"]
        assert (d / "spare.out").read_text() == ""
    assert "bad go message" in by(events(bad / "spare.jsonl"), "spare_failed")[0]["error"]
    # a SIGTERM while it still boots (importing torch): exits 0 at once, before spare_ready
    pr = start_spare(early, procs)
    wait_for(lambda: _catches(pr.pid, signal.SIGTERM), 30, "the spare's SIGTERM handler", pr)
    pr.send_signal(signal.SIGTERM)
    assert pr.wait(10) == 0
    assert "spare_ready" not in [e["event"] for e in events(early / "spare.jsonl")]
