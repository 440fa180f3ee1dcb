"""Errors no restart can fix, through the real `isaacd` and the built-in trainer's Isaac Lab 2.x contract (issue 29).

A wrong task (the built-in trainer raises gymnasium's NameNotFound, as Isaac Lab 2.x's train.py lets it through: exit
1), a Hydra override Hydra cannot parse (real hydra-core) and a flag argparse rejects (exit 2): each job is launched
once and fails with the trainer's own line and the config key to change, no restart spent. `check-config` catches the
task before any launch, with the closest registered id; after the fix, `reload` and `start` train. The real Isaac Lab
3.0 story is tests/test_isaaclab3_config_errors.py.
"""

from __future__ import annotations

import subprocess

from helpers import BIN, builtin_job, wait_for, write_config

FAST = ["agent.num_steps_per_env=8"]
WRONG = "Isaacd-Cartpol-v0"


def jobs(task: str) -> str:
    return (builtin_job("task", task=task, extra_args=FAST)
            + builtin_job("hydra", extra_args=FAST + ["True"])
            + builtin_job("flag", extra_args=FAST + ["--num_envs", "abc"]))


def started(sp, job: str) -> list[dict]:  # noqa: ANN001
    return [e for e in sp.events(job) if e["event"] == "started"]


def test_wrong_task_hydra_and_argparse_errors_fail_after_one_launch_and_start_trains_after_the_fix(
        tmp_path, supervisor_factory):
    cfg = write_config(tmp_path, jobs(WRONG))
    res = subprocess.run([str(BIN / "isaacd"), "check-config", str(cfg)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert (f'{cfg}: jobs[0] (name = "task").task: \'{WRONG}\' is not a task isaacd\'s built-in trainer registers'
            in res.stderr), res.stderr
    assert "gymnasium.error.NameNotFound: Environment `Isaacd-Cartpol` doesn't exist." in res.stderr
    assert 'did you mean "Isaacd-Cartpole-v0"?' in res.stderr and "Traceback" not in res.stderr

    sp = supervisor_factory(cfg)
    failed = {name: wait_for(lambda n=name: (x := sp.job(n))["state"] == "failed" and x, 120, what=f"{name} failed")
              for name in ("task", "hydra", "flag")}
    for name, j in failed.items():
        assert len(started(sp, name)) == 1 and j["restarts"] == 0, (name, j)
    said = {n: next(e for e in sp.events(n) if e["event"] == "trainer_config_error") for n in failed}
    assert said["task"]["line"] == ("gymnasium.error.NameNotFound: Environment `Isaacd-Cartpol` doesn't exist. "
                                    "Did you mean: `Isaacd-Cartpole`?")
    assert said["hydra"]["line"] == "Error parsing override 'True': missing EQUAL at '<EOF>'"
    assert said["flag"]["line"].endswith(": error: argument --num_envs: invalid int value: 'abc'")
    assert {n: e["key"] for n, e in said.items()} == {"task": "task", "hydra": "extra_args", "flag": "extra_args"}
    assert [e["code"] for e in sp.events("flag") if e["event"] == "exited"] == [2]  # argparse's exit status
    reason = failed["task"]["state_reason"]
    assert reason.startswith("the trainer does not know the task (gymnasium.error.NameNotFound") and "\n" not in reason
    assert "Fix: set `task` in the [[jobs]] table of task" in reason and "`isaacd start task`" in reason
    assert "Fix: correct or remove `True` in `extra_args`" in failed["hydra"]["state_reason"]
    out = sp.cli("status").stdout
    assert "the trainer does not know the task" in out

    cfg.write_text(cfg.read_text().replace(WRONG, "Isaacd-Cartpole-v0"))
    assert "changed" in sp.cli("reload").stdout
    sp.cli("start", "task")
    j = wait_for(lambda: (x := sp.job("task"))["state"] == "running" and (x["iteration"] or 0) >= 1 and x, 120,
                 what="the fixed job trains")
    assert len(started(sp, "task")) == 2 and j["restarts"] == 0
