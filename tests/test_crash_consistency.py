"""Kill the real supervisor (SIGKILL, as a power cut) at each effect boundary and check what the next one does.

The boundary is chosen with ISAACD_TEST_CRASH_AT (attempt/crashpoint.py): after an intent was saved and before
the effect acted, after the effect and before its result was saved, after an exit was seen and before it
was saved. Trainers here are real processes (a shell loop that exits 0 on SIGINT); the invariants are what
an operator would notice: never two trainers for one job, never an orphan, an operator's stop honoured, a
restart counted once, a backoff waited.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from helpers import SupervisorProc, builtin_job, wait_for, write_config

TRAINER = "trap 'exit 0' INT TERM; : {marker}; while true; do sleep 0.1; done"


def trainers(marker: str) -> list[int]:
    """Host pids of this test's trainer shells (each carries the marker in its command line). The shell forks a
    child for each `sleep` every 0.1 s, and between its fork and its exec that child carries the same command line:
    a process whose parent is one of them is such a fork, not another trainer (it made this test fail 1 in 3 on a
    loaded machine)."""
    found: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "cmdline").read_bytes():
                    stat = (d / "stat").read_text()
                    found[int(d.name)] = int(stat[stat.rindex(")") + 2:].split()[1])  # ppid, after "(comm) state"
            except (OSError, ValueError, IndexError):
                continue
    return sorted(pid for pid, ppid in found.items() if ppid not in found)


@pytest.fixture()
def setup(tmp_path, supervisor_factory):  # noqa: ANN001, ANN201 - supervisor_factory cleans up trainers
    # unique on the host: tmp_path.name repeats on every xdist worker (each has its own basetemp)
    marker = f"isaacd-crash-{uuid.uuid4().hex[:16]}"
    cfg = write_config(tmp_path, builtin_job("cp", command=["sh", "-c", TRAINER.format(marker=marker)],
                                             restart={"backoff_initial": 4.0, "max_restarts": 5,
                                                      "first_restart_immediate": False}))
    procs: list[SupervisorProc] = []

    def crashing(label: str) -> SupervisorProc:
        sp = SupervisorProc(cfg, env={"ISAACD_TEST_CRASH_AT": label})
        procs.append(sp)
        return sp

    yield cfg, marker, crashing, supervisor_factory
    for sp in procs:
        if sp.proc is not None and sp.proc.poll() is None:
            sp.stop(signal.SIGKILL)
    for pid in trainers(marker):
        os.kill(pid, signal.SIGKILL)


def died(sp: SupervisorProc) -> None:
    assert sp.proc is not None
    rc = sp.proc.wait(30)
    assert rc == -signal.SIGKILL, f"the supervisor was meant to die at the boundary, rc={rc}: {sp.log_text()[-2000:]}"


def events(sp: SupervisorProc, name: str) -> list[dict]:
    return [e for e in sp.events("cp") if e["event"] == name]


@pytest.mark.parametrize("label", ["starting.after_intent", "launch.after_intent", "launch.after_effect"])
def test_crash_during_a_launch_leaves_exactly_one_trainer(setup, label):
    cfg, marker, crashing, factory = setup
    died(crashing(label).start(wait=False))
    before = trainers(marker)
    assert len(before) == (1 if label == "launch.after_effect" else 0)
    sp = factory(cfg)
    j = wait_for(lambda: (x := sp.job("cp"))["pid"] and x, 20, what="job running")
    time.sleep(1.0)  # a duplicate would have appeared by now
    live = trainers(marker)
    assert live == [j["pid"]], f"trainers {live}, status pid {j['pid']}"
    if before:
        assert before == live and events(sp, "adopted")  # found by its launch token, not started twice
    else:
        assert events(sp, "launch_replayed")
    assert j["restarts"] == 0  # a launch the supervisor did not finish is no crash of the trainer


@pytest.mark.parametrize("label", ["stopping.after_intent", "signal.after_effect"])
def test_operator_stop_in_flight_is_honoured_after_a_crash(setup, label):
    cfg, marker, crashing, factory = setup
    sp = crashing(label).start()
    wait_for(lambda: sp.job("cp")["pid"], 20, what="job running")
    sp.cli("stop", "cp", check=False)  # the supervisor dies while carrying it out
    died(sp)
    sp2 = factory(cfg)
    j = wait_for(lambda: (x := sp2.job("cp"))["state"] == "stopped" and x, 20, what="stopped")
    assert j["state_reason"] == "operator stop (isaacd stop)"
    time.sleep(1.0)
    assert trainers(marker) == [] and sp2.job("cp")["state"] == "stopped"  # not restarted


def test_crash_in_the_backoff_keeps_the_wait_and_the_count(setup):
    cfg, marker, crashing, factory = setup
    sp = crashing("backing-off.after_intent").start()
    (pid,) = wait_for(lambda: trainers(marker), 20, what="trainer")
    t_crash = time.time()
    os.kill(pid, signal.SIGKILL)
    died(sp)
    sp2 = factory(cfg)
    j = sp2.job("cp")
    assert j["state"] == "backing-off" and j["restarts"] == 1
    j = wait_for(lambda: (x := sp2.job("cp"))["pid"] and x, 20, what="restarted")
    started = events(sp2, "started")[-1]
    assert started["time"] - t_crash >= 3.8, "the 4 s backoff was cut short by the supervisor's crash"
    assert j["restarts"] == 1 and len(trainers(marker)) == 1


def test_crash_between_an_exit_and_its_save_counts_the_restart_once(setup):
    cfg, marker, crashing, factory = setup
    sp = crashing("exit.before_save").start()
    (pid,) = wait_for(lambda: trainers(marker), 20, what="trainer")
    os.kill(pid, signal.SIGKILL)
    died(sp)
    sp2 = factory(cfg)
    j = wait_for(lambda: (x := sp2.job("cp"))["pid"] and x, 20, what="restarted")
    assert j["restarts"] == 1 and trainers(marker) == [j["pid"]]


@pytest.fixture()
def tiny_state_disk(tmp_path, tmpfs):  # noqa: ANN001, ANN201
    return tmpfs(tmp_path / "state", "4m")


def test_full_state_disk_starts_no_untracked_trainer_and_recovers_when_space_returns(setup, tiny_state_disk):
    cfg, marker, _crashing, factory = setup
    sp = factory(cfg)
    (pid,) = wait_for(lambda: trainers(marker), 20, what="trainer")
    filler = tiny_state_disk / "filler"
    with open(filler, "wb") as fh:  # the state disk fills up while the job trains
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass
    os.kill(pid, signal.SIGKILL)
    # the crash is seen (its save fails, and is said); after the backoff the launch is refused for the same reason
    j = wait_for(lambda: (x := sp.job("cp"))["state"] == "backing-off" and "not starting" in x["state_reason"] and x,
                 30, what="the launch refused for want of space")
    assert "No space left on device" in j["persist_error"] and "No space left on device" in j["state_reason"]
    time.sleep(2)
    assert trainers(marker) == []  # never a trainer isaacd could lose track of
    assert sp.proc is not None and sp.proc.poll() is None  # no crash, no assertion loop
    filler.unlink()
    j = wait_for(lambda: (x := sp.job("cp"))["pid"] and x, 30, what="restarted once space returned")
    assert j["persist_error"] is None and trainers(marker) == [j["pid"]]
