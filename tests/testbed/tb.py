"""A throw-away "host in a box" for isaacd's systemd/Podman tests and the container-recovery bench.

Builds on tests/testbed/systemd-testbed.sh (which debootstraps and caches a Debian trixie rootfs
with systemd 257 + Podman 5.4 under /tmp/testbed/rootfs, ~60 s once), but boots its own instance:

- an overlayfs over the cached rootfs, so every boot starts from the same clean state and the
  shared rootfs is never written;
- Podman's storage (/var/lib/containers) on a plain directory, since overlay-on-overlay upper dirs
  are not allowed;
- bind mounts for what the tests need inside (this checkout and its venv, the pyenv Python);
- the same nspawn flags as systemd-testbed.sh (SYSTEMD_SECCOMP=0, pure cgroup2, no registration)
  and its own cgroup subtree, so stop() cleans up with rmdir.

Inside, the default container network namespace is "none": on the nspawn route the testbed shares
the host's network namespace, so a netavark bridge would change the host.

    tb = Testbed(binds=["/work/main", "/root/.pyenv"]); tb.boot(); tb.sh("systemctl is-system-running")
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

# The repository carries its own copy: the tests must not depend on files outside the checkout.
TB_SCRIPT = Path(os.environ.get("ISAACD_TB_SCRIPT", Path(__file__).resolve().parent / "systemd-testbed.sh"))
TB_DIR = Path(os.environ.get("TB_DIR", "/tmp/testbed"))
LOWER = TB_DIR / "rootfs"

CONTAINERS_CONF = """[containers]
# see tests/testbed/README.md: no CAP_SYS_RESOURCE, no pids controller, read-only /proc/sys
default_ulimits = ["nofile={nofile}:{nofile}","nproc=32768:32768"]
pids_limit = 0
default_sysctls = []
# the nspawn testbed shares the host's network namespace: no bridges in there
netns = "none"
"""


class TestbedUnavailable(Exception):
    """Why the testbed cannot run on this machine (used as a pytest skip reason)."""


def unavailable_reason() -> str | None:
    """Why the testbed cannot even be attempted here; missing packages are not a reason, since
    ensure_rootfs() installs them (apt) through the script's `prep`."""
    if os.geteuid() != 0:
        return "the systemd testbed needs root"
    if not TB_SCRIPT.exists() and not (LOWER / ".testbed-built").exists():
        return f"{TB_SCRIPT} not found and no cached rootfs in {LOWER}"
    if shutil.which("nsenter") is None:
        return "nsenter (util-linux) missing"
    return None


def ensure_rootfs(log=None) -> None:
    """prep + build of the testbed script: installs host packages once, debootstraps once (~60 s)."""
    if (LOWER / ".testbed-built").exists() and shutil.which("systemd-nspawn"):
        return
    r = subprocess.run(["bash", str(TB_SCRIPT), "prep"], capture_output=True, text=True)
    if r.returncode:
        raise TestbedUnavailable(f"systemd-testbed.sh prep failed: {r.stderr[-2000:]}")
    r = subprocess.run(["bash", str(TB_SCRIPT), "build"], capture_output=True, text=True)
    if r.returncode:
        raise TestbedUnavailable(f"systemd-testbed.sh build failed: {r.stderr[-2000:]}")


def _ulimit_hard_nofile() -> int:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 1048576 if hard == resource.RLIM_INFINITY else hard


class Testbed:
    def __init__(self, name: str = "isaacd-tb", binds: list[str] = (), ro_binds: list[str] = (),
                 base: Path = Path("/tmp/isaacd-tb")):
        self.name = name
        self.dir = base / name
        self.merged = self.dir / "merged"
        self.binds = list(binds)
        self.ro_binds = list(ro_binds)
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid1: int | None = None

    # ---- lifecycle -------------------------------------------------------------------------
    def boot(self, timeout: float = 60.0) -> float:
        ensure_rootfs()
        self.stop()  # a leftover from an interrupted run
        for d in ("upper", "work", "merged", "containers"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={LOWER},upperdir={self.dir / 'upper'},workdir={self.dir / 'work'}",
                        str(self.merged)], check=True)
        etc = self.merged / "etc"
        (etc / "containers" / "containers.conf").write_text(CONTAINERS_CONF.format(nofile=_ulimit_hard_nofile()))
        (etc / "hostname").write_text(self.name + "\n")
        # the shared rootfs carries two demo Quadlets; keep the generator output to ours
        for f in ("demo.container", "fast.container"):
            (etc / "containers" / "systemd" / f).unlink(missing_ok=True)
        launcher = self.dir / "launch.sh"
        args = ["systemd-nspawn", "--register=no", "--keep-unit", "--capability=all", "--console=read-only",
                "-D", str(self.merged), f"--machine={self.name}",
                f"--bind={self.dir / 'containers'}:/var/lib/containers"]
        args += [f"--bind={b}" for b in self.binds] + [f"--bind-ro={b}" for b in self.ro_binds] + ["-b"]
        launcher.write_text(
            "#!/bin/bash\nset -e\n"
            "for h in unified systemd; do\n"
            "  [ -d /sys/fs/cgroup/$h ] || continue\n"
            f"  mkdir -p /sys/fs/cgroup/$h/{self.name}\n"
            f"  echo $$ > /sys/fs/cgroup/$h/{self.name}/cgroup.procs\n"
            "done\n"
            "export SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1 SYSTEMD_SECCOMP=0\n"
            "exec " + " ".join(f"'{a}'" for a in args) + "\n")
        launcher.chmod(0o755)
        t0 = time.monotonic()
        self.console = open(self.dir / "console.log", "wb")
        self.proc = subprocess.Popen([str(launcher)], stdin=subprocess.DEVNULL, stdout=self.console,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        (self.dir / "nspawn.pid").write_text(str(self.proc.pid))
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise TestbedUnavailable(f"nspawn exited: {(self.dir / 'console.log').read_text()[-3000:]}")
            if self.pid1 is None:
                self.pid1 = self._find_pid1()
            if self.pid1 is not None:
                st = self.sh("systemctl is-system-running", check=False).stdout.strip()
                if st in ("running", "degraded"):
                    return time.monotonic() - t0
            time.sleep(0.05)
        raise TestbedUnavailable(f"testbed did not come up in {timeout:g} s")

    def _find_pid1(self) -> int | None:
        assert self.proc is not None
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid == self.proc.pid and stat[stat.index("(") + 1:stat.rindex(")")] == "systemd":
                return int(entry.name)
        return None

    def stop(self) -> None:
        pidfile = self.dir / "nspawn.pid"
        pid = self.proc.pid if self.proc else (int(pidfile.read_text()) if pidfile.exists() else None)
        if pid is not None and _alive(pid):
            if self.pid1 is None and self.proc is not None:
                self.pid1 = self._find_pid1()
            if self.pid1 is not None:
                subprocess.run(["nsenter", "-t", str(self.pid1), "-a", "--", "systemctl", "poweroff"],
                               capture_output=True, timeout=30)
            deadline = time.monotonic() + 15
            while _alive(pid) and time.monotonic() < deadline:
                _reap(self.proc)
                time.sleep(0.05)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
                time.sleep(0.5)
        _reap(self.proc)
        self.proc, self.pid1 = None, None
        pidfile.unlink(missing_ok=True)
        for h in ("unified", "systemd"):
            root = Path("/sys/fs/cgroup") / h / self.name
            if root.is_dir():
                for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                    try:
                        d.rmdir()
                    except OSError:
                        pass
                try:
                    root.rmdir()
                except OSError:
                    pass
        if os.path.ismount(self.merged):
            subprocess.run(["umount", "-l", str(self.merged)], check=False)
        # fresh state next boot; the container storage goes too (podman's overlay mounts are gone
        # with the testbed's mount namespace)
        for d in ("upper", "work", "containers"):
            p = self.dir / d
            if p.exists() and not _has_mounts_below(p):
                shutil.rmtree(p, ignore_errors=True)

    def __enter__(self) -> "Testbed":
        self.boot()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- running things inside ---------------------------------------------------------
    def sh(self, cmd: str, check: bool = True, timeout: float = 120, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
        """A shell command in the testbed's namespaces (fine for systemctl/journalctl/files)."""
        assert self.pid1 is not None, "testbed not booted"
        envs = [f"{k}={v}" for k, v in (env or {}).items()]
        r = subprocess.run(["nsenter", "-t", str(self.pid1), "-a", "--", "env", "-i",
                            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                            "PODMAN_IGNORE_CGROUPSV1_WARNING=1", *envs, "sh", "-c", cmd],
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode:
            raise subprocess.CalledProcessError(r.returncode, cmd, r.stdout, r.stderr)
        return r

    def shx(self, cmd: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Like sh, but as a transient unit of the inner systemd: needed for anything that creates
        cgroups (podman run/rm), see the testbed README, failure 4."""
        return self.sh("systemd-run --quiet --wait --pipe --collect -E PODMAN_IGNORE_CGROUPSV1_WARNING=1 "
                       f"-- sh -c {_q(cmd)}", check=check, timeout=timeout)

    def path(self, inside: str) -> Path:
        """A path inside the testbed, as seen from the host (through the overlay)."""
        return self.merged / inside.lstrip("/")

    def wait_for(self, cmd: str, want: str, timeout: float = 60.0, interval: float = 0.1) -> str:
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            out = self.sh(cmd, check=False).stdout.strip()
            if out == want:
                return out
            time.sleep(interval)
        raise AssertionError(f"{cmd!r}: wanted {want!r}, last {out!r} after {timeout:g} s")


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] != "Z"
    except OSError:
        return False


def _reap(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None:
        try:
            proc.poll()
        except Exception:  # noqa: BLE001
            pass


def _has_mounts_below(p: Path) -> bool:
    prefix = str(p.resolve()) + "/"
    with open("/proc/self/mounts") as fh:
        return any(line.split()[1].startswith(prefix) for line in fh)
