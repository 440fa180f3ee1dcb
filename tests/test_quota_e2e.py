"""Issue 32, a quota end to end: a real `isaacd run` (root) on a scripted 4-GPU host (`[gpu] source = "scripted"`, as
tests/test_queue_e2e.py), a real Unix user made here (useradd; removed afterwards; a unique name), whose job files in
jobs_dir are hers (chowned to her), so the jobs are hers. `[access.users.<her>] gpus = 2`.

She has three jobs asking one whole GPU each: two start, the third waits in the queue with her quota as the reason
although two GPUs are free, and does not block root's job submitted after it, which starts. When one of hers ends
(`isaacd cancel`, as `scancel` ends a Slurm job), the third starts on the GPU it gave back. The jobs are `sleep`
commands: the queue places them as it places trainers, they cost nothing on a 2-core machine, end only when told,
and run the same whether isaacd runs them as root or as their owner.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from helpers import SupervisorProc, wait_for, write_config

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                 reason="needs root and useradd: the test makes a real Unix user who owns the jobs")]

QUIET = "".join(f"\n[jobs.watchdogs.{w}]\nenabled = false\n" for w in (
    "no_progress", "duty_cycle", "loss_stagnation", "reward_plateau", "divergence", "gpu_temperature", "xid"))


@pytest.fixture
def base():
    """A directory every user may traverse (pytest's tmp_path lies under a root-only /tmp/pytest-of-root), so a
    trainer that runs as its owner reaches its log_root."""
    d = Path(tempfile.mkdtemp(prefix="isaacd-i32q-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def alice():
    name = f"i32q{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/usr/sbin/nologin", "-U", name], check=True,
                   capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


def job_text(name: str, log_root: Path) -> str:
    # `command` runs with the trainer's flags after it: sh -c takes them as its $0, $1... and ignores them
    fields = {"gpus": 1, "device": "cpu", "log_root": str(log_root), "spare": False, "stop_timeout": 10.0,
              "command": ["/bin/sh", "-c", "exec sleep 1000"]}
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in fields.items())
    return f'[[jobs]]\nname = "{name}"\n{body}\n{QUIET}'


def hand_to(path: Path, text: str, user: str) -> None:
    """A job file of `user`'s in jobs_dir: written beside it under a hidden name (never read), chowned, renamed in."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    shutil.chown(tmp, user, user)
    os.replace(tmp, path)


def test_at_her_gpu_quota_her_next_job_waits_blocks_nobody_and_starts_when_one_of_hers_ends(base, alice):
    (base / "gpu.json").write_text(json.dumps({"gpus": 4, "events": []}))
    cfg = write_config(base, "", extra=f"""
        [queue]
        min_run_seconds = 1

        [access]
        areas = ["{base}/{{user}}"]

        [access.users.{alice}]
        gpus = 2
        """)
    cfg.write_text("jobs = []  # every job comes from jobs.d\n" + cfg.read_text().replace(
        '[gpu]\nsource = "none"\n', '[gpu]\nsource = "scripted"\nscript = "gpu.json"\nsample_interval = 0.2\n').replace(
        '[supervisor]\n', '[supervisor]\njobs_dir = "jobs.d"\n'))
    area = base / alice
    area.mkdir()
    shutil.chown(area, alice, alice)
    jobs_dir = base / "jobs.d"
    jobs_dir.mkdir()
    for name in ("a1", "a2", "a3"):
        hand_to(jobs_dir / f"{name}.toml", job_text(name, area / name), alice)

    sp = SupervisorProc(cfg).start()
    try:
        for name in ("a1", "a2"):
            wait_for(lambda: sp.job(name)["queue"]["placement"], 60, what=f"{name} placed")
        assert {sp.job(n)["owner"] for n in ("a1", "a2", "a3")} == {alice}
        waiting = wait_for(lambda: (x := sp.job("a3"))["queue"]["reason"] and x, 30, what="a3's reason")
        assert waiting["state"] == "queued"
        assert waiting["queue"]["reason"].startswith(f"{alice}'s quota: 2 of 2 GPUs in use (this job needs 1)")
        assert f"{alice}'s quota: 2 of 2 GPUs in use" in sp.cli("queue").stdout

        # root's job, submitted after hers: her waiting job blocks nobody, it starts on a free GPU
        submitted = base / "submit" / "r1.toml"
        submitted.parent.mkdir()
        submitted.write_text(job_text("r1", base / "root-logs"))
        sp.cli("submit", str(submitted))
        placed = wait_for(lambda: sp.job("r1")["queue"]["placement"], 60, what="root's r1 placed")
        held = {n: sp.job(n)["queue"]["placement"] for n in ("a1", "a2")}
        assert not set(placed) & {*held["a1"], *held["a2"]} and sp.job("r1")["queue"]["backfill"] is False
        assert sp.job("a3")["state"] == "queued"

        # one of hers ends: a3 starts, on the GPU a1 gave back (the only one free)
        sp.cli("cancel", "a1")
        wait_for(lambda: "a1" not in [j["name"] for j in sp.status()["jobs"]], 60, what="a1 gone")
        got = wait_for(lambda: sp.job("a3")["queue"]["placement"], 30, what="a3 placed")
        assert got == held["a1"] and sp.job("a3")["state"] in ("starting", "running")
        assert [e["gpus"] for e in sp.events("a3") if e["event"] == "placed"] == [held["a1"]]
    finally:
        sp.stop()
