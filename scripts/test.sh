#!/usr/bin/env bash
# The test suite, as CI runs it. Installs what the real-thing tests need when missing
# (Debian's prometheus/promtool, prometheus-alertmanager, systemd; Podman via tests/testbed/host-setup.sh;
# the real Isaac Lab 3.0.0 in .venv-isaaclab3 via scripts/isaaclab3-venv.sh, and Mesa's EGL for its video), then runs
# pytest.
# Everything it uses is in this repository.
#   scripts/test.sh                      # the whole suite: everything above is set up (what CI runs)
#   scripts/test.sh tests/FILE.py ...    # only what the named files' pytest markers ask for (pyproject.toml):
#                                        # prometheus, systemd (+ Podman), podman, isaaclab3, shared_install; none:
#                                        # just pytest
#   scripts/test.sh --fast               # the inner loop (~30 s on 2 cores): files measured fast, no real-thing marks
#                                        # (tests/conftest.py is_fast); sets nothing up beyond .venv
# The whole suite and --fast run on ISAACD_TEST_WORKERS pytest-xdist workers (default: the CPU count + 1, at least 2):
# most e2e tests wait on their trainers. tests/conftest.py keeps what cannot share the host on one worker.
# ISAACD_TEST_PLAN=1 prints what would be set up, and runs nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
# The test paths among the arguments (FILE, DIR, FILE::test); none (or only options, e.g. -k) is the whole suite.
paths=()
prev=
fast=
for a in "$@"; do
  [ "$a" = --fast ] && fast=1
done
for a in "$@"; do
  p=${a%%::*}
  case $prev in  # the value of an option is no test path (`--deselect tests/x.py::t` runs everything else)
    --deselect|--ignore|--ignore-glob|-k|-m|-p|-c|--rootdir|--confcutdir|--basetemp|-o) ;;
    *) { [ -f "$p" ] || [ -d "$p" ]; } && paths+=("$p") ;;
  esac
  prev=$a
done
if [ -n "$fast" ]; then
  wants=""  # the fast tier runs none of the real-thing tests
elif [ ${#paths[@]} -eq 0 ]; then
  wants="prometheus systemd podman isaaclab3 shared_install"
else
  wants=$(grep -rhoE --include='*.py' 'pytest\.mark\.(prometheus|systemd|podman|isaaclab3|shared_install)\b' "${paths[@]}" \
          | sed 's/pytest\.mark\.//' | sort -u | paste -sd' ')
fi
want() { [[ " $wants " == *" $1 "* ]]; }
if [ -n "${ISAACD_TEST_PLAN:-}" ]; then
  echo "test.sh sets up: ${wants:-nothing}"
  exit 0
fi
[ ${#paths[@]} -gt 0 ] && echo "test.sh: ${paths[*]} need: ${wants:-no setup beyond .venv}"
[ -x .venv/bin/python ] || scripts/install.sh
export DEBIAN_FRONTEND=noninteractive
need=()
if want prometheus; then
  command -v promtool >/dev/null 2>&1 || need+=(prometheus)
  command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
fi
if want systemd; then
  command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
fi
# evaluation video on the CPU (tests/test_isaaclab3_eval.py): Newton's GL viewer draws through Mesa's EGL (llvmpipe)
if want isaaclab3; then
  libs=$(ldconfig -p 2>/dev/null || true)
  [[ $libs == *"libEGL_mesa.so.0 "* && $libs == *"libGL.so.1 "* ]] \
    || need+=(libegl1 libegl-mesa0 libgl1 libgl1-mesa-dri)
fi
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
  apt-get update -qq >/dev/null 2>&1 || true
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 || echo "test.sh: could not install ${need[*]}"
fi
# prometheus' postinst may try to start a service; we start our own on loopback in the tests.
# Podman: for the podman tests and the systemd ones (the host's systemd-analyze verify needs /usr/bin/podman).
if want podman || want systemd; then
  for setup in tests/testbed/host-setup.sh; do
    if [ -r "$setup" ] && [ "$(id -u)" = 0 ]; then bash "$setup" || echo "test.sh: $setup failed; podman tests will say why"; fi
  done
fi
# the real Isaac Lab 3.0.0 (kit-less) for tests/test_isaaclab3_real.py: cached like install.sh (~90 s the first time)
if want isaaclab3; then
  scripts/isaaclab3-venv.sh || echo "test.sh: scripts/isaaclab3-venv.sh failed; tests/test_isaaclab3_real.py will say why"
fi
# the shared-server install (scripts/install.sh --system: a venv on Debian's /usr/bin/python3 that every user may run)
# for tests/test_shared_install.py, in a prefix of its own (not a real /opt/isaacd), its `isaacd` linked in link/:
# ~45 s the first time, nothing on a re-run with the same sources (its stamp)
if want shared_install && [ "$(id -u)" = 0 ]; then
  export ISAACD_TEST_PREFIX=${ISAACD_TEST_PREFIX:-/opt/isaacd-test}
  ISAACD_PREFIX=$ISAACD_TEST_PREFIX ISAACD_BIN_DIR=$ISAACD_TEST_PREFIX/link scripts/install.sh --system \
    || echo "test.sh: scripts/install.sh --system failed; tests/test_shared_install.py will say why"
fi
# several workers for the whole suite and --fast (not for named files: a file is one worker's unit anyway),
# unless the caller chose (-n / -p no:xdist)
parallel=()
if { [ ${#paths[@]} -eq 0 ] || [ -n "$fast" ]; } && [[ " $* " != *" -n "* && " $* " != *" -n"[0-9]* && " $* " != *"no:xdist"* ]]; then
  # one more worker than cores: with as many as cores the CPU idled 14 % of the suite (each e2e test waits on its
  # trainers, deadlines and backoffs), 1312 s of pytest on 2 cores; with 3 workers it idled ~2 %, 1120 s, same
  # machine, same day, and no test failed (session 20, docs/testing.md)
  workers=${ISAACD_TEST_WORKERS:-$(( $(nproc 2>/dev/null || echo 2) + 1 ))}
  [ "$workers" -lt 2 ] && workers=2
  parallel=(-n "$workers" --dist loadscope --no-loadscope-reorder)
fi
# the whole suite names its 40 slowest tests at the end: the 20-minute budget is spent where they say
[ ${#paths[@]} -eq 0 ] && [ -z "$fast" ] && parallel+=(--durations=40)
exec .venv/bin/python -m pytest -q -ra -p no:cacheprovider "${parallel[@]}" "$@"
