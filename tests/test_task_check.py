"""The built-in trainer's task look-up says what gymnasium says (trainer/gymspec.py), and `isaacd doctor` asks the
job's own registry (daemon/workflows/registry.py) and names the closest id."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from isaacd.config.schema import JobConfig
from isaacd.workflows.registry import check_task, task_problem
from isaacd_trainer import gymspec
from isaacd_trainer.tasks import TASKS

from isaaclab3_helpers import PY

IDS = ["Isaacd-Cartpol-v0", "Isaacd-Cartpole-v1", "Isaacd-Cartpole", "Isaacd-Cartpole-v0", "ns/Isaacd-Cartpole-v0",
       "bad id!", "Isaac-Cartpole-Direct-v0", "Isaac-Cartpole-Direct"]
# the real gymnasium (in the Isaac Lab 3.0 venv) with a registry of the built-in ids plus an unversioned one, as 3.0's
_REAL = """\
import json, sys
import gymnasium as gym
from gymnasium.envs.registration import registry
registry.clear()
for i in json.loads(sys.argv[1]):
    gym.register(id=i, entry_point="x:y")
out = []
for t in json.loads(sys.argv[2]):
    try:
        gym.spec(t)
        out.append(None)
    except gym.error.Error as e:
        out.append(f"{type(e).__module__}.{type(e).__name__}: {e}")
print(json.dumps(out))
"""


def ours(registered: list[str]) -> list[str | None]:
    out: list[str | None] = []
    for t in IDS:
        try:
            gymspec.check(t, registered)
            out.append(None)
        except gymspec.Error as e:
            out.append(f"{type(e).__module__}.{type(e).__name__}: {e}")
    return out


@pytest.mark.isaaclab3
def test_builtin_lookup_raises_what_gymnasium_raises_word_for_word():
    if not PY.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{PY} missing")
        pytest.skip(f"{PY} missing: scripts/isaaclab3-venv.sh builds it")
    registered = [*TASKS, "Isaac-Cartpole-Direct"]
    real = subprocess.run([str(PY), "-c", _REAL, json.dumps(registered), json.dumps(IDS)], capture_output=True,
                          text=True, timeout=60, check=True)
    assert ours(registered) == json.loads(real.stdout)


def test_builtin_task_check_names_the_closest_registered_id_with_its_version():
    found = check_task(JobConfig(name="j", task="Isaacd-Cartpol-v0"))
    assert found.error.startswith("gymnasium.error.NameNotFound: Environment `Isaacd-Cartpol` doesn't exist.")
    assert found.closest == "Isaacd-Cartpole-v0"  # gymnasium's own hint, `Isaacd-Cartpole`, is no registered id
    problem = task_problem(JobConfig(name="j", task="Isaacd-Cartpol-v0"))
    assert problem.key == "task" and 'did you mean "Isaacd-Cartpole-v0"?' in problem.message
    assert task_problem(JobConfig(name="j")) is None


def test_jobs_whose_registry_needs_a_boot_are_not_checked(tmp_path):
    """A 2.x checkout (Isaac Sim's Kit behind isaaclab_tasks), a raw command, an --external_callback's own tasks."""
    (tmp_path / "VERSION").write_text("2.3.2\n")
    assert check_task(JobConfig(name="j", workflow="rsl_rl", isaaclab_dir=str(tmp_path), task="X-v0")) is None
    assert check_task(JobConfig(name="j", command=["python", "train.py"], task="X-v0")) is None
    assert check_task(JobConfig(name="j", task="X-v0", extra_args=["--external_callback", "pkg.reg"])) is None


@pytest.mark.isaaclab3
def test_a_3x_checkout_is_asked_through_its_isaaclab_sh(tmp_path):
    """The checkout's `isaaclab.sh -p` runs its Python; the real Isaac Lab 3.0.0's registry answers."""
    if not PY.exists():
        pytest.skip(f"{PY} missing: scripts/isaaclab3-venv.sh builds it")
    lab = tmp_path / "IsaacLab"
    (lab / "scripts" / "reinforcement_learning").mkdir(parents=True)
    (lab / "VERSION").write_text("3.0.0\n")
    (lab / "scripts" / "reinforcement_learning" / "train.py").write_text("")
    (lab / "isaaclab.sh").write_text(f'#!/bin/sh\n[ "$1" = "-p" ] && shift\nexec {PY} "$@"\n')
    (lab / "isaaclab.sh").chmod(0o755)
    found = check_task(JobConfig(name="j", workflow="rsl_rl", isaaclab_dir=str(lab), task="Isaac-Cartpole-Direct-v0"))
    assert found.error.startswith("gymnasium.error.DeprecatedEnv: Environment version `v0` for environment "
                                  "`Isaac-Cartpole-Direct` doesn't exist.")
    assert found.closest == "Isaac-Cartpole-Direct" and found.count > 100
