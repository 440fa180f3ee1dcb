#!/usr/bin/env bash
# A second venv with the real Isaac Lab 3.0.0, kit-less (Newton physics, no Isaac Sim), on the project's CPU
# torch, for the tests that run the real trainer (tests/test_isaaclab3_real.py). Cached and idempotent like
# scripts/install.sh: a re-run with nothing changed returns at once.
#   scripts/isaaclab3-venv.sh            # -> .venv-isaaclab3
#
# Outside Isaac Lab's supported matrix, on purpose: isaaclab 3.0.0 declares Requires-Python >=3.12,<3.13 and
# pins torch==2.11.0; these machines have Python 3.11 and torch 2.13.0 (CPU) on local disk. So isaaclab itself
# goes in with --no-deps --ignore-requires-python (its code parses and runs on 3.11) and its dependencies are
# named here with the versions it pins (see its METADATA), torch excepted. What that means: a bug that only
# shows on 3.12 / torch 2.11 / CUDA is not seen by these tests; the H200 runs (bench/isaaclab3_gpu.sh) use the
# supported matrix.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${ISAACLAB3_VENV:-.venv-isaaclab3}
TORCH=2.13.0
PINNED=(isaaclab==3.0.0)
# isaaclab 3.0.0's own pins (METADATA Requires-Dist), installed without their dependency resolution where it
# would pull torch 2.11 / Python-3.12-only wheels.
DEPS=(warp-lang==1.17.0 newton==1.6.1 mujoco==3.12.0 mujoco-warp==3.12.0 usd-exchange==3.0.1 rsl-rl-lib==5.5.1)
# Unpinned helpers Isaac Lab imports at run time (kit-less cart-pole path, rsl_rl/skrl/rl_games workflows).
REST=(hydra-core omegaconf gymnasium tensordict gitpython prettytable trimesh newton-usd-schemas tensorboard scipy
      psutil lazy_loader einops matplotlib pillow h5py onnx onnxscript toml rich
      # the skrl and rl_games backends (isaaclab's extra "skrl" asks skrl>=2.1.0; rl-games has no extra in 3.0.0's
      # METADATA) and Weights & Biases (extra "wandb": wandb>=0.13.11), for the one-W&B-run-per-job test
      skrl==2.1.1 rl-games==1.6.5 wandb==0.31.0
      # isaaclab_rl/rl_games/rl_games.py: `import gym.spaces` ("rl-games still expects OpenAI Gym spaces")
      gym==0.26.2
      # evaluation video (issue 41, docs/evals.md): Newton's GL viewer opens a headless EGL window through pyglet
      # (isaaclab 3.0.0 requires pyglet>=2.1.6,<3); the EGL/GL libraries are the host's (Mesa's on a CPU host:
      # scripts/test.sh installs them where missing). moviepy: VIDEO below
      "pyglet>=2.1.6,<3")
# The recorder writes MP4s with moviepy (isaaclab's extra "video": moviepy>=1.0.3,<2, with imageio, imageio-ffmpeg,
# proglog and decorator), which is not in a default install, and which Isaac Lab imports whenever it is importable
# (isaaclab/envs/utils/video_recorder.py: `from moviepy.editor import ImageSequenceClip`, 1.4 s of imports by
# `python -X importtime`, with matplotlib, scipy.ndimage and pygame; one launch 15.1 -> 12.8 s of CPU without it).
# So it lives in a directory of its own, which only the test that records a video puts on its evaluation's
# PYTHONPATH (tests/test_isaaclab3_eval.py); every other launch is a default install's, ~57 launches a suite run
# (suite time, session 20). A venv built before that had it in its site-packages: taken out below, once.
VIDEO=(moviepy==1.0.3 imageio==2.38.2 imageio-ffmpeg==0.8.1 proglog==0.1.12 decorator==4.4.2)
STAMP=$VENV/.isaacd-isaaclab3-stamp
want=$( { cat "$0"; "$PY" -VV; } | sha256sum | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  echo "isaaclab3-venv: $VENV is up to date; pip skipped"
  exit 0
fi
rm -f "$STAMP"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip=("$VENV/bin/pip" install -q --disable-pip-version-check)
# pip's resolver lists every pin of isaaclab's that this venv breaks on purpose (torch 2.11, Python 3.12, the Isaac
# Sim and visualiser extras the kit-less cart-pole never imports): said once below instead of thirty lines a run
quiet() { grep -v -e "^WARNING: Location" -e "^isaaclab .* requires " -e "dependency resolver does not currently" || true; }
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then "${pip[@]}" "torch==$TORCH" 2>&1 | quiet; fi
"${pip[@]}" --no-deps --ignore-requires-python "${PINNED[@]}" 2>&1 | quiet
"${pip[@]}" "${DEPS[@]}" "${REST[@]}" "torch==$TORCH" 2>&1 | quiet
"$VENV/bin/python" -m pip uninstall -y -q moviepy >/dev/null 2>&1 || true  # an older venv's (above); else a no-op
rm -rf "$VENV/video-extra"
"${pip[@]}" --no-deps --target "$VENV/video-extra" "${VIDEO[@]}" 2>&1 | quiet
echo "isaaclab3-venv: isaaclab's own pins torch==2.11.0 and Python 3.12 are not met here, on purpose (see docs/testing.md)"
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import isaaclab, isaaclab_rl, isaaclab_tasks, rsl_rl, warp, newton, torch  # noqa: F401
print("isaaclab3-venv: isaaclab", md.version("isaaclab"), "rsl-rl-lib", md.version("rsl-rl-lib"), "torch", torch.__version__)
PY
echo "$want" > "$STAMP"
