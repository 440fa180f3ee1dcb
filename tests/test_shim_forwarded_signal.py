"""A stop under a launcher that forwards signals (`uv run ... python`): one SIGINT to the process group is one stop.

isaacd's process runtime sends SIGINT to the trainer's process group; `uv run` (stdin no terminal) forwards the
SIGINT it got itself to its Python child 200 ms later (crates/uv/src/child.rs, run_to_completion), so the shim sees
the same signal twice. Isaac Lab 3.0 closes its env with SIGINT at SIG_DFL (isaaclab_rl/entrypoints/common.py,
close_env): a copy landing there killed a trainer that had stopped cleanly (exit 130).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_shim_protocol import _shim_by_path  # noqa: E402
from test_trainer import PY, procs, trainer_env, wait_for  # noqa: E402

SHIM = Path(__file__).resolve().parent.parent / "trainer" / "shim.py"
UV = Path(sys.executable).parent / "uv"
__all__ = ["procs"]  # the fixture


# ------------------------------------------------------------------------------------------------ the decision
def test_a_wrapped_trainer_waits_out_the_window_for_the_forwarded_copy_before_cleanup():
    shim = _shim_by_path()  # the shim as the file it is run from
    # the wait is bounded by _FORWARDED_COPY_WAIT_S, not the 1 s duplicate window: under load the copy came later
    w = shim.hooks._FORWARDED_COPY_WAIT_S
    assert w > shim.hooks._DUPLICATE_WINDOW_S
    assert shim.hooks._forwarded_copy_wait_s(now=100.05, first_at=100.0, duplicates=0, group_leader=False) == \
        pytest.approx(w - 0.05)
    assert shim.hooks._forwarded_copy_wait_s(now=100.0 + w + 0.5, first_at=100.0, duplicates=0, group_leader=False) == 0


def test_no_wait_once_the_copy_came_or_when_nothing_sits_between_the_sender_and_the_trainer():
    shim = _shim_by_path()  # the shim as the file it is run from
    assert shim.hooks._forwarded_copy_wait_s(now=100.05, first_at=100.0, duplicates=1, group_leader=False) == 0
    assert shim.hooks._forwarded_copy_wait_s(now=100.05, first_at=100.0, duplicates=0, group_leader=True) == 0


# ------------------------------------------------------------------------------------------------ under real uv
TRAIN = """
import os, signal, sys, time
from isaacd_trainer import runtime
env_cfg, agent_cfg = runtime.load_cfgs("Isaacd-Cartpole-v0")
agent_cfg.update(device="cpu", num_steps_per_env=8, save_interval=1000)  # iterations of a few ms: a fast stop
env = runtime.make_env("Isaacd-Cartpole-v0", env_cfg, 16, "cpu", agent_cfg["seed"])
runner = runtime.make_runner(env, agent_cfg, log_dir=os.path.join(os.getcwd(), "logs"), device="cpu")
runner.learn(num_learning_iterations=100000)
print("Training time", flush=True)
# Isaac Lab 3.0's close_env: SIGINT at SIG_DFL while the env closes ("another SIGINT forces exit")
previous = signal.signal(signal.SIGINT, signal.SIG_DFL)
try:
    time.sleep(float(sys.argv[1]))  # env.close()
finally:
    signal.signal(signal.SIGINT, previous)
print("closed", flush=True)
"""


def start_under_uv(tmp_path: Path, close_seconds: float) -> tuple[subprocess.Popen, Path]:
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    ev = tmp_path / "ev.jsonl"
    env = {**trainer_env(), "ISAACD_SHIM_EVENTS": str(ev)}
    # as the process runtime starts a trainer: its own session and process group, stdin not a terminal
    p = subprocess.Popen([str(UV), "run", "--no-project", "--python", PY, "python", str(SHIM),
                          str(tmp_path / "train.py"), str(close_seconds)],
                         cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=open(tmp_path / "out", "w"),
                         stderr=open(tmp_path / "err", "w"), start_new_session=True)
    return p, ev


def shim_events(ev: Path, name: str) -> list[dict]:
    lines = ev.read_text().splitlines() if ev.exists() else []
    return [e for e in map(json.loads, lines) if e["event"] == name]


def stopped_under_uv(tmp_path: Path, procs: list, close_seconds: float) -> tuple[subprocess.Popen, Path]:  # noqa: ANN001
    """A trainer under uv, training; then one SIGINT to its process group, as ProcessRuntime.signal sends it."""
    p, ev = start_under_uv(tmp_path, close_seconds)
    procs.append(p)
    wait_for(lambda: shim_events(ev, "first_iteration"), 90, "first_iteration", p)
    time.sleep(0.3)
    os.killpg(p.pid, signal.SIGINT)
    return p, ev


@pytest.mark.timeout(120)
def test_one_sigint_to_a_uv_launchers_group_saves_once_and_exits_0_through_upstreams_cleanup(tmp_path, procs):
    p, ev = stopped_under_uv(tmp_path, procs, close_seconds=1.0)
    assert p.wait(60) == 0, (tmp_path / "err").read_text()[-3000:]
    assert "closed" in (tmp_path / "out").read_text()
    assert len(shim_events(ev, "stop_requested")) == 1 and shim_events(ev, "stopped")[0]["checkpoint"]


@pytest.mark.timeout(120)
def test_a_second_sigint_well_after_the_first_still_ends_upstreams_cleanup_at_once(tmp_path, procs):
    p, ev = stopped_under_uv(tmp_path, procs, close_seconds=30.0)
    wait_for(lambda: "Training time" in (tmp_path / "out").read_text(), 30, "learn() returned", p)
    time.sleep(1.5)  # past the window: a deliberate second request
    os.killpg(p.pid, signal.SIGINT)
    assert p.wait(20) == 128 + signal.SIGINT  # uv's code for a child killed by SIGINT
    # at once: upstream's cleanup (30 s here) never finished, so it never printed "closed"
    assert "closed" not in (tmp_path / "out").read_text()
