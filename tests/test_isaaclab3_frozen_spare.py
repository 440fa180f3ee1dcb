"""Issue 28 part 1 on the real Isaac Lab 3.0.0 (kit-less, CPU, pip form), where the bug was seen: a booted spare
parked at rsl_rl's learn() is frozen (SIGSTOP), then the trainer is killed with SIGKILL. Before issue 28 the job
stayed `starting` until the no_progress watchdog (600 s); now the spare misses the ack deadline (the default
[jobs.launch] spare_ack_timeout), is killed, and the job starts cold at once. The spare that answers, and its ack
latency (the figure the default's margin rests on), are test_isaaclab3_booted_spare.py's: its takeovers assert and
print it (suite time, session 18: a takeover here first cost a booted spare's boot and proved nothing more)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from helpers import wait_for, write_config
from isaaclab3_helpers import BOOT, events, started
from test_isaaclab3_booted_spare import held_beside_a_ready_spare
from test_isaaclab3_real import _real_isaaclab, il3_job  # noqa: F401 (the fixture)

from isaacd.config.schema import LaunchDeadlines

pytestmark = [pytest.mark.slow, pytest.mark.isaaclab3]


def test_a_frozen_booted_spare_is_killed_at_the_ack_deadline_and_the_job_starts_cold(tmp_path, supervisor_factory):
    ack_bound = LaunchDeadlines().spare_ack_timeout
    sp = supervisor_factory(write_config(tmp_path, il3_job("fz", max_iterations=400, save_interval=5,
                                                           spare="booted")))

    # a booted spare, frozen while parked; the trainer killed: the ack deadline, then a cold start
    j = held_beside_a_ready_spare(sp, "fz", 2)
    before = len(started(sp, "fz"))
    os.kill(j["spare"]["pid"], signal.SIGSTOP)
    os.kill(j["pid"], signal.SIGKILL)
    t_kill = time.time()
    warm = wait_for(lambda: len(s := started(sp, "fz")) > before and s[before], 60, interval=0.05,
                    what="the hand-over")
    assert warm["warm_spare"] is True and warm["pid"] == j["spare"]["pid"]
    timeout = wait_for(lambda: events(sp, "fz", "spare_handover_timeout"), ack_bound + 30, interval=0.05,
                       what="the ack deadline")[-1]
    assert timeout["deadline"] == "ack" and timeout["mode"] == "booted" and timeout["waited_seconds"] >= ack_bound
    back = wait_for(lambda: (x := sp.job("fz"))["state"] == "running" and x["attempt"] > warm["attempt"] and x,
                    BOOT, interval=0.1, what="training again, cold")
    took_s = time.time() - t_kill
    cold = started(sp, "fz")[-1]
    assert cold["warm_spare"] is False and back["pid"] != j["spare"]["pid"]
    assert not os.path.exists(f"/proc/{j['spare']['pid']}/exe")  # killed, not left frozen
    running = [e["time"] for e in events(sp, "fz", "state") if e.get("new") == "running" and e["time"] >= cold["time"]]
    print(f"real Isaac Lab 3.0, CPU, frozen booted spare: kill -9 -> training again (cold) in {took_s:.1f} s, of "
          f"which the cold start-up (started -> running) {running[0] - cold['time']:.1f} s")
    sp.cli("stop", "fz")
    wait_for(lambda: sp.job("fz")["state"] == "stopped", 120, what="stopped")
