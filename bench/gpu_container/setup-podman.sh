#!/usr/bin/env bash
# Podman 4.3.1 from Debian 12's packages on a machine that has none and cannot reach a registry
# (the project's H200 test machine: Ubuntu 24.04 in a Firecracker VM, root, cgroup2, no systemd as
# PID 1). Unpacks the carried .debs into a prefix, makes only the libraries this machine lacks
# visible to the dynamic linker (never replacing its own), and writes containers.conf for a host
# without systemd. Then writes the CDI spec (cdi_generate.py) and smoke-tests a container.
#
#   setup-podman.sh DEB_DIR [PREFIX=/opt/isaacd-podman]
set -euo pipefail
DEBS=$(cd "$1" && pwd); P=${2:-/opt/isaacd-podman}
HERE=$(cd "$(dirname "$0")" && pwd)
log() { printf 'setup-podman: %s\n' "$*"; }
mkdir -p "$P/root" "$P/lib"
for f in "$DEBS"/*.deb; do dpkg -x "$f" "$P/root"; done
# Libraries: only sonames this machine's linker does not know already.
have=$(ldconfig -p | awk 'NR>1 {print $1}' | sort -u)
added=()
for d in "$P"/root/usr/lib/x86_64-linux-gnu "$P"/root/lib/x86_64-linux-gnu; do
  [ -d "$d" ] || continue
  # the sonames of the libraries in $d, as the dynamic linker names them ("soname -> file")
  for n in $(ldconfig -N -v -n "$d" 2>/dev/null | awk '$2 == "->" {print $1}'); do
    if ! grep -qxF "$n" <<<"$have"; then ln -sf "$(readlink -f "$d/$n")" "$P/lib/$n"; added+=("$n"); fi
  done
done
echo "$P/lib" > /etc/ld.so.conf.d/zz-isaacd-podman.conf; ldconfig
log "libraries added from Debian 12 (missing here): ${added[*]:-none}"
for b in podman conmon crun; do
  ln -sf "$P/root/usr/bin/$b" "/usr/local/bin/$b"
  if ldd "$P/root/usr/bin/$b" | grep -q 'not found'; then log "$b: missing libraries:"; ldd "$P/root/usr/bin/$b" | grep 'not found'; exit 1; fi
done
# Configuration from golang-github-containers-common/-image (policy.json, registries, seccomp.json, ...)
mkdir -p /etc/containers /usr/share/containers
cp -rn "$P"/root/etc/containers/. /etc/containers/ 2>/dev/null || true
cp -rn "$P"/root/usr/share/containers/. /usr/share/containers/ 2>/dev/null || true
# No systemd as PID 1: cgroupfs manager, file event log (isaacd reads `podman events`), and no
# network stack carried (no netavark/CNI plugins/iptables): containers get a private netns with
# loopback only, which a training job needs (no ports are published in this run).
# Without CAP_SYS_RESOURCE (this VM's bounding set lacks it) crun cannot raise RLIMIT_NOFILE/NPROC to
# Podman's defaults (1048576): default the containers to the hard limits this machine has.
hn=$(ulimit -Hn); hu=$(ulimit -Hu); [ "$hn" = unlimited ] && hn=1048576; [ "$hu" = unlimited ] && hu=32768
[ "$hu" -gt 32768 ] && hu=32768; [ "$hn" -gt 1048576 ] && hn=1048576
cat > /etc/containers/containers.conf <<CONF
[containers]
netns = "none"
default_ulimits = ["nofile=$hn:$hn", "nproc=$hu:$hu"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "crun"
conmon_path = ["$P/root/usr/bin/conmon"]
[engine.runtimes]
crun = ["$P/root/usr/bin/crun"]
CONF
if [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" = Y ] && ! command -v apparmor_parser >/dev/null; then
  # Podman would load its AppArmor profile with apparmor_parser, which this machine lacks
  sed -i 's/^\[containers\]$/[containers]\napparmor_profile = "unconfined"/' /etc/containers/containers.conf
  log "AppArmor is on but apparmor_parser is missing: containers run unconfined by AppArmor"
fi
# Container storage: overlay, on a filesystem that can be an overlay upper layer
gr=/var/lib/containers/storage
mkdir -p $gr
fst=$(stat -f -c %T $gr)
if [ "$fst" = overlayfs ] || [ "$fst" = overlay ]; then
  mountpoint -q /var/lib/containers || mount -t tmpfs -o size=20g tmpfs /var/lib/containers
  mkdir -p $gr; log "/var/lib/containers is on overlayfs: storage on a tmpfs instead"
fi
cat > /etc/containers/storage.conf <<CONF
[storage]
driver = "overlay"
runroot = "/run/containers/storage"
graphroot = "$gr"
CONF
log "podman $(podman --version | awk '{print $3}'), conmon $(conmon --version | head -1 | awk '{print $3}'), crun $(crun --version | head -1 | awk '{print $3}')"
# The CDI spec
python3 "$HERE/cdi_generate.py" --output /etc/cdi/nvidia.yaml
if out=$(cd /tmp && timeout 120 podman run --rm --rootfs /:O true 2>&1); then
  log "a container runs (--rootfs /:O)"
else
  log "podman cannot run a container: $out"; exit 1
fi
