#!/usr/bin/env bash
# Issue 23 on the H200, one call: run carry=[".oomwhl"] command: bash bench/cuda_oom_h200.sh
# .oomwhl: the wheels the image lacks for isaacd and its built-in trainer (pydantic, pydantic_core, annotated-types,
# typing-inspection, typing_extensions, structlog, prometheus_client, nvidia-ml-py, rsl-rl-lib, tensordict, pyvers,
# hydra-core, omegaconf, antlr4-python3-runtime, gitpython, gitdb, smmap; Python 3.12, from device-wheels.sh's list).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd); OUT=${OUT:-/tmp/cuda-oom-out}; mkdir -p "$OUT"
SITE=/tmp/site-oom; PY=$(command -v python3)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$REPO"/.oomwhl/*.whl 2>&1 | grep -vi warning | tail -3
rm -rf "$SITE/isaacd" "$SITE/isaacd_trainer"; ln -s "$REPO/daemon" "$SITE/isaacd"; ln -s "$REPO/trainer" "$SITE/isaacd_trainer"
export PYTHONPATH=$SITE
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader
$PY "$REPO/bench/cuda_oom_h200.py" --out "$OUT/cuda-oom-h200.json" "$@" 2>&1 | tee "$OUT/cuda-oom-h200.txt"
