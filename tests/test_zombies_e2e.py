"""Issue 37, end to end: every child the supervisor starts is reaped, whoever ends it. One real `isaacd run` with
the built-in trainer on the process runtime, each job with a warm spare (imports-only: the cheapest spare, a child
like any other), goes through each way a spare is killed or a trainer ends: an operator stop and start, a cancel of
a submitted job, a completion, and a spare's takeover after a kill -9 of the trainer. Before the fix each killed
spare stayed `<defunct>` under the supervisor until it exited (three stop/start cycles: three zombies)."""

from __future__ import annotations

import json
import os
import signal

import pytest
from helpers import builtin_job, children_of, wait_for, write_config, zombies_of

pytestmark = pytest.mark.slow

FAST = ["agent.num_steps_per_env=8"]
QUIET = "".join(f"\n[jobs.watchdogs.{w}]\nenabled = false\n" for w in ("no_progress", "loss_stagnation",
                                                                        "reward_plateau", "divergence"))


def job(name: str, **over) -> str:  # noqa: ANN003
    # stop_timeout 3: a stop's save is not what this test is about; on a loaded box the trainer's exit after its save
    # can take seconds, and a SIGKILL at the timeout is a way to end a child like any other
    return builtin_job(name, device="cpu", spare="imports", extra_args=FAST, stop_timeout=3.0, **over) + QUIET


def spare_pids(events: list[dict]) -> set[int]:
    return {e["pid"] for e in events if e["event"] == "spare_started"}


def test_no_zombie_after_a_takeover_stop_start_cancel_and_completion(tmp_path, supervisor_factory, monkeypatch):
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # one math thread per trainer, as on the suite's workers
        monkeypatch.setenv(var, "1")
    # two trainers in all: `a`, submitted (so that it can be cancelled), goes through the takeover, the stop and
    # start and the cancel; `done`, in the config, completes meanwhile
    cfg = write_config(tmp_path, job("done", max_iterations=20))
    cfg.write_text(cfg.read_text().replace("[supervisor]\n", '[supervisor]\njobs_dir = "jobs.d"\n', 1))
    submitted = tmp_path / "a.toml"
    submitted.write_text(job("a", max_iterations=100000))
    sp = supervisor_factory(cfg)
    sup = sp.proc.pid
    sp.cli("submit", str(submitted))

    # the takeover: kill -9 of a's trainer; its ready spare becomes the trainer, a new spare follows
    a = wait_for(lambda: (x := sp.job("a"))["spare"]["state"] == "ready" and x, 180, what="a's spare ready")
    os.kill(a["pid"], signal.SIGKILL)
    taken = wait_for(lambda: (x := sp.job("a"))["state"] == "running" and x["pid"] not in (None, a["pid"]) and x,
                     60, what="a training again after the kill")
    assert taken["pid"] == a["spare"]["pid"]  # the spare took the attempt over
    assert [e for e in sp.events("a") if e["event"] == "started"][-1]["warm_spare"] is True

    # the stop and start: the stop kills the spare behind the new trainer, the start makes another
    wait_for(lambda: sp.job("a")["spare"]["pid"], 60, what="a new spare behind the takeover")
    sp.cli("stop", "a")
    wait_for(lambda: sp.job("a")["state"] == "stopped", 60, what="a stopped")
    sp.cli("start", "a")
    wait_for(lambda: (x := sp.job("a"))["state"] == "running" and x["spare"]["pid"], 120,
             what="a running after its start, with a spare")

    # the completion: done's spare is killed when it comes to rest
    wait_for(lambda: sp.job("done")["state"] == "completed", 180, what="done completed")
    killed = (spare_pids(sp.events("a")) - {taken["pid"]}) | spare_pids(sp.events("done"))

    # the cancel: the job stops, its spare is killed and its runner goes, in one tick
    sp.cli("cancel", "a")
    wait_for(lambda: "a" not in [j["name"] for j in sp.status()["jobs"]], 60, what="a gone after its cancel")
    assert len(killed) >= 3, killed  # a's second and third spares, done's

    # each reaped within a tick or two of its end: no child of the supervisor is a zombie, no killed spare is left
    wait_for(lambda: not zombies_of(sup), 5, what=f"no zombie under the supervisor ({children_of(sup)})")
    assert not killed & set(children_of(sup)), (killed, children_of(sup))
    lines = [json.loads(line) for line in sp.log_text().splitlines() if line.startswith("{")]
    assert not [r for r in lines if r.get("event") == "spare_cleanup_failed"]
