"""`isaacd status` and `isaacd events` tell what happened: real supervisor, real trainer, real binary."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest
from helpers import BIN, builtin_job, wait_for, write_config

pytestmark = pytest.mark.slow
FAST = ["agent.num_steps_per_env=8"]


def cli(sp, *args: str) -> subprocess.CompletedProcess[str]:  # noqa: ANN001
    return subprocess.run([str(BIN / "isaacd"), "--config", str(sp.config), *args], capture_output=True, text=True,
                          timeout=60)


def row(text: str, job: str) -> dict[str, str]:
    """The job's line of the status table, by column name (columns are separated by two or more spaces)."""
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("JOB "))
    line = next(ln for ln in lines if re.match(rf"{job}\s", ln))
    return dict(zip(re.split(r"\s{2,}", header.strip()), re.split(r"\s{2,}", line.strip())))


def test_completed_job_reads_as_complete_and_start_does_not_launch_it(tmp_path, supervisor_factory):
    sp = supervisor_factory(write_config(tmp_path, builtin_job("done", max_iterations=4, num_envs=16,
                                                               extra_args=FAST)))
    wait_for(lambda: sp.job("done")["state"] == "completed", 180, what="completion")
    assert row(cli(sp, "status").stdout, "done")["ITERS"] == "4/4"  # not "3/4": iterations done, not the last index
    started = [e for e in sp.events("done") if e["event"] == "started"]

    res = cli(sp, "start", "done")
    assert res.returncode == 0 and "done is complete (4/4 iterations)" in res.stdout, res.stdout + res.stderr
    assert "raise its max_iterations" in res.stdout
    # a restart of a completed job answers as start does, and counts nothing (no operator restart in /metrics)
    res = cli(sp, "restart", "done")
    assert res.returncode == 0 and "done is complete (4/4 iterations); nothing to restart" in res.stdout, res.stderr
    time.sleep(1.0)  # a few supervisor ticks: a start that got through would have launched by now
    assert [e for e in sp.events("done") if e["event"] == "started"] == started
    j = sp.job("done")
    assert (j["state"], j["restarts"], j["restarts_by_reason"]) == ("completed", 0, {})


def test_a_boot_is_shown_and_stop_then_start_ends_running_with_each_verb_in_its_own_word(tmp_path, supervisor_factory):
    """Built-in trainer (no gymnasium: its phases are imports and first iteration); each iteration >= 4 s."""
    sp = supervisor_factory(write_config(tmp_path, builtin_job("cp", num_envs=16, max_iterations=1000, spare=False,
                                                               extra_args=[*FAST, "--step_delay", "0.5"])))
    j = wait_for(lambda: (x := sp.job("cp"))["boot"] and x["boot"]["phase"] == "first iteration" and x, 180,
                 interval=0.05, what="the first iteration under way")
    os.kill(j["pid"], signal.SIGSTOP)  # the boot holds still while it is looked at, stopped and started
    try:
        wait_for(lambda: sp.job("cp")["boot"]["last_line"], 10, what="the trainer's last output line")
        text = cli(sp, "status").stdout
        assert re.search(r"cp: booting for \d+s \(first iteration for \d+s\); last output: \S", text), text
        stop = cli(sp, "stop", "cp")
        time.sleep(0.1)
        start = cli(sp, "start", "cp")
        assert (stop.returncode, stop.stdout) == (0, "cp: stopping\n"), stop.stderr
        assert (start.returncode, start.stdout) == (0, "cp: starting once stopped (the stop under way finishes "
                                                       "first)\n"), start.stderr
        assert "then it starts" in cli(sp, "status").stdout
    finally:
        os.kill(j["pid"], signal.SIGCONT)
    j = wait_for(lambda: (x := sp.job("cp"))["state"] == "running" and x["attempt"] == 2 and x, 180,
                 interval=0.2, what="running again after the stop")
    assert j["restarts"] == 0 and j["boot"] is None
    events = cli(sp, "events", "cp").stdout
    assert "stopped before the first checkpoint" in events and "trainer_saved_on_stop" not in events

    restart = cli(sp, "restart", "cp")
    assert (restart.returncode, restart.stdout) == (0, "cp: restarting\n"), restart.stderr
    wait_for(lambda: sp.job("cp")["restarts_by_reason"] == {"operator": 1}, 60, what="the operator restart counted")


def test_restart_and_resume_are_told_without_nested_parentheses_or_raw_json(tmp_path, supervisor_factory):
    # snapshots off: with one every iteration there would be nothing to redo, and the redo story is the point
    job = builtin_job("long", max_iterations=100000, save_interval=10, num_envs=16, snapshot_every=0,
                      extra_args=[*FAST, "--step_delay", "0.1"])
    sp = supervisor_factory(write_config(tmp_path, job))
    # kill well after a checkpoint, so the resumed run has iterations to redo
    j = wait_for(lambda: (x := sp.job("long"))["checkpoint"] and x["iteration"] is not None
                 and x["iteration"] >= x["checkpoint"]["iteration"] + 5 and x, 240, what="iterations past a checkpoint")
    os.kill(j["pid"], signal.SIGKILL)
    out = wait_for(lambda: (t := cli(sp, "status").stdout) and re.search(r"(redoing \d+ iterations|\d+ iterations will be redone)", t) and t, 120,
                   interval=0.2, what="the resume story in isaacd status")
    assert row(out, "long")["RESTARTS"] == "1"  # RESTARTS is a count; the reason is on its own line
    assert "long: last restart: killed by signal 9 (SIGKILL)" in out
    assert "((" not in out and "))" not in out
    assert re.search(r"long: (resuming|resumed) from checkpoint \d+.*reward may dip", out)

    events = cli(sp, "events", "long").stdout
    started = [ln for ln in events.splitlines() if " started " in ln][-1]
    assert re.search(r"resume_from=model_\d+\.pt \(iteration \d+, saved \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\)", started)
    assert "{" not in events and '"' not in events
