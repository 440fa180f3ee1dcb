"""A sweep end to end (issue 39): a real `isaacd run`, the real built-in trainer (rsl_rl) and the CLI, on a scripted
8-GPU host (the queue places the trials by gpu_memory; they train on the CPU).

The objective is the learning rate the trainer itself logs (rsl_rl's `Loss/learning_rate`): the ranks are then
known before the run (a fixed schedule: rsl_rl's adaptive one moves the rate by the KL, and the ranks with it), so
one sweep of three trials, run one at a time, walks every ASHA decision (a trial that goes on, a pause with a save, a
promotion that resumes it exactly, the sweep done with its best), and the logged value proves each trial trained
with the learning rate it was sampled, before its pause and after its promotion. A SIGKILL of the supervisor while a
trial is paused loses nothing: the next one finds the sweep, the pause and the trials where they were."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from helpers import steps, wait_for
from test_queue_e2e import QUIET, host

pytestmark = pytest.mark.slow

SWEEP = """
[sweep]
name = "lr"
trials = 3
concurrency = 1
[sweep.objective]
tag = "Loss/learning_rate"
mode = "max"
smooth = 1
[sweep.scheduler]
rungs = [4]
reduction_factor = 2
[sweep.space]
"agent.algorithm.learning_rate" = {{ grid = [1e-3, 1e-5, 1e-9] }}
[job]
device = "cpu"
gpu_memory = "10GiB"
num_envs = 32
max_iterations = 8
save_interval = 1
stop_timeout = 60.0
spare = false
log_root = "{logs}"
extra_args = ["agent.num_steps_per_env=8", "agent.algorithm.schedule=fixed"]
{quiet}
"""


def sweep_file(tmp_path: Path) -> Path:
    quiet = QUIET.replace("[jobs.watchdogs.", "[job.watchdogs.")
    path = tmp_path / "lr.sweep.toml"
    path.write_text(SWEEP.format(logs=tmp_path / "logs", quiet=quiet))
    return path


def sweep(sp) -> dict:  # noqa: ANN001
    return json.loads(sp.cli("sweep", "status", "lr", "--json").stdout)


def test_a_sweep_pauses_promotes_exactly_survives_a_supervisor_kill_and_names_its_best(tmp_path, supervisor_factory):
    cfg = host(tmp_path, free=tuple(range(8)))
    sp = supervisor_factory(cfg)
    said = sp.cli("sweep", "submit", str(sweep_file(tmp_path))).stdout
    assert "sweep lr: 3 trials submitted (lr-t001 .. lr-t003), at most 1 at once, scheduler asha" in said
    # trial 2 (1e-5) reaches the rung below trial 1 (1e-3): paused with a save, rank 2 of 2
    wait_for(lambda: any(e["event"] == "trial_paused" for e in sp.events("lr-t002")), 180, what="lr-t002 paused")
    paused = next(e for e in sp.events("lr-t002") if e["event"] == "trial_paused")
    assert (paused["rank"], paused["of"], paused["milestone"]) == (2, 2, 4)
    wait_for(lambda: sp.job("lr-t002")["state"] == "stopped", 60, what="lr-t002 stopped with its save")
    # the supervisor is killed while trial 2 is paused: the next one finds the sweep where it was
    sp.stop(signal.SIGKILL)
    sp = supervisor_factory(cfg)
    # trial 3 (1e-9) arrives last of three: top 2 of 3 is trials 1 and 2, so trial 2 is promoted and resumes
    wait_for(lambda: sweep(sp)["state"] == "done", 240, what="the sweep done")
    status = sweep(sp)
    by_job = {t["job"]: t for t in status["trials"]}
    assert [t["job"] for t in status["trials"]][:2] in (["lr-t001", "lr-t002"], ["lr-t002", "lr-t001"])
    assert status["best"] == 1 and by_job["lr-t001"]["state"] == by_job["lr-t002"]["state"] == "completed"
    assert by_job["lr-t003"]["state"] == "paused"
    promoted = [e for e in sp.events("lr-t002") if e["event"] == "trial_promoted"]
    assert len(promoted) == 1 and promoted[0]["rank"] == 2 and promoted[0]["of"] == 3
    # each trial trained at its own learning rate, as the trainer logged it at its rung and at its end (trial 2's
    # end is after its promotion: a resume keeps the searched value in effect)
    for job, lr in (("lr-t001", 1e-3), ("lr-t002", 1e-5), ("lr-t003", 1e-9)):
        assert all(v == pytest.approx(lr, rel=1e-6) for v in by_job[job]["rung_values"]), (job, by_job[job]["rung_values"])
    # 0 iterations lost across trial 2's pause and promotion: its run dirs' steps cover 0..7, each once resumed from
    # the checkpoint its pause saved
    attempts = [e for e in sp.events("lr-t002") if e["event"] == "started"]
    assert len(attempts) == 2 and attempts[1]["resume_from"] is not None
    run_dirs = [d for d in (tmp_path / "logs").rglob("*") if d.is_dir() and d.parent.name == "lr-t002"]
    covered = [s for d in run_dirs for s in steps(d)]
    assert len(run_dirs) == 2 and set(range(8)) <= set(covered), (run_dirs, covered)
    best = sp.cli("sweep", "best", "lr").stdout
    assert 'name = "lr-best"' in best and "agent.algorithm.learning_rate=0.001" in best
