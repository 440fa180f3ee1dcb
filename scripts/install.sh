#!/usr/bin/env bash
# Install isaacd (idempotent).
#   scripts/install.sh                 # development / CPU training: ./.venv, editable, with the test tools
#                                      # (daemon + built-in trainer, CPU torch from PyPI's CPU wheel or local disk)
#   sudo scripts/install.sh --system   # a shared server: a venv under /opt/isaacd (ISAACD_PREFIX) that every user may
#                                      # run, linked as /usr/local/bin/isaacd (ISAACD_BIN_DIR; empty: no link)
#   PYTHON=/path/to/python3 scripts/install.sh   # another Python; default: Debian's own /usr/bin/python3 when it
#                                                # can make a venv (apt-get install python3-venv), else python3
#   ISAACD_REINSTALL=1 scripts/install.sh        # run pip even when nothing changed
# GPU hosts: see README "Installing on a GPU host" (torch with CUDA, or the container images).
#
# Why Debian's Python: the README's platform is Debian 12 / Python 3.11, and a venv links to the interpreter it was
# made from. A Python under /root (pyenv, conda) cannot be run by anyone else: on a shared server the users' `isaacd`
# then fails with "bad interpreter: Permission denied", and so do their jobs, whose trainer runs isaacd's launcher
# shim with the supervisor's Python (docs/security.md). --system refuses such a Python.
#
# A re-run with nothing changed skips pip (which spends ~20 s re-resolving an install): the stamp in the venv records
# what the last successful install was made from (pyproject.toml, this script, the Python and the torch pin; for
# --system, which copies the package, the source files too). .venv is installed editable, so source edits need no
# re-run; an existing .venv is kept on the Python it was made from (remove it to switch).
set -euo pipefail
cd "$(dirname "$0")/.."
system=
for a in "$@"; do
  case $a in
    --system) system=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "scripts/install.sh: unknown argument $a (--system, or none)" >&2; exit 2 ;;
  esac
done
TORCH=2.13.0
# runtime = "ray" (and tests/test_ray_runtime.py): Ray in the venv, the same version on every node of a cluster
RAY=2.60.0

if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null; then
  PY=/usr/bin/python3  # Debian's python3-venv; without it `-m venv` fails ("ensurepip is not available")
else
  PY=python3
fi
pip_q() { "$VENV/bin/pip" install -q --disable-pip-version-check "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
# the interpreter a venv links to (or a Python is), as "Python 3.11.2 at /usr/bin/python3.11"
base_of() {
  "$1" -c 'import os, sys; print("Python", sys.version.split()[0], "at", os.path.realpath(sys._base_executable))'
}

if [ -n "$system" ]; then
  VENV=${ISAACD_PREFIX:-/opt/isaacd}
  BIN_DIR=${ISAACD_BIN_DIR-/usr/local/bin}
  case $VENV in
    /*) ;;
    *) echo "scripts/install.sh: ISAACD_PREFIX must be an absolute path (got $VENV)" >&2; exit 2 ;;
  esac
  umask 022  # every file world-readable, every directory and program world-executable
  # the interpreter the venv will link to must be one every user may run: each directory above it searchable
  real=$("$PY" -c 'import os, sys; print(os.path.realpath(sys._base_executable))')
  p=$real
  while [ "$p" != / ]; do
    mode=$(stat -L -c %a "$p")
    if (( (8#$mode & 1) == 0 )); then
      echo "scripts/install.sh --system: $p is $(printf %04o $((8#$mode))): other users cannot run $real; use a Python they can run," \
           "e.g. Debian's: apt-get install python3-venv, then PYTHON=/usr/bin/python3 (the default when it exists)" >&2
      exit 1
    fi
    p=$(dirname "$p")
  done
  if ! mkdir -p "$VENV" 2>/dev/null || [ ! -w "$VENV" ]; then
    echo "scripts/install.sh --system: cannot write $VENV; run it as root (sudo scripts/install.sh --system)" >&2
    exit 1
  fi
else
  VENV=.venv
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
elif [ "$(base_of "$VENV/bin/python")" != "$(base_of "$PY")" ]; then
  echo "isaacd: $VENV runs on $(base_of "$VENV/bin/python"), not $(base_of "$PY") ($PY); kept as it is" \
       "(rm -rf $VENV and run this again to switch)"
fi
STAMP=$VENV/.isaacd-install-stamp
want=$( { cat pyproject.toml "$0"; "$VENV/bin/python" -VV; base_of "$VENV/bin/python"; echo "torch $TORCH";
          if [ -n "$system" ]; then
            find daemon trainer -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 | sort -z \
              | xargs -0 sha256sum
          else echo "ray $RAY"; fi; } | sha256sum | cut -d' ' -f1)
if [ -z "${ISAACD_REINSTALL:-}" ] && [ -x "$VENV/bin/isaacd" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  echo "isaacd: $VENV is up to date (nothing it is made from changed since the last install); pip skipped"
  exit 0
fi
rm -f "$STAMP"
# torch first and pinned: a bare "torch" requirement would pull a multi-GB CUDA build. A torch already in the venv
# (a CUDA build installed first on a GPU host) is kept.
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  pip_q "torch==$TORCH"
fi
if [ -n "$system" ]; then
  # a copy of the package, not an editable link into this checkout (which may lie where other users cannot read,
  # and changes under them); built from a clean copy of the sources so that nothing stale in build/ ships
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cp -r pyproject.toml README.md daemon trainer "$tmp/"
  find "$tmp" -name __pycache__ -type d -prune -exec rm -rf {} +
  pip_q --force-reinstall --no-deps "$tmp"
  pip_q "$tmp[trainer,podman,s3]"
  chmod -R a+rX "$VENV"  # whatever a wheel or root's umask left closed
  if [ -n "$BIN_DIR" ]; then
    mkdir -p "$BIN_DIR"
    ln -sfn "$VENV/bin/isaacd" "$BIN_DIR/isaacd"
  fi
else
  pip_q -e '.[trainer,podman,s3,test]'
  # ~40 s more on a first install (39.5 s measured, 2 cores, wheels from the local index), nothing on a re-run
  if ! "$VENV/bin/python" -c "import ray" 2>/dev/null; then
    pip_q "ray[default]==$RAY"
  fi
fi
where=$("$VENV/bin/python" -c "import isaacd, isaacd_trainer, rsl_rl, torch; print(torch.__version__)")
echo "$want" > "$STAMP"
if [ -n "$system" ]; then
  link=${BIN_DIR:+; $BIN_DIR/isaacd -> $VENV/bin/isaacd}
  echo "isaacd installed in $VENV for every user ($(base_of "$VENV/bin/python"), torch $where)$link;" \
       "next: sudo isaacd install-units"
else
  echo "isaacd installed in .venv ($(base_of "$VENV/bin/python"), torch $where)"
fi
