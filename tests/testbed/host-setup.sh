#!/usr/bin/env bash
# Make Podman run containers on this project's sandbox machines (Debian 12, root, no systemd
# as PID 1, cgroup v1 "hybrid" layout, no CAP_SYS_RESOURCE). Idempotent; safe to run often.
# On an ordinary host (systemd, cgroup v2) neither tweak below is needed and none is applied.
#
#   tests/testbed/host-setup.sh          # install + tweak + smoke test; exit 0 when Podman works
#
# Prints what it did; exits non-zero with the reason when Podman still cannot run a container.
set -euo pipefail
log() { printf 'host-setup: %s\n' "$*"; }

if ! command -v podman >/dev/null 2>&1 || ! command -v crun >/dev/null 2>&1; then
  log "installing podman and crun from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq podman crun >/dev/null
fi

# 1. Podman asks the runtime to raise RLIMIT_NOFILE/NPROC to 1048576/32768+; without
#    CAP_SYS_RESOURCE that is refused ("setrlimit RLIMIT_NOFILE: Operation not permitted").
#    Default the containers to limits at or below the ones this machine allows.
hard_nofile=$(ulimit -Hn)
hard_nproc=$(ulimit -Hu)
if [ "$hard_nofile" != unlimited ] && [ "$hard_nofile" -lt 1048576 ]; then
  nproc=32768
  [ "$hard_nproc" != unlimited ] && [ "$hard_nproc" -lt "$nproc" ] && nproc=$hard_nproc
  conf=/etc/containers/containers.conf
  want="default_ulimits = [\"nofile=${hard_nofile}:${hard_nofile}\",\"nproc=${nproc}:${nproc}\"]"
  if ! grep -qF "$want" "$conf" 2>/dev/null; then
    mkdir -p /etc/containers
    if [ -s "$conf" ] && ! grep -q '^default_ulimits' "$conf"; then
      # keep an existing file; add our key under its [containers] table (or a new one)
      if grep -q '^\[containers\]' "$conf"; then
        sed -i "/^\[containers\]/a $want" "$conf"
      else
        printf '\n[containers]\n%s\n' "$want" >>"$conf"
      fi
    elif [ -s "$conf" ]; then
      sed -i "s|^default_ulimits.*|$want|" "$conf"
    else
      printf '[containers]\n%s\n' "$want" >"$conf"
    fi
    log "set $want in $conf (hard nofile limit here is $hard_nofile)"
  fi
fi

# 2. crun refuses cgroup v1+v2 "hybrid" hosts while the v2 tree still holds a controller
#    ("cgroups in hybrid mode not supported, drop all controllers from cgroupv2"). Here that
#    controller is hugetlb, which nothing uses: give it a v1 hierarchy of its own.
uni=/sys/fs/cgroup/unified
if [ -r "$uni/cgroup.controllers" ] && [ -n "$(cat "$uni/cgroup.controllers")" ]; then
  for c in $(cat "$uni/cgroup.controllers"); do
    if ! mountpoint -q "/sys/fs/cgroup/$c"; then
      mkdir -p "/sys/fs/cgroup/$c"
      mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c"
      log "mounted the $c controller as a cgroup v1 hierarchy at /sys/fs/cgroup/$c"
    fi
  done
fi

# 3. Smoke test: a real container over an overlay of the host's own root (no image registry
#    is reachable from these machines; `--rootfs /:O` or `podman import` give local images).
if out=$(cd /tmp && timeout 120 podman run --rm --network none --rootfs /:O true 2>&1); then
  log "podman $(podman --version | awk '{print $3}') runs containers"
else
  log "podman still cannot run a container: $out"
  exit 1
fi
