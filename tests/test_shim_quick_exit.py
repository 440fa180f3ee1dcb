"""A stop that has saved ends the trainer at once (trainer/shim_exit.py; issue 40's exploit cost, issue 39's paused
trial's GPU): real rsl-rl-lib 5.5 on the built-in trainer, run through the shim by path as isaacd runs it.

What a user would notice: the trainer exits 0 right after the `stopped` event, with the checkpoint complete and
every iteration's TensorBoard scalars on disk, and none of the train script's code after learn() run; where that
code was not checked (the operator's switch, another caller, another logger, an env that records) the script's
own cleanup runs as before (tests/test_shim.py and test_shim_forwarded_signal.py run their own scripts: that path),
and `stopped` says why."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_trainer import PY, QUICK, V30, checkpoints, iteration_steps, procs, run_dirs, trainer_env, wait_for  # noqa: E402,E501

SHIM = str(Path(__file__).resolve().parent.parent / "trainer" / "shim.py")
UV = Path(sys.executable).parent / "uv"
BUILTIN_30 = ("isaacd_trainer.isaaclab30", "run")
__all__ = ["procs"]  # the fixture


def events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def by(evs: list[dict], name: str) -> list[dict]:
    return [e for e in evs if e["event"] == name]


def env_with(ev: Path, **extra: str) -> dict:
    return {**trainer_env(), "ISAACD_SHIM_EVENTS": str(ev), "ISAACD_SNAPSHOT_BUDGET": "0", **extra}


@pytest.mark.timeout(150)
def test_a_saved_stop_exits_at_once_with_the_checkpoint_and_every_scalar_on_disk(tmp_path, procs, runner):
    """Under `uv run`, as a uv-launched job runs: one SIGINT to the process group (ProcessRuntime.signal), which uv
    forwards again 200 ms later. The copy lands on the shim's handler (absorbed) or after the process has gone,
    never on a default handler: one stop, exit 0."""
    ev = tmp_path / "ev.jsonl"
    p = subprocess.Popen([str(UV), "run", "--no-project", "--python", PY, "python", SHIM] + V30[1:] + QUICK +
                         ["--max_iterations", "100000", "agent.save_interval=1000", "--step_delay", "0.004"],
                         cwd=tmp_path, env=env_with(ev), stdin=subprocess.DEVNULL,
                         stdout=open(tmp_path / "out", "w"), stderr=open(tmp_path / "err", "w"),
                         start_new_session=True)  # as the process runtime starts a trainer
    procs.append(p)
    wait_for(lambda: run_dirs(tmp_path) and 2 in iteration_steps(run_dirs(tmp_path)[-1]), 90, "iteration 2", p)
    os.killpg(p.pid, signal.SIGINT)
    assert p.wait(60) == 0, (tmp_path / "err").read_text()[-3000:]
    evs = events(ev)
    assert len(by(evs, "stop_requested")) == 1
    (stopped,) = by(evs, "stopped")
    assert stopped["exit_now"] is True and "cleanup" not in stopped
    n, rd = stopped["iteration"], run_dirs(tmp_path)[-1]
    assert n >= 2 and stopped["checkpoint"] == str(rd / f"model_{n}.pt") and max(checkpoints(rd)) == n
    runner.load(str(rd / f"model_{n}.pt"))  # complete: rsl_rl loads it (strict), optimizer included
    assert runner.current_learning_iteration == n
    # every iteration up to the stop's, from the writer the quick exit closed (rsl_rl's own flushes every 10 s)
    assert iteration_steps(rd) == list(range(n + 1))
    assert "exiting now" in (tmp_path / "err").read_text()
    assert "Training time:" not in (tmp_path / "out").read_text()  # the script's code after learn(): skipped


# ------------------------------------------------------------------------------------------------ the decision
@pytest.fixture(scope="module")
def runner():
    """A real rsl_rl runner on the built-in env, its TensorBoard writer made as learn() makes it."""
    import tempfile

    from isaacd_trainer import runtime

    env_cfg, agent_cfg = runtime.load_cfgs("Isaacd-Cartpole-v0")
    agent_cfg.update(device="cpu", num_steps_per_env=8)
    env = runtime.make_env("Isaacd-Cartpole-v0", env_cfg, 4, "cpu", agent_cfg["seed"])
    r = runtime.make_runner(env, agent_cfg, log_dir=tempfile.mkdtemp(prefix="quick-exit-"), device="cpu")
    r.logger.init_logging_writer()
    yield r
    r.logger.writer.close()


def test_the_built_in_trainer_with_tensorboard_may_exit_at_once(runner):
    from isaacd_trainer import shim_exit as X

    assert X.refusal(runner, BUILTIN_30) is None
    assert X.refusal(runner, ("isaacd_trainer.train_v2", "train")) is None


def test_the_operators_switch_keeps_the_scripts_cleanup(runner, monkeypatch):
    from isaacd_trainer import shim_exit as X

    monkeypatch.setenv("ISAACD_SHIM_FAST_EXIT", "0")
    assert X.refusal(runner, BUILTIN_30) == "ISAACD_SHIM_FAST_EXIT=0"


def test_code_after_learn_that_was_not_checked_keeps_the_scripts_cleanup(runner, monkeypatch):
    from torch.utils.tensorboard import SummaryWriter

    from isaacd_trainer import shim_exit as X

    assert "not checked" in X.refusal(runner, ("__main__", "<module>"))  # a user's own train script
    monkeypatch.setattr(X, "_isaaclab_version", lambda: "3.1.0")
    assert X.refusal(runner, ("isaaclab_rl.entrypoints.backends.train_rsl_rl", "_run")) == \
        "Isaac Lab 3.1.0 (checked: 3.0.0)"
    monkeypatch.setattr(X, "_isaaclab_version", lambda: "3.0.0")
    assert X.refusal(runner, ("isaaclab_rl.entrypoints.backends.train_rsl_rl", "_run")) is None

    class WandbSummaryWriter(SummaryWriter):  # rsl_rl 2.x-4.x's W&B writer is a SummaryWriter subclass
        pass

    monkeypatch.setattr(runner.logger, "writer", WandbSummaryWriter.__new__(WandbSummaryWriter))
    assert "WandbSummaryWriter finishes in the script's cleanup" in X.refusal(runner, BUILTIN_30)


def test_an_env_that_writes_on_close_or_a_waiting_thread_keeps_the_scripts_cleanup(runner, monkeypatch):
    from isaacd_trainer import shim_exit as X

    class RecordVideo:  # a wrapper with a close() of its own (gymnasium's RecordVideo, Isaac Lab's CaptureEnvSensors)
        def __init__(self, env):
            self.env = env

        def close(self):
            self.env.close()

    monkeypatch.setattr(runner, "env", RecordVideo(runner.env))
    assert "RecordVideo.close) was not checked" in X.refusal(runner, BUILTIN_30)
    monkeypatch.undo()
    release = threading.Event()
    t = threading.Thread(target=release.wait, name="uploader")
    t.start()
    try:
        assert X.refusal(runner, BUILTIN_30) == "the interpreter would wait for thread uploader"
    finally:
        release.set()
        t.join()
    monkeypatch.setitem(sys.modules, "omni.kit.app", object())
    assert X.refusal(runner, BUILTIN_30) == "omni.kit.app is loaded (its shutdown was not checked)"
    monkeypatch.setattr(X, "_env_refusal", lambda r: 1 / 0)  # a check that breaks never breaks the stop
    assert X.refusal(runner, ("isaacd_trainer.isaaclab30", "run")).startswith("omni.kit.app")
    monkeypatch.delitem(sys.modules, "omni.kit.app")
    assert X.refusal(runner, BUILTIN_30) == "the quick exit's check failed (ZeroDivisionError: division by zero)"


def test_isaac_labs_envs_close_only_where_it_writes_nothing():
    from isaacd_trainer import shim_exit as X

    class Rec:
        _dataset_file_handler = object()

    class Env:
        video_recorders: list = []
        recorder_manager = None

    env = Env()
    assert X._isaaclab_env_writes(env) is None
    env.recorder_manager = Rec()
    assert "dataset file" in X._isaaclab_env_writes(env)
    env.recorder_manager, env.video_recorders = None, [object()]
    assert "videos" in X._isaaclab_env_writes(env)
