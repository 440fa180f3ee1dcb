"""Issue 28 part 1 on this host's real Podman: a spare container whose process is frozen (SIGSTOP) never acks the go;
at the ack deadline its container is killed through Podman and the job starts cold in a new container."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid

import pytest

from helpers import builtin_job, wait_for, write_config
from test_podman_runtime import TRAINER, _containers, _spare_ready, cleanup_containers, podman_url  # noqa: F401

pytestmark = [pytest.mark.podman, pytest.mark.slow]


def test_a_frozen_spare_container_is_killed_at_the_ack_deadline_and_the_job_starts_cold(
        tmp_path, podman_url, supervisor_factory, cleanup_containers):  # noqa: F811
    name = f"fz{uuid.uuid4().hex[:6]}"
    cleanup_containers.append(name)
    jobs = builtin_job(name, runtime="podman", launcher=[str(TRAINER.with_name("python"))], save_interval=1,
                       log_root=str(tmp_path / "logs"), extra_args=["agent.num_steps_per_env=8"],
                       container={"image": "/:O", "shm_size": "256m"}, spare="imports",
                       launch={"spare_ack_timeout": 3.0})
    sup = supervisor_factory(write_config(tmp_path, jobs + "\n[jobs.watchdogs.divergence]\nenabled = false\n"))
    j = wait_for(lambda: _spare_ready(sup, name), 180, what="a ready spare")
    spare_pid, spare_name = j["spare"]["pid"], next(n for n in _containers(name, running_only=True) if "-spare-" in n)
    os.kill(spare_pid, signal.SIGSTOP)  # the container runs on; its trainer process answers nothing
    os.kill(j["pid"], signal.SIGKILL)
    t_kill = time.time()
    warm = wait_for(lambda: len(s := [e for e in sup.events(name) if e["event"] == "started"]) == 2 and s[-1], 60,
                    what="the hand-over")
    assert warm["warm_spare"] is True and warm["pid"] == spare_pid
    timeout = wait_for(lambda: next((e for e in sup.events(name) if e["event"] == "spare_handover_timeout"), None),
                       60, what="the ack deadline")
    assert timeout["deadline"] == "ack" and timeout["waited_seconds"] >= 3.0 and timeout["pid"] == spare_pid
    back = wait_for(lambda: (x := sup.job(name))["state"] == "running" and x["attempt"] == warm["attempt"] + 1 and x,
                    120, what="training again in a new container")
    took = time.time() - t_kill
    print(f"podman, frozen spare: kill -9 -> training again (cold) in {took:.1f} s (ack deadline 3 s)")
    cold = [e for e in sup.events(name) if e["event"] == "started"][-1]
    assert cold["warm_spare"] is False and back["pid"] != spare_pid
    # the frozen spare's container was killed through Podman, not left running
    state = subprocess.run(["podman", "container", "inspect", "-f", "{{.State.Running}}", spare_name],
                           capture_output=True, text=True).stdout.strip()
    assert state in ("false", ""), state
