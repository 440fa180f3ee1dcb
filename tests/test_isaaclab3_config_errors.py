"""Errors no restart can fix, on the real Isaac Lab 3.0.0 (kit-less, CPU) driven by the real `isaacd run` (issue 29).

Before issue 29 a wrong task id was a crash: twelve launches of the real thing, then "restart limit reached". Now:
`check-config` catches it from the launcher's own registry (no simulator booted) and names the closest id; the job,
started anyway, fails after ONE launch with gymnasium's line and the key `task`; a missing module (an
`--external_callback` Isaac Lab cannot import) the same with `extra_args`; after the fix, `reload` and `start` train.
Both failures happen in the trainer's first seconds (before the simulation), so this costs one boot, the fixed one's.
"""

from __future__ import annotations

import subprocess

import pytest

from helpers import BIN, wait_for, write_config
from isaaclab3_helpers import BOOT, PY, TASK, started
from test_isaaclab3_real import _real_isaaclab, il3_job  # noqa: F401 - the autouse fixture: skip/fail without the venv

pytestmark = [pytest.mark.slow, pytest.mark.isaaclab3]
WRONG = "Isaac-Cartpol-Direct"


def test_wrong_task_and_missing_module_fail_after_one_launch_and_the_fixed_task_trains(tmp_path, supervisor_factory):
    jobs = (il3_job("task", task=WRONG, spare=False)
            + il3_job("mod", spare=False, extra_args=["--external_callback", "nosuchpkg.register"]))
    cfg = write_config(tmp_path, jobs)
    res = subprocess.run([str(BIN / "isaacd"), "check-config", str(cfg)], capture_output=True, text=True, timeout=180)
    assert res.returncode == 2, res.stdout
    assert f'jobs[0] (name = "task").task: \'{WRONG}\' is not a task the Isaac Lab in {PY} registers' in res.stderr
    assert f'did you mean "{TASK}"?' in res.stderr and "Traceback" not in res.stderr
    assert '"mod"' not in res.stderr  # an --external_callback registers tasks of its own: not second-guessed

    sp = supervisor_factory(cfg)
    failed = {n: wait_for(lambda n=n: (x := sp.job(n))["state"] == "failed" and x, BOOT, what=f"{n} failed")
              for n in ("task", "mod")}
    for name, j in failed.items():
        assert len(started(sp, name)) == 1 and j["restarts"] == 0, (name, j)
    said = {n: next(e for e in sp.events(n) if e["event"] == "trainer_config_error") for n in failed}
    assert said["task"]["line"] == (f"gymnasium.error.NameNotFound: Environment `{WRONG}` doesn't exist. "
                                    f"Did you mean: `{TASK}`?")
    assert said["task"]["key"] == "task"
    assert said["mod"]["kind"] == "missing_module" and said["mod"]["key"] == "extra_args"
    assert said["mod"]["line"].startswith("ValueError: Could not resolve the input string 'nosuchpkg.register'")
    assert "Fix: set `task` in the [[jobs]] table of task" in failed["task"]["state_reason"]

    cfg.write_text(cfg.read_text().replace(WRONG, TASK))
    sp.cli("reload")
    sp.cli("start", "task")
    wait_for(lambda: (x := sp.job("task"))["state"] == "running" and (x["iteration"] or 0) >= 1, BOOT, interval=0.5,
             what="the fixed job trains")
    assert len(started(sp, "task")) == 2 and sp.job("task")["restarts"] == 0
