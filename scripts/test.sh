#!/usr/bin/env bash
# The test suite, as CI runs it. Installs what the real-thing tests need when missing
# (Debian's prometheus/promtool, prometheus-alertmanager, systemd; Podman via tests/testbed/host-setup.sh;
# the real Isaac Lab 3.0.0 in .venv-isaaclab3 via scripts/isaaclab3-venv.sh), then runs pytest.
# Everything it uses is in this repository.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || scripts/install.sh
export DEBIAN_FRONTEND=noninteractive
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
  apt-get update -qq >/dev/null 2>&1 || true
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 || echo "test.sh: could not install ${need[*]}"
fi
# prometheus' postinst may try to start a service; we start our own on loopback in the tests.
for setup in tests/testbed/host-setup.sh; do
  if [ -r "$setup" ] && [ "$(id -u)" = 0 ]; then bash "$setup" || echo "test.sh: $setup failed; podman tests will say why"; fi
done
# the real Isaac Lab 3.0.0 (kit-less) for tests/test_isaaclab3_real.py: cached like install.sh (~90 s the first time)
scripts/isaaclab3-venv.sh || echo "test.sh: scripts/isaaclab3-venv.sh failed; tests/test_isaaclab3_real.py will say why"
exec .venv/bin/python -m pytest -q -ra -p no:cacheprovider "$@"
