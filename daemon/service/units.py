"""`isaacd install-units`: the supervisor's systemd unit (and an example config) in place.

    sudo isaacd install-units                  # /etc/systemd/system/isaaclab-supervisor.service
    sudo systemctl daemon-reload
    sudo systemctl enable --now isaaclab-supervisor
    sudo isaacd install-units --agent          # on a Ray node: /etc/systemd/system/isaacd-agent.service

`--prefix DIR` installs under DIR (packaging, tests); `--bin PATH` is the isaacd executable for
ExecStart= (default: the one running this command). units/isaaclab-supervisor.service in the
source tree is this template rendered for /usr/local/bin/isaacd, units/isaacd-agent.service the agent's; a test
keeps them in sync.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..os_seam.reach import OTHERS, blocked, needs

UNIT_NAME = "isaaclab-supervisor.service"
DEFAULT_BIN = "/usr/local/bin/isaacd"
CONFIG_PATH = "/etc/isaacd/isaacd.toml"

# Both units end alike: the hardening that suits either, and the [Install] section.
_COMMON_TAIL = """\
LockPersonality=yes
RestrictRealtime=yes
SystemCallArchitectures=native
UMask=0022

[Install]
WantedBy=multi-user.target
"""

# WatchdogSec: the supervisor sends WATCHDOG=1 every 5 s from its tick loop; 30 s tolerates a slow
# tick (a daemon-reload, a stuck podman call) five times over before systemd restarts it.
SUPERVISOR_UNIT = """\
# isaacd supervisor: keeps Isaac Lab / rsl_rl training jobs alive (see `isaacd --help`).
# Installed by `isaacd install-units`; enable with `systemctl enable --now isaaclab-supervisor`.
[Unit]
Description=isaacd supervisor for Isaac Lab / rsl_rl training jobs
Documentation=file://{config}
Wants=network-online.target
After=network-online.target podman.socket
# A crash loop stops after 5 starts in 10 minutes (then `systemctl reset-failed` and read the journal).
StartLimitIntervalSec=600
StartLimitBurst=5

[Service]
# READY=1 once the config is loaded and jobs are adopted or started; STATUS= one-line summary;
# WATCHDOG=1 keepalives from the main loop.
Type=notify
NotifyAccess=main
ExecStart={bin} run --config {config}
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=5s
WatchdogSec=30s
TimeoutStartSec=120s
# process-runtime trainers get SIGINT and stop_timeout (default 30 s) to write a checkpoint
TimeoutStopSec=120s
# mixed: SIGTERM to the supervisor only; it stops its process-runtime trainers itself. Container
# jobs run in units (systemd runtime) or scopes (podman runtime) of their own, so a restart or
# upgrade of the supervisor leaves them running and the next supervisor adopts them.
KillMode=mixed
Environment=PYTHONUNBUFFERED=1
RuntimeDirectory=isaacd
RuntimeDirectoryMode=0750
StateDirectory=isaacd
StateDirectoryMode=0700
# the supervisor outlives its trainers under memory pressure
OOMScoreAdjust=-500
LimitNOFILE=65536

# Hardening that leaves Podman working. Left out on purpose:
# - ProtectSystem/ProtectHome/PrivateTmp/ProtectKernel*/ProtectControlGroups/ReadOnlyPaths: each
#   gives the unit a private mount namespace; podman commands and process-runtime trainers would
#   then see mounts the host does not (and the reverse), which breaks container storage and
#   bind-mounted log roots;
# - PrivateDevices/DevicePolicy/DeviceAllow/ProtectClock: a device allow-list on this cgroup hides
#   /dev/nvidia* from process-runtime trainers;
# - RestrictNamespaces/SystemCallFilter/RestrictAddressFamilies/NoNewPrivileges: inherited by
#   process-runtime trainers and by a `podman system service` started without systemd.
""" + _COMMON_TAIL

EXAMPLE_CONFIG = """\
# isaacd host config (installed by `isaacd install-units`; `isaacd check-config` validates it,
# `isaacd doctor` checks the host for it). Reload with `systemctl reload isaaclab-supervisor`.
[supervisor]
state_dir = "/var/lib/isaacd"
control_socket = "/run/isaacd/isaacd.sock"

[metrics]
listen = "127.0.0.1:9835"

# One job per [[jobs]] table. runtime = "systemd" runs the trainer as a Podman container in a
# unit of its own (Quadlet on Podman >= 4.4); "podman" uses the Podman API without systemd;
# "process" runs it directly.
#
# [[jobs]]
# name = "anymal-rough"
# runtime = "systemd"
# workflow = "rsl_rl"
# task = "Isaac-Velocity-Rough-Anymal-C-v0"
# num_envs = 4096
# max_iterations = 1500
# save_interval = 50
# device = "cuda:0"
# gpus = [0]
# log_root = "/data/isaacd/anymal-rough"       # on a data disk, not the system disk
# [jobs.container]
# image = "localhost/isaacd-isaaclab:2.3.2"     # containers/Containerfile.isaaclab
# shm_size = "16g"
# ports = ["6006"]                              # always published on 127.0.0.1 only
# Warp's and Kit's caches are mounted from <state_dir>/caches/<job> by default (compile_cache = "job" | "image" |
# "off" in [[jobs]]); a volume of your own at one of their places wins, e.g.
# volumes = ["/data/isaacd/cache/kit:/isaac-sim/kit/cache"]
"""


AGENT_UNIT_NAME = "isaacd-agent.service"
AGENT_UNIT = """\
# isaacd agent: GPU sampler and /metrics on a Ray node that takes runtime = "ray" jobs (no jobs run here).
# On every node: `isaacd install-units --agent`, then `systemctl enable --now isaacd-agent`.
# It reads the same config as the supervisor ([gpu], [metrics] listen, [ray] health_file); on a reset-class
# XID it marks the GPU unhealthy in the health file, which the job's Ray actor on this node reads: the job
# moves to another node and `isaacd nodes` shows this one cordoned until `isaacd uncordon NODE`.
[Unit]
Description=isaacd agent (GPU metrics and XID health) for a Ray node
Documentation=file://{config}
Wants=network-online.target
After=network-online.target
StartLimitIntervalSec=600
StartLimitBurst=5

[Service]
Type=simple
# --listen: Prometheus scrapes every node, so bind the node's address, not loopback; --node: the name the node
# has in `isaacd nodes` (its `ray start --labels isaacd/node=NAME`), default the hostname
ExecStart={bin} agent --config {config} --listen 0.0.0.0:9836
Restart=on-failure
RestartSec=5s
Environment=PYTHONUNBUFFERED=1
# /run/isaacd/agent-health.json ([ray] health_file): readable by the Ray workers on this node
RuntimeDirectory=isaacd
RuntimeDirectoryMode=0755
RuntimeDirectoryPreserve=yes
OOMScoreAdjust=-500
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths=/run/isaacd
ProtectHome=read-only
PrivateTmp=yes
""" + _COMMON_TAIL


def render_supervisor_unit(bin_path: str = DEFAULT_BIN, config: str = CONFIG_PATH) -> str:
    return SUPERVISOR_UNIT.format(bin=bin_path, config=config)


def render_agent_unit(bin_path: str = DEFAULT_BIN, config: str = CONFIG_PATH) -> str:
    return AGENT_UNIT.format(bin=bin_path, config=config)


def default_bin() -> str:
    exe = Path(sys.executable).with_name("isaacd")
    if exe.exists():
        return str(exe)
    return shutil.which("isaacd") or DEFAULT_BIN


def closed_to_others(bin_path: str) -> str | None:
    """Why a user other than its owner cannot run the isaacd at `bin_path` (its Python under /root, ...), or None."""
    for need in needs(bin_path, "the unit's isaacd"):
        if (b := blocked(need, OTHERS)) is not None and b.verb != "find":  # a missing file: warned above
            return b.line("other users")
    return None


def install_units(args: Any) -> int:
    prefix = Path(getattr(args, "prefix", None) or "/")
    bin_path = getattr(args, "bin", None) or default_bin()
    config = getattr(args, "config", None) or CONFIG_PATH
    if not os.path.isabs(bin_path):
        print(f"isaacd install-units: --bin must be an absolute path (got {bin_path!r})", file=sys.stderr)
        return 2
    if not os.access(prefix / bin_path.lstrip("/"), os.X_OK) and not os.access(bin_path, os.X_OK):
        print(f"isaacd install-units: warning: {bin_path} is not executable here", file=sys.stderr)
    elif (closed := closed_to_others(bin_path)) is not None:
        print(f"isaacd install-units: warning: {closed}; the socket group's users and the jobs that run as their "
              "owners need an install they can run: sudo scripts/install.sh --system, then install-units from it "
              "(sudo /usr/local/bin/isaacd install-units)", file=sys.stderr)

    def under(p: str) -> Path:
        return prefix / p.lstrip("/")

    agent = bool(getattr(args, "agent", False))  # a Ray node: the agent only, no supervisor
    name = AGENT_UNIT_NAME if agent else UNIT_NAME
    unit_path = under(f"/etc/systemd/system/{name}")
    unit_path.parent.mkdir(parents=True, exist_ok=True)
    unit_path.write_text((render_agent_unit if agent else render_supervisor_unit)(bin_path, config))
    os.chmod(unit_path, 0o644)
    print(f"installed {unit_path}")
    cfg_path = under(config)
    if cfg_path.exists():
        print(f"kept existing {cfg_path}")
    else:
        cfg_path.parent.mkdir(parents=True, exist_ok=True)
        cfg_path.write_text(EXAMPLE_CONFIG)
        os.chmod(cfg_path, 0o640)
        print(f"installed example config {cfg_path} (add your [[jobs]])")
    if not agent:
        under("/etc/containers/systemd").mkdir(parents=True, exist_ok=True)
    if str(prefix) == "/" and Path("/run/systemd/system").exists():
        r = subprocess.run(["systemctl", "daemon-reload"], capture_output=True, text=True)
        if r.returncode == 0:
            print("systemctl daemon-reload: done")
    if agent:
        print("next: isaacd check-config && systemctl enable --now isaacd-agent "
              "(and --node NAME in ExecStart if the node's Ray label is not its hostname)")
    else:
        print("next: isaacd check-config && isaacd doctor && systemctl enable --now isaaclab-supervisor")
    return 0
