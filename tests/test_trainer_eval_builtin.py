"""The built-in trainer's evaluation mode, end to end (issue 41; /work/notes/eval-design.md B): real processes, real
rsl_rl, the real checkpoints of a short training run, started as the daemon starts an evaluation (the job's own
command line, ``ISAACD_EVAL_*`` set).

One checkpoint evaluated twice, once through the launcher shim in Isaac Lab 3.x mode and once through ``isaacd-train``
(2.1 mode, no shim), gives the same scores: fixed seed, the policy's deterministic action. A torn checkpoint is the
error JSON and a nonzero exit. The ``Eval/*`` scalars are in their own event files, read by isaacd's own reader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from isaacd.observations.tensorboard import TensorBoardTail
from isaacd_trainer import eval_core

PY = sys.executable
SHIM = str(Path(__file__).resolve().parents[1] / "trainer" / "shim.py")
TASK = "Isaacd-Cartpole-v0"
# the job's command line (tests/test_trainer.py's quick form): 16 envs x 8 steps an iteration, policy on the CPU
ARGS = ["--task", TASK, "--device", "cpu", "--num_envs", "16", "--seed", "3", "agent.num_steps_per_env=8",
        "agent.device=cpu", "agent.save_interval=1", "--max_iterations", "3"]
V30 = ["-m", "isaacd_trainer.isaaclab30", "--rl_library", "rsl_rl"]
V21 = ["-m", "isaacd_trainer"]
SCORES = ("episodes", "return_mean", "return_std", "length_mean", "length_std", "success_rate")


def env(extra: dict[str, str] | None = None) -> dict[str, str]:
    import os

    out = {k: v for k, v in os.environ.items() if not k.startswith("ISAACD_")}
    out.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **(extra or {}))
    return out


def eval_env(ckpt: Path, iteration: int, result: Path) -> dict[str, str]:
    run = ckpt.parent
    return env({"ISAACD_EVAL": "1", "ISAACD_EVAL_CHECKPOINT": str(ckpt), "ISAACD_EVAL_ITERATION": str(iteration),
                "ISAACD_EVAL_EPISODES": "24", "ISAACD_EVAL_NUM_ENVS": "8", "ISAACD_EVAL_SEED": "11",
                "ISAACD_EVAL_DEVICE": "cpu", "ISAACD_EVAL_RESULT": str(result),
                "ISAACD_EVAL_TB_DIR": str(run / "eval"), "ISAACD_EVAL_VIDEO": "0",
                "ISAACD_EVAL_VIDEO_DIR": str(run / "eval" / "videos")})


def test_same_checkpoint_same_scores_and_a_torn_one_is_refused(tmp_path):
    subprocess.run([PY, SHIM, *V30, *ARGS], cwd=tmp_path, env=env(), check=True, capture_output=True, timeout=300)
    (run,) = (tmp_path / "logs" / "rsl_rl" / "cartpole").iterdir()
    ckpt = run / "model_2.pt"
    torn = run / "model_5.pt"
    torn.write_bytes(ckpt.read_bytes()[: ckpt.stat().st_size // 2])  # a checkpoint cut short by a crash
    before = sorted(p.name for p in run.iterdir())

    # the daemon's launch: the same command line (the shim's eval mode; isaacd-train's own check without it)
    runs = {"shim-3.x": ([PY, SHIM, *V30, *ARGS], ckpt, 2, run / "a.eval.json"),
            "2.1": ([PY, *V21, *ARGS], ckpt, 2, run / "b.eval.json"),
            "torn": ([PY, SHIM, *V30, *ARGS], torn, 5, run / "model_5.pt.eval.json"),
            # another library's job: refused before anything loads (built-in skrl, without the shim)
            "skrl": ([PY, "-m", "isaacd_trainer.isaaclab30", "--rl_library", "skrl", "--task", TASK], ckpt, 2,
                     run / "skrl.eval.json")}
    procs = {k: subprocess.Popen(cmd, cwd=tmp_path, env=eval_env(c, it, res), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True) for k, (cmd, c, it, res) in runs.items()}
    out = {k: p.communicate(timeout=300)[0] for k, p in procs.items()}
    codes = {k: p.returncode for k, p in procs.items()}
    assert codes == {"shim-3.x": 0, "2.1": 0, "torn": eval_core.EXIT_EVAL_ERROR, "skrl": eval_core.EXIT_EVAL_ERROR}, out
    assert "evaluation of skrl checkpoints is not built yet" in json.loads(runs["skrl"][3].read_text())["error"]

    a, b = (json.loads(runs[k][3].read_text()) for k in ("shim-3.x", "2.1"))
    assert {k: a[k] for k in SCORES} == {k: b[k] for k in SCORES}, (a, b)
    assert a["episodes"] == 24 and a["num_envs"] == 8 and a["seed"] == 11 and a["iteration"] == 2
    assert a["checkpoint"] == str(ckpt) and a["task"] == TASK and a["library"] == "rsl_rl" and a["deterministic"]
    assert a["length_mean"] > 1 and a["return_std"] >= 0 and a["device"] == "cpu"

    err = json.loads(runs["torn"][3].read_text())
    assert set(err) == {"version", "checkpoint", "iteration", "error"} and err["iteration"] == 5
    assert err["checkpoint"] == str(torn) and "does not load" in err["error"], err

    # Eval/* at step = the iteration, in the eval's own event files (one per evaluation); none in training's
    points = TensorBoardTail(run / "eval").poll()
    assert sorted((p.step, p.tag) for p in points) == [(2, "Eval/length_mean"), (2, "Eval/length_mean"),
                                                      (2, "Eval/return_mean"), (2, "Eval/return_mean"),
                                                      (2, "Eval/return_std"), (2, "Eval/return_std")]
    assert all(abs(p.value - a["return_mean"]) < 1e-3 for p in points if p.tag == "Eval/return_mean")  # float32
    assert not any(p.tag.startswith("Eval/") for p in TensorBoardTail(run).poll())
    # nothing else written: no new run dir, nothing exported beside the checkpoint
    assert [p.name for p in (tmp_path / "logs" / "rsl_rl" / "cartpole").iterdir()] == [run.name]
    assert sorted(p.name for p in run.iterdir()) == sorted(before + ["a.eval.json", "b.eval.json", "eval",
                                                                     "model_5.pt.eval.json", "skrl.eval.json"])
