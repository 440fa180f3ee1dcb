"""`isaacd doctor`: is this host ready for the configured jobs? Each check says what it saw and,
when something is wrong, the command that fixes it.

Statuses: pass, warn (works, but you should know), fail (a configured job will not run, or runs
unsafely), skip (does not apply to this config/host). Exit status 0 when nothing failed, 1 otherwise.
`--json` prints {"ok": bool, "checks": [...]} for scripts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import yaml

from .doctor_backup import check_backup
from .doctor_eval import check_eval_video
from .doctor_install import check_install
from .checks import Check
from ..config.schema import Config, JobConfig
from ..runtimes.container_spec import cdi_devices, parse_port, parse_size
from ..runtimes.host import has_cap_sys_resource, podman_binary, podman_version
from ..runtimes.quadlet import GENERATOR_PATHS, quadlet_binary

CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"), Path("/run/cdi"))
QUADLET_MIN = (4, 4)
CDI_MIN = (4, 1)
FREE_WARN = 50 * 2**30
FREE_FAIL = 5 * 2**30

# Minimum NVIDIA driver per image family. Isaac Lab 2.3 = Isaac Sim 5.1, validated on R580
# (580.65.06); Isaac Lab 3.x needs 580.65.06 as well; Isaac Lab 2.0-2.2 (Isaac Sim 4.5/5.0)
# 535.129.03. A CUDA 12 PyTorch (containers/Containerfile.builtin) runs from 525.60.13.
DRIVER_MIN = [
    (re.compile(r"isaac-lab:3\.|kitless"), (580, 65, 6), "Isaac Lab 3.x"),
    (re.compile(r"isaac-lab:2\.3|isaacd-isaaclab"), (580, 65, 6), "Isaac Lab 2.3 / Isaac Sim 5.1"),
    (re.compile(r"isaac-lab:2\.[0-2]|isaac-sim:4\.5|isaac-sim:5\.0"), (535, 129, 3), "Isaac Lab 2.0-2.2"),
    (re.compile(r"isaac-sim:5\.1"), (580, 65, 6), "Isaac Sim 5.1"),
]
CUDA12_MIN = (525, 60, 13)


def _v(t: tuple[int, ...]) -> str:
    return ".".join(str(x) for x in t)


def _drv(t: tuple[int, ...]) -> str:
    """NVIDIA writes the third field with two digits: 580.65.06."""
    return ".".join(f"{x:02d}" if i == 2 else str(x) for i, x in enumerate(t))


def _gpu_jobs(cfg: Config) -> list[JobConfig]:
    return [j for j in cfg.jobs if j.device.startswith("cuda") or j.gpus]


def _container_jobs(cfg: Config) -> list[JobConfig]:
    return [j for j in cfg.jobs if j.runtime in ("podman", "systemd")]


# ---- NVIDIA -------------------------------------------------------------------------------------
def driver_version() -> tuple[int, ...] | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        text = ""
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m and shutil.which("nvidia-smi"):
        try:
            text = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            text = ""
        m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def check_driver(cfg: Config) -> Check:
    jobs = _gpu_jobs(cfg)
    if not jobs:
        return Check("nvidia_driver", "skip", "no job uses a GPU (device = \"cpu\", no gpus)")
    ver = driver_version()
    if ver is None:
        return Check("nvidia_driver", "fail", f"no NVIDIA driver loaded; jobs {', '.join(j.name for j in jobs)} need a GPU",
                     "install the NVIDIA driver (e.g. `apt-get install nvidia-driver` or the .run from the Unix "
                     "Driver Archive), reboot, check `nvidia-smi`")
    need, why = CUDA12_MIN, "CUDA 12 PyTorch"
    for j in jobs:
        image = j.container.image if j.runtime != "process" else ""
        for rx, v, label in DRIVER_MIN:
            if rx.search(image) and v > need:
                need, why = v, f"{label} ({j.name}: {image})"
    if ver < need:
        return Check("nvidia_driver", "fail", f"driver {_drv(ver)} is older than {_drv(need)} required by {why}",
                     f"upgrade the NVIDIA driver to {_drv(need)} or newer (production branch R{need[0]})")
    return Check("nvidia_driver", "pass", f"driver {_drv(ver)} (>= {_drv(need)} for {why})")


def check_nvml(cfg: Config) -> Check:
    if not _gpu_jobs(cfg) and cfg.gpu.source != "nvml":
        return Check("nvml", "skip", "no GPU job and [gpu] source is not \"nvml\"")
    try:
        import pynvml  # noqa: PLC0415

        pynvml.nvmlInit()
        try:
            n = pynvml.nvmlDeviceGetCount()
            ver = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ImportError
        status = "fail" if _gpu_jobs(cfg) else "warn"
        return Check("nvml", status, f"NVML not reachable: {type(exc).__name__}: {exc}".strip(),
                     "install the driver's libnvidia-ml.so.1 (package libnvidia-ml1 / nvidia-utils) and the "
                     "nvidia-ml-py package; without NVML isaacd exports no GPU metrics and GPU watchdogs stay off")
    return Check("nvml", "pass", f"NVML {ver!s}: {n} GPU(s)")


def cdi_devices_on_host() -> tuple[list[str], list[Path]]:
    """CDI device names `kind=name` found in the spec files (YAML or JSON), and the files read."""
    names: list[str] = []
    files: list[Path] = []
    for d in CDI_DIRS:
        if not d.is_dir():
            continue
        for f in sorted(d.iterdir()):
            if f.suffix not in (".yaml", ".yml", ".json"):
                continue
            try:
                text = f.read_text()
            except OSError:
                continue
            files.append(f)
            try:
                data = json.loads(text) if f.suffix == ".json" else yaml.safe_load(text)
            except (ValueError, yaml.YAMLError):
                continue  # a broken spec: podman will say so too
            if not isinstance(data, dict):
                continue
            kind = data.get("kind")
            names += [f"{kind}={dev.get('name')}" for dev in data.get("devices") or [] if isinstance(dev, dict)]
    return list(dict.fromkeys(names)), files


def check_cdi(cfg: Config) -> Check:
    jobs = [j for j in _container_jobs(cfg) if cdi_devices(j)]
    if not jobs:
        return Check("cdi_spec", "skip", "no container job uses a GPU")
    have, files = cdi_devices_on_host()
    fix = ("nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml  (nvidia-container-toolkit >= 1.18 also "
           "keeps /var/run/cdi current after driver upgrades); prefer GPU UUIDs in `gpus`")
    if not files:
        return Check("cdi_spec", "fail", "no CDI spec in /etc/cdi or /var/run/cdi: containers get no GPU", fix)
    want = sorted({d for j in jobs for d in cdi_devices(j)})
    missing = [d for d in want if d not in have]
    gpus = [h for h in have if h.startswith("nvidia.com/gpu=")]
    detail = f"{len(gpus)} nvidia.com/gpu devices in {', '.join(map(str, files))}"
    try:
        import pynvml  # noqa: PLC0415

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        indexed = [g for g in gpus if re.fullmatch(r"nvidia.com/gpu=\d+", g)]
        if len(indexed) < n:
            return Check("cdi_spec", "fail", f"{detail}, but NVML sees {n} GPUs: the spec is stale "
                         "(driver upgrade, GPU added or MIG changed)", fix)
    except Exception:  # noqa: BLE001 - NVML is its own check
        pass
    if missing:
        return Check("cdi_spec", "fail", f"{detail}; not listed: {', '.join(missing)}", fix)
    return Check("cdi_spec", "pass", f"{detail}; every configured device is listed")


# ---- Podman, Quadlet, systemd ------------------------------------------------------------------------
def check_podman(cfg: Config) -> Check:
    jobs = _container_jobs(cfg)
    podman = podman_binary()
    ver = podman_version(podman) if podman else None
    if ver is None:
        if jobs:
            return Check("podman", "fail", f"podman not found; jobs {', '.join(j.name for j in jobs)} run in containers",
                         "apt-get install podman crun (Podman >= 4.4 for Quadlet units)")
        return Check("podman", "skip", "podman not installed and no container job configured")
    if jobs and any(cdi_devices(j) for j in jobs) and ver < CDI_MIN:
        return Check("podman", "fail", f"podman {_v(ver)} predates CDI device support (4.1)",
                     "upgrade Podman to >= 4.4 (Debian 13, Ubuntu 24.04, or backports)")
    if ver < QUADLET_MIN:
        return Check("podman", "warn" if any(j.runtime == "systemd" for j in jobs) else "pass",
                     f"podman {_v(ver)}: no Quadlet (needs >= 4.4); runtime = \"systemd\" writes an equivalent "
                     "`podman run` .service instead", "upgrade Podman to >= 4.4 (>= 4.7 for ShmSize=/Ulimit=) to get Quadlet")
    return Check("podman", "pass", f"podman {_v(ver)} (Quadlet available)")


def check_quadlet(cfg: Config) -> Check:
    ver = podman_version()
    gen = next((p for p in GENERATOR_PATHS if os.path.exists(p)), None)
    q = quadlet_binary()
    if ver is None:
        return Check("quadlet", "skip", "podman not installed")
    if ver < QUADLET_MIN:
        return Check("quadlet", "skip", f"podman {_v(ver)} has no Quadlet; the .service fallback is used")
    if not gen or not q:
        return Check("quadlet", "fail", "podman >= 4.4 but the Quadlet generator is missing "
                     f"({' or '.join(GENERATOR_PATHS)})", "reinstall podman (the generator ships with it)")
    return Check("quadlet", "pass", f"generator {gen}, {q}")


def check_systemd(cfg: Config) -> Check:
    jobs = [j.name for j in cfg.jobs if j.runtime == "systemd"]
    pid1 = Path("/run/systemd/system").exists()
    if not jobs:
        return Check("systemd", "skip" if not pid1 else "pass",
                     "systemd is PID 1" if pid1 else "systemd is not PID 1 (no runtime = \"systemd\" job)")
    if not pid1:
        return Check("systemd", "fail", f"systemd is not PID 1 here; jobs {', '.join(jobs)} use runtime = \"systemd\"",
                     "use runtime = \"podman\" (Podman API) on hosts or containers without systemd")
    return Check("systemd", "pass", "systemd is PID 1")


def check_memlock(cfg: Config) -> Check:
    if not _container_jobs(cfg):
        return Check("memlock", "skip", "no container job")
    if has_cap_sys_resource():
        return Check("memlock", "pass", "containers get memlock=-1 (unlimited pinned memory)")
    import resource  # noqa: PLC0415

    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard == resource.RLIM_INFINITY:
        # memlock_ulimit() passes -1:-1 then, and the OCI runtime needs no capability to keep it
        return Check("memlock", "pass", "no CAP_SYS_RESOURCE here, but the hard memlock limit is unlimited: "
                     "containers get memlock=-1 (unlimited pinned memory)")
    return Check("memlock", "warn", f"no CAP_SYS_RESOURCE here: containers get memlock={hard} (the hard limit) "
                 "instead of unlimited; NCCL/CUDA pinned memory may be slower or fail",
                 "run on a host (not in an unprivileged container), or raise the hard memlock limit")


# ---- resources ----------------------------------------------------------------------------------------
def check_shm(cfg: Config) -> list[Check]:
    out = []
    try:
        st = os.statvfs("/dev/shm")
        total = st.f_blocks * st.f_frsize
    except OSError:
        total = 0
    process_jobs = [j for j in cfg.jobs if j.runtime == "process"]
    if process_jobs:
        if total < 2 * 2**30:
            out.append(Check("shm", "warn", f"/dev/shm is {total / 2**30:.1f} GiB; process-runtime trainers share it",
                             "mount -o remount,size=16g /dev/shm (and make it permanent in /etc/fstab)"))
        else:
            out.append(Check("shm", "pass", f"/dev/shm {total / 2**30:.1f} GiB"))
    for j in _container_jobs(cfg):
        try:
            size = parse_size(j.container.shm_size)
        except Exception as exc:  # noqa: BLE001
            out.append(Check(f"shm:{j.name}", "fail", str(exc), 'shm_size = "8g"'))
            continue
        if size < 2**30:
            out.append(Check(f"shm:{j.name}", "warn", f"container shm_size {j.container.shm_size} is small for "
                             "Isaac Sim / PyTorch data loaders (the guide uses 8g)",
                             f'[jobs.container] shm_size = "8g" for job {j.name}'))
        else:
            out.append(Check(f"shm:{j.name}", "pass", f"container shm_size {j.container.shm_size}"))
    if not out:
        out.append(Check("shm", "skip", "no jobs"))
    return out


def _existing(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_disk(cfg: Config) -> list[Check]:
    out = []
    try:
        root_dev = os.stat("/").st_dev
    except OSError:
        root_dev = None
    seen: set[int] = set()
    for j in cfg.jobs:
        base = _existing(j.log_root)
        try:
            st = os.statvfs(base)
            dev = os.stat(base).st_dev
        except OSError as exc:
            out.append(Check(f"disk:{j.name}", "fail", f"{j.log_root}: {exc}", "create the log_root directory"))
            continue
        free = st.f_bavail * st.f_frsize
        name = f"disk:{j.name}"
        msg = f"{j.log_root}: {free / 2**30:.1f} GiB free"
        if dev in seen:
            msg += " (same volume as another job)"
        seen.add(dev)
        if free < FREE_FAIL:
            out.append(Check(name, "fail", msg + "; checkpoints will fail to save",
                             "free space or move log_root to a data disk"))
        elif free < FREE_WARN:
            out.append(Check(name, "warn", msg, "keep >= 50 GiB free for checkpoints and TensorBoard logs"))
        elif dev == root_dev:
            out.append(Check(name, "warn", msg + "; on the system disk (a full disk stops the host, not just the job)",
                             f"put log_root on a data disk, e.g. /data/isaacd/{j.name}"))
        else:
            out.append(Check(name, "pass", msg))
    out.append(check_state_disk(cfg))
    return out


STATE_FREE_WARN = 1 * 2**30
STATE_FREE_FAIL = 100 * 2**20


def check_state_disk(cfg: Config) -> Check:
    """The state dir holds job history, event journals and trainer logs: isaacd cannot record restarts
    or keep trainer output when it is full."""
    from ..volumes import space

    path = cfg.supervisor.state_dir
    sp = space(path)
    if sp is None:
        return Check("disk:state", "fail", f"{path}: cannot stat its volume", "create the state_dir")
    msg = f"{path}: {sp.free_bytes / 2**30:.2f} GiB free of {sp.size_bytes / 2**30:.1f} GiB (state dir)"
    if sp.free_bytes < STATE_FREE_FAIL:
        return Check("disk:state", "fail", msg + "; job history and trainer logs cannot be written",
                     "free space on the state dir's volume or move [supervisor] state_dir")
    if sp.free_bytes < STATE_FREE_WARN:
        return Check("disk:state", "warn", msg, "keep >= 1 GiB free for history, journals and trainer logs")
    return Check("disk:state", "pass", msg)


# ---- exposure -----------------------------------------------------------------------------------------
def _socket_owners() -> dict[int, str]:
    owners: dict[int, str] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                ino = int(link[8:-1])
                if ino not in owners:
                    try:
                        owners[ino] = f"{Path(f'/proc/{pid}/comm').read_text().strip()}[{pid}]"
                    except OSError:
                        owners[ino] = f"pid {pid}"
    return owners


def wildcard_listeners() -> list[dict[str, Any]]:
    """TCP sockets listening on every address (0.0.0.0 / ::), from /proc/net/tcp{,6}."""
    found = []
    for fname, wild in (("/proc/net/tcp", "00000000"), ("/proc/net/tcp6", "0" * 32)):
        try:
            lines = Path(fname).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) < 10 or f[3] != "0A":  # LISTEN
                continue
            addr, port = f[1].split(":")
            if addr != wild:
                continue
            found.append({"port": int(port, 16), "family": "ipv6" if fname.endswith("6") else "ipv4",
                          "inode": int(f[9])})
    if found:
        owners = _socket_owners()
        for w in found:
            w["process"] = owners.get(w.pop("inode"), "?")
    else:
        for w in found:
            w.pop("inode", None)
    return sorted(found, key=lambda w: (w["port"], w["family"]))


def check_listeners(cfg: Config) -> Check:
    ws = wildcard_listeners()
    if not ws:
        return Check("listeners", "pass", "no TCP socket listens on 0.0.0.0 or ::")
    shown = ", ".join(f"{w['port']}/{w['family']} ({w['process']})" for w in ws[:12])
    more = f" and {len(ws) - 12} more" if len(ws) > 12 else ""
    return Check("listeners", "warn", f"listening on all addresses: {shown}{more}",
                 "bind services to 127.0.0.1 and reach them through `ssh -L`; a JupyterLab or TensorBoard on "
                 "0.0.0.0 is how GPU hosts get mined")


def check_ports(cfg: Config) -> Check:
    bad = []
    for j in _container_jobs(cfg):
        for p in j.container.ports:
            try:
                parse_port(p, j.name)
            except Exception as exc:  # noqa: BLE001
                bad.append(str(exc))
    if bad:
        return Check("container_ports", "fail", "; ".join(bad), "publish on 127.0.0.1 only (\"6006\" or "
                     "\"127.0.0.1:6006:6006\") and use an SSH tunnel")
    n = sum(len(j.container.ports) for j in _container_jobs(cfg))
    return Check("container_ports", "pass" if n else "skip",
                 f"{n} published port(s), all on 127.0.0.1" if n else "no published ports")


def check_images(cfg: Config) -> list[Check]:
    out = []
    podman = podman_binary()
    for j in _container_jobs(cfg):
        img = j.container.image
        name = f"image:{j.name}"
        if img.startswith("/"):
            path = img.removesuffix(":O")
            ok = Path(path).is_dir()
            out.append(Check(name, "pass" if ok else "fail", f"rootfs {img}" + ("" if ok else " does not exist")))
            continue
        if not podman:
            continue
        try:
            r = subprocess.run([podman, "image", "exists", img], capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            out.append(Check(name, "warn", f"could not check {img}: {exc}"))
            continue
        if r.returncode == 0:
            out.append(Check(name, "pass", f"{img} present"))
        else:
            out.append(Check(name, "warn", f"{img} is not in local storage; the first start pulls it "
                             "(minutes for Isaac Lab images, and needs registry access)",
                             f"podman pull {img}, or build it: see containers/README.md"))
    return out


def check_workflows(cfg: Config) -> list[Check]:
    """Each job's trainer contract: the Isaac Lab generation, the train script, the launcher."""
    from ..workflows import WorkflowError, resolve

    out = []
    for j in cfg.jobs:
        try:
            r = resolve(j)
        except WorkflowError as exc:
            out.append(Check(f"workflow:{j.name}", "fail", exc.message, f"set {exc.key} in the job's [[jobs]] table"))
            continue
        out.append(Check(f"workflow:{j.name}", "pass", r.workflow.contract + ("" if j.shim or j.command else
                                                                           "; shim off: a stop saves no checkpoint")))
    return out


def check_tasks(cfg: Config) -> list[Check]:
    """Each job's task against its trainer's registry, without booting the simulator (workflows/registry.py)."""
    from ..workflows import WorkflowError, resolve
    from ..workflows.registry import check_task

    out = []
    for j in cfg.jobs:
        name = f"task:{j.name}"
        try:
            resolve(j)  # a job that cannot resolve is check_workflows' failure; its task is not asked
            found = check_task(j)
        except WorkflowError:
            continue
        if found is None:
            out.append(Check(name, "skip", f"{j.task}: not checked (read only from the built-in trainer or a pip/uv "
                                           "Isaac Lab 3.x without booting)"))
        elif found.error is None:
            out.append(Check(name, "pass", f"{j.task} is registered ({found.registry}, {found.count} tasks)"))
        else:
            hint = f'set task = "{found.closest}"' if found.closest else "set task to a registered id"
            out.append(Check(name, "fail", f"{j.task}: {found.error}", f"{hint} in the [[jobs]] table of {j.name}"))
    return out


def check_compile_caches(cfg: Config) -> list[Check]:
    """Each job's compile caches (issue 21): where they are, how big, and whether isaacd can write them."""
    from ..caches import compile_caches

    out = []
    for j in cfg.jobs:
        dirs = compile_caches.for_job(j, cfg.supervisor.state_dir)
        name = f"compile-cache:{j.name}"
        if not dirs:
            if j.workflow == "builtin" and not j.command:
                continue  # the built-in trainer does not use Warp: nothing to say
            why = 'compile_cache = "off"' if j.compile_cache == "off" else "Ray container jobs keep the image's caches"
            out.append(Check(name, "skip", f"no compile caches ({why})"))
            continue
        listing = ", ".join(f"{d.name} {d.host} ({compile_caches.size_bytes(d.host) / 2**20:.1f} MiB)" for d in dirs)
        problem = compile_caches.writable_problem(dirs)
        if problem is not None:
            out.append(Check(name, "fail", problem, f"chown the directory to isaacd's user, or set compile_cache = "
                                                    f"\"off\" for job {j.name}"))
        else:
            out.append(Check(name, "pass", listing))
    return out


CHECKS: list[Callable[[Config], Check | list[Check]]] = [
    check_driver, check_nvml, check_cdi, check_podman, check_quadlet, check_systemd, check_memlock,
    check_images, check_shm, check_disk, check_ports, check_listeners, check_workflows, check_tasks, check_backup,
    check_compile_caches, check_install, check_eval_video,
]


def collect(cfg: Config) -> list[Check]:
    out: list[Check] = []
    for fn in CHECKS:
        try:
            res = fn(cfg)
        except Exception as exc:  # noqa: BLE001 - a broken check must not hide the others
            res = Check(fn.__name__.removeprefix("check_"), "warn", f"check crashed: {type(exc).__name__}: {exc}")
        out += res if isinstance(res, list) else [res]
    return out


SYMBOL = {"pass": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


def run_doctor(cfg: Config, as_json: bool = False) -> int:
    checks = collect(cfg)
    ok = not any(c.status == "fail" for c in checks)
    if as_json:
        print(json.dumps({"ok": ok, "checks": [asdict(c) for c in checks]}, indent=1))
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            print(f"{SYMBOL[c.status]}  {c.name:<{width}}  {c.detail}")
            if c.fix and c.status in ("warn", "fail"):
                print(f"      {'':<{width}}  fix: {c.fix}")
        n = {s: sum(c.status == s for c in checks) for s in SYMBOL}
        print(f"\n{'OK' if ok else 'NOT OK'}: {n['pass']} passed, {n['warn']} warnings, {n['fail']} failed, "
              f"{n['skip']} skipped", file=sys.stdout)
    return 0 if ok else 1


__all__ = ["run_doctor", "collect", "Check", "wildcard_listeners", "cdi_devices_on_host", "driver_version"]
