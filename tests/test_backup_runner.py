"""The runner's side of the backup (issue 22), on a fake clock and runtime (tests/job_fakes.py) with a real
file:// target and the real keeper threads: a launch with no checkpoint on disk waits for the bucket's (the
supervisor goes on), a local checkpoint wins over the bucket, a stop while the fetch runs starts nothing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from backup_fakes import fake_checkpoint
from job_fakes import FakeClock, FakeRuntime

from isaacd.backup import keeper as keeper_module
from isaacd.config.backup import BackupConfig
from isaacd.backup.keeper import JobBackup
from isaacd.backup.uploader import Run
from isaacd.config.schema import parse_config
from isaacd.jobs.messages import Stop
from isaacd.jobs.model import Origin
from isaacd.runner import JobRunner
from isaacd.observations.checkpoints import RSL_RL_LAYOUT
from isaacd.history.store import StateStore

RUN = "2026-01-01_00-00-00_cp"


@pytest.fixture
def slow_store(monkeypatch):
    """The bucket answers when the test says so (a store across a slow link): set() lets the fetch finish."""
    gate = threading.Event()
    real = keeper_module.restore_newest

    def gated(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        assert gate.wait(30), "the test never let the fetch finish"
        return real(*args, **kwargs)

    monkeypatch.setattr(keeper_module, "restore_newest", gated)
    yield gate
    gate.set()


def setup(tmp_path: Path) -> tuple[JobRunner, FakeClock, FakeRuntime]:
    bucket = tmp_path / "bucket"
    lost = tmp_path / "lost-disk" / RUN  # where an earlier host trained: gone, but in the bucket
    for i in (2, 4):
        fake_checkpoint(lost / f"model_{i}.pt", i)
    first = JobBackup(BackupConfig(url=f"file://{bucket}"), "cp", RSL_RL_LAYOUT)
    first.uploader.set_runs([Run(lost)])
    first.uploader.one_pass()
    cfg = parse_config(f'[[jobs]]\nname = "cp"\ncommand = ["sleep", "600"]\nmax_iterations = 100\n'
                       f'log_root = "logs"\n[jobs.backup]\nurl = "file://{bucket}"\n', "t.toml", tmp_path).jobs[0]
    clock, rt = FakeClock(), FakeRuntime()
    r = JobRunner(cfg, rt, StateStore(tmp_path / "state"), tmp_path / "state", clock)
    r.recover()
    return r, clock, rt


def tick(r: JobRunner, clock: FakeClock) -> None:
    clock.advance(0.1)
    r.tick(clock.monotonic())


def names(r: JobRunner) -> list[str]:
    return [e["event"] for e in r.store.events("cp")]


def test_a_launch_without_a_checkpoint_on_disk_waits_for_the_buckets_then_resumes_from_it(tmp_path, slow_store):
    r, clock, rt = setup(tmp_path)
    for _ in range(3):  # ticks go on (each returns at once) while the fetch is under way
        tick(r, clock)
        snap = r.snapshot()
        assert snap.state == "starting" and not rt.live(), "nothing starts before the checkpoint is here"
        assert "waiting: fetching the newest checkpoint from file://" in snap.state_reason
    slow_store.set()
    deadline = time.monotonic() + 30
    while not rt.live() and time.monotonic() < deadline:
        time.sleep(0.05)
        tick(r, clock)
    assert rt.live(), names(r)
    started = [e for e in r.store.events("cp") if e["event"] == "started"]
    want = tmp_path / "logs" / "rsl_rl" / "cp" / RUN / "model_4.pt"
    assert len(started) == 1 and started[0]["resume_from"]["iteration"] == 4
    assert started[0]["resume_from"]["path"] == str(want) and want.exists()
    ev = names(r)
    assert ev.index("backup_restored") < ev.index("started")
    assert "waiting" not in (r.snapshot().state_reason or "")


def test_a_checkpoint_on_disk_wins_over_the_bucket(tmp_path):
    local = tmp_path / "logs" / "rsl_rl" / "cp" / "2026-01-05_00-00-00_cp"
    fake_checkpoint(local / "model_6.pt", 6)
    r, clock, rt = setup(tmp_path)  # the history is rebuilt from the run dir on disk
    tick(r, clock)
    assert rt.live(), "launched at once: no fetch"
    started = [e for e in r.store.events("cp") if e["event"] == "started"][0]
    assert started["resume_from"]["path"] == str(local / "model_6.pt")
    assert "backup_restored" not in names(r)
    assert not (tmp_path / "logs" / "rsl_rl" / "cp" / RUN).exists()


def test_a_stop_while_the_checkpoint_is_fetched_starts_nothing(tmp_path, slow_store):
    r, clock, rt = setup(tmp_path)
    tick(r, clock)
    assert r.snapshot().state == "starting" and r.launch_waits
    r.handle_message(Stop(Origin.OPERATOR, "operator stop"))
    tick(r, clock)
    slow_store.set()
    for _ in range(20):
        time.sleep(0.05)
        tick(r, clock)
    assert r.snapshot().state == "stopped" and not rt.trainers and r.launch_waits is None
    assert "started" not in names(r)
