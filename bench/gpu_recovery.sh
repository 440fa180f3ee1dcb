#!/usr/bin/env bash
# Issue 11 on a GPU host without network (the project's H200): install isaacd from a bundle into the image's
# torch Python, then bench/recovery.py on cuda:0: cold+checkpoint vs cold+snapshot vs warm spare+snapshot.
#   bench/gpu_recovery.sh BUNDLE     BUNDLE: whl/ (wheels: pydantic, structlog, rsl-rl-lib, hydra, ...), src/
set -uo pipefail
B=$(cd "$1" && pwd)
PY=$(command -v python3)
echo "python3: $PY ($($PY -V))"; nvidia-smi -L
$PY -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir "$B"/whl/*.whl "$B/src" 2>&1 \
  | grep -v WARNING | tail -5
cd "$B/src"
$PY bench/recovery.py --device cuda:0 --num-envs "${NUM_ENVS:-4096}" --steps "${STEPS:-24}" --kills "${KILLS:-3}" \
  --save-interval 50
