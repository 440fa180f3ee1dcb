"""Checkpoint evaluation on the real Isaac Lab 3.0.0 on the CPU (issue 41; /work/notes/eval-design.md B): no stand-in.

A cart-pole (16 envs) trains briefly through the launcher shim, as isaacd launches it (`<venv python> shim.py -m
isaaclab train --rl_library rsl_rl ...`). Then its iteration-0 checkpoint and its last one are evaluated as the daemon
starts an evaluation: the same command line with `ISAACD_EVAL=1` and the `ISAACD_EVAL_*` variables. The shim runs
Isaac Lab's own `isaaclab play` on each (its inference policy: deterministic actions), counts the episodes at
`RslRlVecEnvWrapper.step` and ends the play loop through upstream's own KeyboardInterrupt suppression: exit 0, the
result JSON, `Eval/*` in the eval's own event file. The trained checkpoint scores higher than the untrained one.
The trained one's evaluation asks for video (`[jobs.eval] video = true`) on the CPU: the shim records from Newton's
GL viewer, headless through pyglet's EGL window on Mesa's llvmpipe (the EGL libraries are the host's, pyglet comes
with scripts/isaaclab3-venv.sh, and moviepy, Isaac Lab's extra "video", from its `video-extra` dir, on that
evaluation's PYTHONPATH only: see the script), and the result names an MP4 and a small GIF of the cart-poles.

Cost: one boot and 20 iterations of training, then the two evaluations at once (each a boot and 16 episodes). The
video (100 frames drawn at 640x360, their MP4 and GIF) takes the trained one's evaluation from ~10 s to ~18 s; the
test alone, on the 2-core host at load 1.3-1.9, alternated: 31.5 and 30.0 s without it, 34.8 and 33.3 s with it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from isaaclab3_helpers import ASSET_ROOT, PY, TASK
from test_isaaclab3_real import _real_isaaclab  # noqa: F401 (the fixture: skip without the venv, fail in CI)

from PIL import Image

from isaacd.observations.tensorboard import TensorBoardTail

pytestmark = [pytest.mark.slow, pytest.mark.isaaclab3]

SHIM = str(Path(__file__).resolve().parents[1] / "trainer" / "shim.py")
ITERATIONS = 20
VIDEO_EXTRA = PY.parent.parent / "video-extra"  # scripts/isaaclab3-venv.sh: moviepy, outside the venv
# the command line isaacd builds for a pip-installed 3.0 rsl_rl job (daemon/workflows/rsl_rl.py), cold start
TRAIN = ["-m", "isaaclab", "train", "--rl_library", "rsl_rl", "--task", TASK, "--num_envs", "16", "--seed", "42",
         "--max_iterations", str(ITERATIONS), "--device", "cpu", "--experiment_name", "cartpole", "--run_name", "ev",
         "agent.save_interval=100", "agent.device=cpu"]


def env(extra: dict[str, str] | None = None) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("ISAACD_")}
    # the hand-written cart-pole and the user's Warp kernel cache, as tests/test_isaaclab3_real.py's jobs
    out.update(ISAACSIM_ASSET_ROOT=str(ASSET_ROOT), WARP_CACHE_PATH=str(Path.home() / ".cache" / "warp"),
               PYTHONUNBUFFERED="1", ISAACD_SNAPSHOT_EVERY="0", **(extra or {}))
    return out


def test_two_checkpoints_of_a_trained_cartpole_the_later_scores_higher(tmp_path):
    subprocess.run([str(PY), SHIM, *TRAIN], cwd=tmp_path, env=env(), check=True, stdout=open(tmp_path / "train.log",
                   "w"), stderr=subprocess.STDOUT, timeout=600)
    (run,) = (tmp_path / "logs" / "rsl_rl" / "cartpole").iterdir()
    last = ITERATIONS - 1
    assert (run / "model_0.pt").is_file() and (run / f"model_{last}.pt").is_file()

    procs = {}
    for it in (0, last):
        ck = run / f"model_{it}.pt"
        extra = {"ISAACD_EVAL": "1", "ISAACD_EVAL_CHECKPOINT": str(ck), "ISAACD_EVAL_ITERATION": str(it),
                 "ISAACD_EVAL_EPISODES": "16", "ISAACD_EVAL_NUM_ENVS": "16", "ISAACD_EVAL_SEED": "7",
                 "ISAACD_EVAL_DEVICE": "cpu", "ISAACD_EVAL_RESULT": f"{ck}.eval.json",
                 "ISAACD_EVAL_TB_DIR": str(run / "eval"), "ISAACD_EVAL_VIDEO": "100" if it == last else "0",
                 "ISAACD_EVAL_VIDEO_DIR": str(run / "eval" / "videos")}
        if it == last:  # Isaac Lab's extra "video" (moviepy), installed for this evaluation only
            extra["PYTHONPATH"] = os.pathsep.join(filter(None, [str(VIDEO_EXTRA), os.environ.get("PYTHONPATH")]))
        procs[it] = subprocess.Popen([str(PY), SHIM, *TRAIN], cwd=tmp_path, env=env(extra),
                                     stdout=open(tmp_path / f"eval{it}.log", "w"), stderr=subprocess.STDOUT)
    codes = {it: p.wait(timeout=600) for it, p in procs.items()}
    logs = {it: (tmp_path / f"eval{it}.log").read_text(errors="replace")[-3000:] for it in procs}
    assert codes == {0: 0, last: 0}, logs
    for it in procs:  # upstream's play ran, on the chosen checkpoint, and ended by its own Ctrl-C path
        assert "Policy playback is running" in logs[it] and f"model_{it}.pt: return" in logs[it], logs[it]

    first, trained = (json.loads((run / f"model_{it}.pt.eval.json").read_text()) for it in (0, last))
    for doc, it in ((first, 0), (trained, last)):
        assert doc["iteration"] == it and doc["episodes"] == 16 and doc["num_envs"] == 16 and doc["seed"] == 7
        assert doc["task"] == TASK and doc["library"] == "rsl_rl" and doc["device"] == "cpu" and doc["deterministic"]
        assert doc["length_mean"] > 0 and doc["return_std"] >= 0
        # the 3.0 cart-pole logs Metrics/success_rate (survived to the time-out)
        assert doc["success_rate"] is not None and 0.0 <= doc["success_rate"] <= 1.0
    assert trained["return_mean"] > first["return_mean"] and trained["length_mean"] > first["length_mean"], (
        first, trained)
    assert first["video"] is None and first["video_reason"] is None  # no video asked for
    # video on the CPU: an MP4 and a GIF beside it, named in the result (else its video_reason says what is missing)
    assert trained["video_reason"] is None and trained["video"] and trained["gif"], (trained, logs[last])
    mp4, gif = Path(trained["video"]), Path(trained["gif"])
    assert mp4.parent == run / "eval" / "videos" and mp4.suffix == ".mp4" and gif == mp4.with_suffix(".gif")
    assert mp4.stat().st_size > 10_000 and mp4.read_bytes()[4:8] == b"ftyp"
    with Image.open(gif) as image:  # small enough for a chat message, and not a blank frame: the scene was drawn
        assert image.format == "GIF" and image.width <= 320 and image.n_frames >= 5 and gif.stat().st_size < 1_000_000
        low, high = image.convert("L").getextrema()
        assert high - low > 30, (low, high)

    scalars = {(p.step, p.tag): p.value for p in TensorBoardTail(run / "eval").poll()}
    assert abs(scalars[(last, "Eval/return_mean")] - trained["return_mean"]) < 1e-3
    assert (0, "Eval/return_mean") in scalars and (0, "Eval/success_rate") in scalars
    assert not (run / "exported").exists()  # upstream play's JIT/ONNX export is skipped in an evaluation
    print(f"real Isaac Lab 3.0, CPU: model_0 {first['return_mean']:.2f} (length {first['length_mean']:.0f}), "
          f"model_{last} {trained['return_mean']:.2f} (length {trained['length_mean']:.0f}); eval "
          f"{first['duration_seconds']:.0f} s / {trained['duration_seconds']:.0f} s with video ({mp4.stat().st_size} "
          f"B MP4, {gif.stat().st_size} B GIF)")
