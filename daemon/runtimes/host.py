"""What this host offers the container runtimes: Podman, the commands isaacd runs, cgroups and resource limits.

Facts read from the host (the podman binary and its version, containers.conf's default ulimits, whether the
memlock limit can be raised) and the two ways isaacd touches it from the podman and systemd runtimes: running a
command with a timeout (`run_cmd`) and listing a cgroup's processes (`cgroup_pids`). Nothing here knows about a
job; `container_spec` and the runtimes do.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import tomllib
from pathlib import Path

from .base import RuntimeFailure

# systemd's per-service variables, never handed to a child (a podman or systemctl isaacd runs, or a container):
# NOTIFY_SOCKET would let the trainer's podman claim the supervisor unit's main PID (see launch.TRAINER_ENV_DROP).
SYSTEMD_SERVICE_ENV = ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "WATCHDOG_USEC", "WATCHDOG_PID")

CAP_SYS_RESOURCE = 24
CONTAINERS_CONF_FILES = (Path("/usr/share/containers/containers.conf"), Path("/etc/containers/containers.conf"))
CONTAINERS_CONF_DROPINS = Path("/etc/containers/containers.conf.d")


# ---- Podman ---------------------------------------------------------------------------------
def podman_binary() -> str | None:
    return os.environ.get("ISAACD_PODMAN") or shutil.which("podman")


def podman_version(podman: str | None = None) -> tuple[int, ...] | None:
    podman = podman or podman_binary()
    if not podman:
        return None
    try:
        out = subprocess.run([podman, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def containers_conf_ulimits() -> list[str]:
    """`default_ulimits` from containers.conf, which the podman CLI applies and the API does not."""
    files = list(CONTAINERS_CONF_FILES)
    if CONTAINERS_CONF_DROPINS.is_dir():
        files += sorted(CONTAINERS_CONF_DROPINS.glob("*.conf"))
    out: list[str] = []
    for f in files:
        try:
            data = tomllib.loads(f.read_text())
        except (OSError, tomllib.TOMLDecodeError):
            continue
        v = data.get("containers", {}).get("default_ulimits")
        if isinstance(v, list):
            out = [str(x) for x in v]
    return out


# ---- resource limits ------------------------------------------------------------------------
def has_cap_sys_resource() -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapBnd:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    except OSError:
        pass
    return True


def memlock_ulimit() -> str:
    """memlock=-1:-1 (what CUDA/NCCL pinned memory wants), or the most this host grants.

    Without CAP_SYS_RESOURCE in the bounding set (unprivileged containers, nspawn) the OCI runtime
    cannot raise a hard limit, and the container fails with "setrlimit RLIMIT_MEMLOCK: Operation
    not permitted"; then pass the current hard limit. `isaacd doctor` reports it.
    """
    if has_cap_sys_resource():
        return "memlock=-1:-1"
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard == resource.RLIM_INFINITY:
        return "memlock=-1:-1"
    return f"memlock={hard}:{hard}"


# ---- commands -------------------------------------------------------------------------------
def clean_env() -> dict[str, str]:
    """The supervisor's environment minus systemd's notify/watchdog/socket variables, for the
    podman/systemctl commands it runs (a podman child must never talk to our NOTIFY_SOCKET)."""
    return {k: v for k, v in os.environ.items() if k not in SYSTEMD_SERVICE_ENV}


def run_cmd(argv: list[str], timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=clean_env(),
                           stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise RuntimeFailure(f"{argv[0]}: not found") from None
    except subprocess.TimeoutExpired:
        raise RuntimeFailure(f"`{' '.join(argv)}` did not finish within {timeout:g} s") from None
    if check and r.returncode != 0:
        raise RuntimeFailure(f"`{' '.join(argv)}` failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-800:]}")
    return r


# ---- cgroups --------------------------------------------------------------------------------
def cgroup_roots() -> list[Path]:
    """Where systemd's cgroup paths live: /sys/fs/cgroup on cgroup2, the unified/systemd
    hierarchy on hybrid/v1 hosts."""
    base = Path("/sys/fs/cgroup")
    return [p for p in (base, base / "unified", base / "systemd") if (p / "cgroup.procs").exists()]


def cgroup_pids(cgroup: str, skip: tuple[str, ...] = (), only_prefix: str | None = None) -> list[int]:
    """All PIDs in a cgroup subtree (in our PID namespace), skipping child cgroups named in `skip`;
    with `only_prefix`, only those below a direct child whose name starts with it."""
    for root in cgroup_roots():
        top = root / cgroup.lstrip("/")
        if not top.is_dir():
            continue
        pids: list[int] = []
        for dirpath, dirnames, filenames in os.walk(top):
            at_top = os.path.samefile(dirpath, top)
            dirnames[:] = [d for d in dirnames if d not in skip and
                           (not at_top or only_prefix is None or d.startswith(only_prefix))]
            if at_top and only_prefix is not None:
                continue
            try:
                with open(os.path.join(dirpath, "cgroup.procs")) as fh:
                    pids += [int(x) for x in fh.read().split()]
            except OSError:
                continue
        return pids
    return []
