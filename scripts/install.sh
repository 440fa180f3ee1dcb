#!/usr/bin/env bash
# Install isaacd for development / CPU training into ./.venv (idempotent).
#   scripts/install.sh            # daemon + built-in trainer (CPU torch from PyPI's CPU wheel or local disk)
# GPU hosts: see README "Installing on a GPU host" (torch with CUDA, or the container images).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# torch first and pinned: a bare "torch" requirement would pull a multi-GB CUDA build.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check torch==2.13.0 2>&1 | grep -v "^WARNING: Location" || true
fi
.venv/bin/pip install -q --disable-pip-version-check -e '.[trainer,podman,test]' 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import isaacd, isaacd_trainer, rsl_rl, torch; print('isaacd installed in .venv (torch', torch.__version__ + ')')"
