"""Issue 11 end to end on real processes: pidfd detection, an immediate first restart, the warm spare taking over,
per-iteration snapshots as resume points. The built-in trainer (real rsl_rl, CPU) through the real shim."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from helpers import alive, builtin_job, wait_for, write_config

from isaacd.observations.tensorboard import TensorBoardTail

pytestmark = pytest.mark.slow


def events(sp, name):  # noqa: ANN001, ANN201
    return [e for e in sp.events("cp") if e["event"] == name]


def job(**over):  # noqa: ANN003, ANN201
    # snapshot_budget = 0: a snapshot every iteration even at the toy's ~0.05 s per iteration (the default 1 %
    # budget would space them out there; a real task's ~1 s iterations get one every iteration anyway)
    # the divergence watchdog off: on this toy the value loss can spike right after a resume and its restart
    # would take the spare this test is watching (seen in CI; noted in the issue 11 note)
    return builtin_job("cp", max_iterations=100000, save_interval=50, extra_args=["agent.num_steps_per_env=8"],
                       **{"snapshot_budget": 0, **over}) + "\n[jobs.watchdogs.divergence]\nenabled = false\n"


def test_warm_spare_takes_over_from_the_last_snapshot_and_a_dead_spare_is_replaced(tmp_path, supervisor_factory):
    sp = supervisor_factory(write_config(tmp_path, job()))
    j = wait_for(lambda: (x := sp.job("cp"))["spare"].get("state") == "ready" and (x["iteration"] or 0) >= 3 and x,
                 180, what="training with a ready spare")
    spare_pid = j["spare"]["pid"]
    assert j["spare"]["rss_bytes"] > 50 * 2**20 and spare_pid != j["pid"]
    assert "warm spare: ready" in sp.cli("status").stdout
    old_pid, old_run = j["pid"], j["run_dir"]
    os.kill(old_pid, signal.SIGKILL)
    t_kill = time.time()
    tail = TensorBoardTail(Path(old_run))
    tail.poll()
    at_kill = tail.progress.last_step
    j = wait_for(lambda: (x := sp.job("cp"))["pid"] not in (None, old_pid) and x, 30, interval=0.02, what="restart")
    assert j["pid"] == spare_pid  # the spare became the trainer
    started = events(sp, "started")[-1]
    assert started["warm_spare"] is True and started["reason"] == "killed by signal 9 (SIGKILL)"
    # the newest resume point is the snapshot of the last finished iteration, not an older model_<save_interval k>.pt
    # (a kill just after a save_interval iteration finds that iteration's model_<k>.pt, as new a resume point as its
    # snapshot: a fresh-clone run killed right after iteration 50 resumed from model_50.pt)
    resumed = started["resume_from"]
    assert resumed["iteration"] >= at_kill - 1
    assert "isaacd_snapshot_" in resumed["path"] or (resumed["iteration"] % 50 == 0
                                                     and resumed["path"].endswith(f"model_{resumed['iteration']}.pt"))
    assert [e for e in events(sp, "restart_scheduled")][-1]["delay_seconds"] == 0.0  # the first restart: at once
    wait_for(lambda: (x := sp.job("cp"))["run_dir"] not in (None, old_run) and x["state"] == "running", 60,
             interval=0.05, what="training again")
    print(f"kill -9 -> training again from the warm spare: {time.time() - t_kill:.1f} s (bench/recovery.py times it)")
    # a new spare behind the new trainer; kill it: it is replaced, the job is untouched
    j = wait_for(lambda: (x := sp.job("cp"))["spare"].get("state") == "ready" and x, 180, what="a new spare")
    second, trainer = j["spare"]["pid"], j["pid"]
    os.kill(second, signal.SIGKILL)
    wait_for(lambda: events(sp, "spare_exited"), 10, what="the dead spare noticed")
    j = wait_for(lambda: (x := sp.job("cp"))["spare"].get("state") == "ready" and x["spare"]["pid"] != second and x,
                 180, what="the dead spare replaced")
    assert j["pid"] == trainer and j["state"] == "running" and j["restarts"] == 1


def test_operator_stop_leaves_no_spare(tmp_path, supervisor_factory):
    sp = supervisor_factory(write_config(tmp_path, job()))
    j = wait_for(lambda: (x := sp.job("cp"))["spare"].get("state") == "ready" and x, 180, what="a ready spare")
    spare_pid = j["spare"]["pid"]
    sp.cli("stop", "cp")
    wait_for(lambda: sp.job("cp")["state"] == "stopped", 60, what="stopped")
    wait_for(lambda: not alive(spare_pid), 10, what="the spare gone")
    assert sp.job("cp")["spare"]["state"] in ("none", "off")
    assert not list((tmp_path / "state" / "spare" / "cp").glob("*.fifo"))


def test_spare_off_where_it_does_not_fit_says_why(tmp_path, supervisor_factory):
    sp = supervisor_factory(write_config(tmp_path, job(shim=False, snapshot_every=0)))
    j = wait_for(lambda: (x := sp.job("cp"))["state"] == "running" and x, 120, what="running")
    assert j["spare"] == {"state": "off", "reason": "the launcher shim is off (shim = false), or a raw command"}


def test_a_crash_mid_snapshot_leaves_no_half_written_file_behind(tmp_path, supervisor_factory):
    """kill -9 while the shim's writer is between open and rename leaves `.isaacd_snapshot_<N>.pt.tmp.<pid>`,
    one per crash, each the size of a checkpoint. The file is planted here (the race itself is a few ms wide);
    once the trainer is dead isaacd removes it, and only it."""
    sp = supervisor_factory(write_config(tmp_path, job(spare=False)))
    j = wait_for(lambda: (x := sp.job("cp"))["run_dir"] and (x["iteration"] or 0) >= 2 and x, 120, what="training")
    run = Path(j["run_dir"])
    # an iteration the trainer never reaches: planted as `_2`, it was once (at load, 1 run in 4) the very file the
    # real writer had open for iteration 2, renamed into a torn isaacd_snapshot_2.pt (rejected) with nothing to sweep
    half = run / f".isaacd_snapshot_1000000.pt.tmp.{j['pid']}"
    half.write_bytes(b"PK\x03\x04" + b"\0" * 4096)  # a torn zip, as torch.save leaves it
    mine = run / "notes.tmp"
    mine.write_text("not isaacd's")
    os.kill(j["pid"], signal.SIGKILL)
    wait_for(lambda: events(sp, "snapshot_temps_removed"), 30, what="the sweep")
    assert not half.exists() and mine.exists() and any(run.glob("isaacd_snapshot_*.pt"))
    assert not list(run.glob(".isaacd_snapshot_*.tmp.*"))
    removed = events(sp, "snapshot_temps_removed")[0]
    # at least the planted one: the kill may also have caught the real writer mid-file
    assert removed["files"] >= 1 and removed["bytes"] >= 4100
