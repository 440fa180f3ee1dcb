#!/usr/bin/env bash
# Install isaacd for development / CPU training into ./.venv (idempotent).
#   scripts/install.sh            # daemon + built-in trainer (CPU torch from PyPI's CPU wheel or local disk)
#   ISAACD_REINSTALL=1 scripts/install.sh   # run pip even when nothing changed
# GPU hosts: see README "Installing on a GPU host" (torch with CUDA, or the container images).
#
# A re-run with nothing changed skips pip (which spends ~20 s re-resolving an editable install): the stamp
# in .venv records what the last successful install was made from (pyproject.toml, this script, the
# Python and the torch pin). The package itself is installed editable, so source edits need no re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH=2.13.0
# runtime = "ray" (and tests/test_ray_runtime.py): Ray in the venv, the same version on every node of a cluster
RAY=2.60.0
STAMP=.venv/.isaacd-install-stamp
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
want=$( { cat pyproject.toml "$0"; .venv/bin/python -VV; echo "torch $TORCH"; echo "ray $RAY"; } | sha256sum | cut -d' ' -f1)
if [ -z "${ISAACD_REINSTALL:-}" ] && [ -x .venv/bin/isaacd ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  echo "isaacd: .venv is up to date (pyproject.toml and install.sh unchanged since the last install); pip skipped"
  exit 0
fi
rm -f "$STAMP"
# torch first and pinned: a bare "torch" requirement would pull a multi-GB CUDA build.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check "torch==$TORCH" 2>&1 | grep -v "^WARNING: Location" || true
fi
.venv/bin/pip install -q --disable-pip-version-check -e '.[trainer,podman,s3,test]' 2>&1 | grep -v "^WARNING: Location" || true
# ~40 s more on a first install (39.5 s measured, 2 cores, wheels from the local index), nothing on a re-run
if ! .venv/bin/python -c "import ray" 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check "ray[default]==$RAY" 2>&1 | grep -v "^WARNING: Location" || true
fi
.venv/bin/python -c "import isaacd, isaacd_trainer, rsl_rl, torch; print('isaacd installed in .venv (torch', torch.__version__ + ')')"
echo "$want" > "$STAMP"
