"""One job attempt as a container: the spec, and its renderings for Quadlet, systemd and the Podman API.

`ContainerSpec.from_launch` is the single place that decides what a job's container looks like
(image, command, mounts, GPUs, environment, ports, labels, limits). The renderers below only
change the syntax:

- `render_quadlet`: a Quadlet `.container` file (Podman >= 4.4 turns it into a service);
- `render_service`: the equivalent `.service` with `ExecStart=podman run ...` for Podman < 4.4,
  in the shape Quadlet generates (Type=notify, --sdnotify=conmon, --cgroups=split, --rm, cidfile);
- `libpod_create_body`: the JSON body of the libpod API's `POST /containers/create`, for the
  `podman` runtime.

Every generated unit passes `quadlet -dryrun` and `systemd-analyze verify` with nothing on stderr
(tests/test_quadlet_units.py checks both).
"""

from __future__ import annotations

import ipaddress
import os
import re
import resource
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..config import JobConfig
from .base import LaunchSpec, RuntimeFailure

UNIT_PREFIX = "isaaclab-job-"

# Isaac Sim refuses to start without the EULA accepted; PRIVACY_CONSENT silences the telemetry
# prompt; HEADLESS is read by Isaac Lab's AppLauncher. The job's own environment wins.
CONTAINER_BASE_ENV = {
    "ACCEPT_EULA": "Y",
    "PRIVACY_CONSENT": "Y",
    "OMNI_KIT_ACCEPT_EULA": "YES",
    "HEADLESS": "1",
    "PYTHONUNBUFFERED": "1",
}
# Never handed to a container, whoever sets them: NOTIFY_SOCKET would let the trainer's podman
# claim the supervisor unit's main PID (see launch.TRAINER_ENV_DROP).
CONTAINER_ENV_DROP = ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "WATCHDOG_USEC", "WATCHDOG_PID")

# the launch token (LaunchSpec.token) on the container: `find` looks for it; containers started by
# isaacd before the token had this name carry the older label
TOKEN_LABEL = "isaacd.token"
LEGACY_TOKEN_LABEL = "isaacd.launch"

LOOPBACK_NAMES = {"127.0.0.1", "::1", "localhost"}
CAP_SYS_RESOURCE = 24


def unit_base(job: str) -> str:
    return f"{UNIT_PREFIX}{job}"


def unit_name(job: str) -> str:
    return f"{unit_base(job)}.service"


def container_name(job: str) -> str:
    return unit_base(job)


# ---- systemd quoting ------------------------------------------------------------------------
_SAFE_WORD = re.compile(r"^[A-Za-z0-9_./:=,@+^-]+$")


def sd_escape(text: str) -> str:
    """Literal text inside a unit-file value: % starts a specifier, $ an environment variable."""
    return text.replace("%", "%%").replace("$", "$$")


def sd_quote(word: str) -> str:
    """One word of an ExecStart=/Exec=/Environment= line, systemd-quoted so it arrives verbatim."""
    if word and _SAFE_WORD.match(word):
        return sd_escape(word)
    out = []
    for ch in word:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ch == "\x7f":
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + sd_escape("".join(out)) + '"'


def sd_join(words: list[str]) -> str:
    return " ".join(sd_quote(w) for w in words)


def sd_split(cmd: str) -> list[str]:
    """The inverse of sd_join: split an ExecStart= value the way systemd does (quotes, C escapes)."""
    words, i, n = [], 0, len(cmd)
    esc = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "\r", "a": "\a", "b": "\b",
           "f": "\f", "v": "\v", "s": " "}
    while i < n:
        while i < n and cmd[i] in " \t":
            i += 1
        if i >= n:
            break
        w, quote = "", None
        while i < n and (quote or cmd[i] not in " \t"):
            c = cmd[i]
            if quote is None and c in "\"'":
                quote = c
            elif c == quote:
                quote = None
            elif c == "\\" and i + 1 < n:
                i += 1
                c = cmd[i]
                if c == "x":
                    w += chr(int(cmd[i + 1:i + 3], 16))
                    i += 2
                else:
                    w += esc.get(c, c)
            else:
                w += c
            i += 1
        words.append(w)
    return words


# ---- pieces of the spec ---------------------------------------------------------------------
def cdi_devices(job: JobConfig) -> list[str]:
    """CDI names for the job's GPUs (`nvidia.com/gpu=<index|uuid|N:M|all>`); none for a CPU job.
    The claim is isaacd.gpu.assign.job_gpus's: device = "cuda:N" with no gpus passes GPU N alone."""
    from ..gpu.assign import cdi_devices as _cdi

    try:
        return _cdi(job)
    except ValueError as exc:
        raise RuntimeFailure(str(exc)) from None


def container_device_arg(job: JobConfig) -> str:
    """--device inside the container: CDI passes the job's GPUs renumbered from 0 (in PCI order,
    which is nvidia-smi's index order), so `device = "cuda:2"` with `gpus = [2, 3]`, or with no gpus
    (CDI passes GPU 2 alone), is cuda:0 inside. Kept in step with cdi_devices by isaacd.gpu.assign."""
    from ..gpu.assign import container_device

    return container_device(job)


def parse_port(spec: str, job: str) -> str:
    """A published port, forced onto the loopback: "6006" -> "127.0.0.1:6006:6006".

    Binding to 0.0.0.0 is refused: the deployment guide's JupyterLab on 0.0.0.0 got the GPUs mined.
    Reach a port from elsewhere with an SSH tunnel (`ssh -L 6006:127.0.0.1:6006 host`).
    """
    s = spec.strip()
    proto = ""
    if "/" in s:
        s, p = s.rsplit("/", 1)
        if p not in ("tcp", "udp", "sctp"):
            raise RuntimeFailure(f"job {job}: container.ports {spec!r}: protocol must be tcp, udp or sctp")
        proto = "/" + p
    ip = "127.0.0.1"
    if s.startswith("["):  # [::1]:8080:80
        end = s.index("]")
        ip, s = s[1:end], s[end + 2:]
        parts = s.split(":")
    else:
        parts = s.split(":")
        if len(parts) == 3:
            ip, parts = parts[0], parts[1:]
    if len(parts) == 1:
        host, cont = parts[0], parts[0]
    elif len(parts) == 2:
        host, cont = parts
    else:
        raise RuntimeFailure(f"job {job}: container.ports {spec!r}: use \"PORT\", \"HOSTPORT:PORT\" or "
                            "\"127.0.0.1:HOSTPORT:PORT\"")
    for p in (host, cont):
        if not re.fullmatch(r"\d{1,5}(-\d{1,5})?", p):
            raise RuntimeFailure(f"job {job}: container.ports {spec!r}: {p!r} is not a port (or range)")
    if ip not in LOOPBACK_NAMES:
        try:
            loop = ipaddress.ip_address(ip).is_loopback
        except ValueError:
            loop = False
        if not loop:
            raise RuntimeFailure(f"job {job}: container.ports {spec!r}: isaacd publishes ports on 127.0.0.1 only "
                                "(a port on 0.0.0.0 is open to the world); use an SSH tunnel to reach it")
    if ip == "localhost":
        ip = "127.0.0.1"
    ip_s = f"[{ip}]" if ":" in ip else ip
    return f"{ip_s}:{host}:{cont}{proto}"


def parse_volume(spec: str, job: str) -> tuple[str, str, str]:
    parts = spec.split(":")
    if len(parts) < 2 or len(parts) > 3 or not parts[0] or not parts[1].startswith("/"):
        raise RuntimeFailure(f"job {job}: container.volumes {spec!r}: use \"/host/path:/container/path[:ro]\"")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else ""


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


def container_ulimits() -> list[str]:
    """memlock (see memlock_ulimit) plus containers.conf's default_ulimits: Podman 4.x replaces the
    whole default list when a unit passes any --ulimit, which would bring back nofile=1048576 on
    hosts that cannot grant it."""
    out = {u.partition("=")[0]: u for u in containers_conf_ulimits()}
    out["memlock"] = memlock_ulimit()
    return list(out.values())


def prepare_log_root(job: JobConfig) -> None:
    """Create the log root; with a numeric container.user (Isaac Lab 3 images run as uid 1000), hand
    it and the experiment dir to that user so the trainer can write checkpoints (not recursive)."""
    job.log_root.mkdir(parents=True, exist_ok=True)
    hand_to_container_user(job, [job.log_root, job.log_root / "rsl_rl", job.log_root / "rsl_rl" / job.experiment_name])


def hand_to_container_user(job: JobConfig, dirs: list[Path]) -> None:
    """chown existing `dirs` to a numeric container.user, so a non-root trainer can write there."""
    m = re.fullmatch(r"(\d+)(?::(\d+))?", (job.container.user or "").strip())
    if not m:
        return
    uid = int(m.group(1))
    gid = int(m.group(2)) if m.group(2) else uid
    for d in dirs:
        if d.is_dir():
            try:
                os.chown(d, uid, gid)
            except OSError:
                pass


def container_command(job: JobConfig, trainer_args: list[str]) -> list[str]:
    """The container's command: launcher (+ torchrun) + shim + train script + flags, as the job's workflow says.

    Inside the container CDI numbers the job's GPUs from 0, so `--device` is rewritten to match, and so are
    isaacd's own `agent.device=`-style overrides (the policy's device; a user's own values are left alone).
    """
    from ..workflows import resolve  # late: workflows import config, which this module's users load first
    from ..workflows.base import AGENT_DEVICE_KEYS

    inner = container_device_arg(job)
    ours = {f"{key}={job.device}" for key in AGENT_DEVICE_KEYS}
    args = list(trainer_args)
    for i, a in enumerate(args):
        if a == "--device" and i + 1 < len(args):
            args[i + 1] = inner
        elif a in ours:
            args[i] = f"{a.split('=', 1)[0]}={inner}"
    prog = resolve(job).program(in_container=True)
    return prog.argv(args)


def container_env(job: JobConfig) -> dict[str, str]:
    env = dict(CONTAINER_BASE_ENV)
    env.update(job.container.environment)
    env.update(job.environment)
    for k in CONTAINER_ENV_DROP:
        env.pop(k, None)
    return env


@dataclass
class ContainerSpec:
    job: str
    name: str
    image: str | None  # an image reference, or None with rootfs
    rootfs: str | None  # an absolute path, ":O" suffix for an overlay (podman run --rootfs)
    entrypoint: str
    args: list[str]
    env: dict[str, str]
    volumes: list[tuple[str, str, str]]
    ports: list[str]
    devices: list[str]
    shm_size: str
    ulimits: list[str]
    labels: dict[str, str]
    workdir: str | None
    user: str | None
    stop_timeout: int
    attempt: int
    token: str
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_launch(cls, spec: LaunchSpec, token: str, attempt: int) -> "ContainerSpec":
        job = spec.job
        from .. import launch
        from ..workflows.launcher import shim_mounts

        cmd = container_command(job, spec.trainer_args)
        log_root = str(job.log_root)
        volumes = [parse_volume(v, job.name) for v in job.container.volumes]
        # the log root at the same absolute path: checkpoint discovery, run-dir detection and
        # TensorBoard tailing in the supervisor see exactly what the trainer writes
        volumes.append((log_root, log_root, ""))
        # upstream train scripts write ./logs/<library>/... relative to their cwd
        workdir = launch.container_workdir(job)
        volumes.append((log_root, f"{workdir}/logs", ""))
        env = container_env(job)
        shim_events = spec.env.get(launch.SHIM_EVENTS_ENV)
        if job.shim and not job.command:
            volumes.extend((host, inside, "ro") for host, inside in shim_mounts())  # the shim and its protocol
            if shim_events:
                # the side channel at the same path in and out of the container
                volumes.append((str(Path(shim_events).parent), str(Path(shim_events).parent), ""))
                env[launch.SHIM_EVENTS_ENV] = shim_events
        seen: set[str] = set()
        vols = []
        for v in volumes:
            if v[1] not in seen:
                seen.add(v[1])
                vols.append(v)
        image, rootfs = job.container.image, None
        if image.startswith("/"):
            image, rootfs = None, job.container.image
        return cls(
            job=job.name, name=container_name(job.name), image=image, rootfs=rootfs,
            entrypoint=cmd[0], args=cmd[1:], env=env, volumes=vols,
            ports=[parse_port(p, job.name) for p in job.container.ports], devices=cdi_devices(job),
            shm_size=job.container.shm_size, ulimits=container_ulimits(),
            labels={"isaacd.job": job.name, "isaacd.attempt": str(attempt), TOKEN_LABEL: token},
            workdir=workdir, user=job.container.user, stop_timeout=max(1, int(round(job.stop_timeout))),
            attempt=attempt, token=token,
            description=f"isaacd job {job.name} (attempt {attempt})",
        )

    def volume_arg(self, v: tuple[str, str, str]) -> str:
        return volume_arg(v)

    # ---- the three renderings, all from FIELDS ------------------------------------------
    def podman_run_options(self) -> list[str]:
        """Words after `podman run` that describe the container (no lifecycle flags, no --name):
        options, then the image (or --rootfs), then the command's arguments."""
        return cli_words(self, skip=("name",))

    def libpod_create_body(self) -> dict[str, Any]:
        """The JSON body of the libpod API's `POST /containers/create`."""
        body: dict[str, Any] = {}
        for f in FIELDS:
            items = f.value(self)
            if items and f.api is not None:
                body.update(f.api(items))
        return body

    def quadlet_lines(self) -> list[str]:
        """The [Container] section's keys."""
        out = []
        for f in FIELDS:
            for item in f.value(self):
                out.append(f"{f.quadlet}={f.quadlet_text(item)}")
        return out


def volume_arg(v: tuple[str, str, str]) -> str:
    return ":".join(x for x in v if x)


# ---- the field table ----------------------------------------------------------------------------
def _one(x: Any) -> list[Any]:
    return [] if x is None or x == "" else [x]


def _flag(flag: str) -> Callable[[Any], list[str]]:
    return lambda item: [flag, str(item)]


def _ulimits_api(items: list[str]) -> dict[str, Any]:
    r_limits: dict[str, dict[str, Any]] = {}
    for u in items:
        kind, _, val = u.partition("=")
        soft, _, hard = val.partition(":")
        hard = hard or soft
        r_limits[kind] = {"type": kind, "soft": _rlim(soft), "hard": _rlim(hard)}
    return {"r_limits": list(r_limits.values())}


def _rootfs_api(items: list[str]) -> dict[str, Any]:
    r = items[0]
    path, overlay = (r[:-2], True) if r.endswith(":O") else (r, False)
    return {"rootfs": path, "rootfs_overlay": overlay}


def _kv(d: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in d.items()]


@dataclass(frozen=True)
class Field:
    """One property of the job's container and how each backend spells it (Quadlet's own approach:
    one table maps every `.container` key to its `podman run` option).

    value: the items of this field for a ContainerSpec ([] = absent); every item is one Quadlet line,
    and `cli` turns one item into `podman run` words; `api` turns all items into libpod
    `POST /containers/create` body keys.
    """

    name: str
    value: Callable[["ContainerSpec"], list[Any]]
    quadlet: str  # the [Container] key
    cli: Callable[[Any], list[str]]
    api: Callable[[list[Any]], dict[str, Any]] | None
    quadlet_text: Callable[[Any], str] = sd_escape


# Order = order of the `podman run` words: options, then the image (or --rootfs), then the arguments.
# Not here, on purpose: lifecycle flags (--cidfile, --replace, --rm, --cgroups, --sdnotify, -d: Quadlet
# adds them itself, render_service copies its shape) and anything privileged (--privileged, --cap-add,
# --security-opt: containers never get them; GPUs come through CDI devices).
FIELDS: tuple[Field, ...] = (
    Field("name", lambda s: [s.name], "ContainerName", _flag("--name"), lambda v: {"name": v[0]}),
    Field("shm_size", lambda s: _one(s.shm_size), "ShmSize", _flag("--shm-size"),
          lambda v: {"shm_size": parse_size(v[0])}),
    Field("entrypoint", lambda s: [s.entrypoint], "Entrypoint", _flag("--entrypoint"),
          lambda v: {"entrypoint": [v[0]]}),
    Field("workdir", lambda s: _one(s.workdir), "WorkingDir", _flag("--workdir"), lambda v: {"work_dir": v[0]}),
    Field("stop_signal", lambda s: [STOP_SIGNAL], "StopSignal", _flag("--stop-signal"),
          lambda v: {"stop_signal": int(getattr(signal, v[0]))}),
    Field("stop_timeout", lambda s: [s.stop_timeout], "StopTimeout", _flag("--stop-timeout"),
          lambda v: {"stop_timeout": int(v[0])}, str),
    Field("ulimits", lambda s: list(s.ulimits), "Ulimit", _flag("--ulimit"), _ulimits_api),
    # CDI names (cdi_devices): AddDevice=nvidia.com/gpu=0, --device nvidia.com/gpu=0, devices=[{path}]
    Field("devices", lambda s: list(s.devices), "AddDevice", _flag("--device"),
          lambda v: {"devices": [{"path": d} for d in v]}),
    Field("user", lambda s: _one(s.user), "User", _flag("--user"), lambda v: {"user": v[0]}),
    Field("volumes", lambda s: list(s.volumes), "Volume", lambda v: ["-v", volume_arg(v)],
          lambda v: {"mounts": [{"type": "bind", "source": src, "destination": dst,
                                 "options": ["rbind"] + ([o] if o else [])} for src, dst, o in v]},
          lambda v: sd_quote(volume_arg(v))),
    Field("ports", lambda s: list(s.ports), "PublishPort", _flag("--publish"),
          lambda v: {"portmappings": [_portmapping(p) for p in v]}),
    Field("env", lambda s: _kv(s.env), "Environment", _flag("--env"),
          lambda v: {"env": dict(x.split("=", 1) for x in v)}, sd_quote),
    Field("labels", lambda s: _kv(s.labels), "Label", _flag("--label"),
          lambda v: {"labels": dict(x.split("=", 1) for x in v)}, sd_quote),
    Field("rootfs", lambda s: _one(s.rootfs), "Rootfs", _flag("--rootfs"), _rootfs_api),
    Field("image", lambda s: [] if s.rootfs else [s.image or ""], "Image", lambda v: [v],
          lambda v: {"image": v[0]}),
    # the command's arguments: one Exec= line, the words after the image, the API's "command"
    Field("args", lambda s: [list(s.args)] if s.args else [], "Exec", list, lambda v: {"command": list(v[0])}, sd_join),
)
STOP_SIGNAL = "SIGINT"  # Ctrl-C semantics: isaacd's shim saves a checkpoint and exits 0


def cli_words(spec: "ContainerSpec", only: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> list[str]:
    words: list[str] = []
    for f in FIELDS:
        if (only and f.name not in only) or f.name in skip:
            continue
        for item in f.value(spec):
            words += f.cli(item)
    return words


def _rlim(v: str) -> int:
    return 2**64 - 1 if v in ("-1", "unlimited") else int(v)


def _portmapping(p: str) -> dict[str, Any]:
    proto = "tcp"
    if "/" in p:
        p, proto = p.rsplit("/", 1)
    if p.startswith("["):
        end = p.index("]")
        ip, rest = p[1:end], p[end + 2:]
    else:
        ip, rest = p.split(":", 1)
    host, cont = rest.split(":")
    rng = 1
    if "-" in cont:
        a, b = cont.split("-")
        rng = int(b) - int(a) + 1
        cont = a
        host = host.split("-")[0]
    return {"host_ip": ip, "host_port": int(host), "container_port": int(cont), "protocol": proto, "range": rng}


def parse_size(s: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([bkmg]?)b?\s*", s.lower())
    if not m:
        raise RuntimeFailure(f"shm_size {s!r}: use a size such as \"8g\" or \"512m\"")
    return int(m.group(1)) * 1024 ** "bkmg".index(m.group(2) or "b")


# ---- unit files -------------------------------------------------------------------------------
def _header(spec: ContainerSpec, kind: str) -> list[str]:
    return [
        f"# Generated by isaacd for job {spec.job!r}, attempt {spec.attempt} ({kind}).",
        "# Rewritten at every start of the job; edit the job in the isaacd config instead.",
        "# isaacd decides restarts (Restart=no), so it can resume from the right checkpoint.",
        f"# isaacd-launch: {spec.token}",
    ]


def _service_section(spec: ContainerSpec) -> list[str]:
    return [
        "[Service]",
        "Restart=no",
        # `systemctl stop` ends the container with SIGTERM -> 143 if the trainer does not catch it
        "SuccessExitStatus=143",
        f"TimeoutStopSec={spec.stop_timeout + 30}",
    ]


SUPERVISOR_UNIT = "isaaclab-supervisor.service"


def _unit_section(spec: ContainerSpec) -> list[str]:
    return [
        "[Unit]",
        f"Description={sd_escape(spec.description)}",
        # Ordering only (no dependency): at shutdown the supervisor stops first, so it never
        # mistakes the job's stop for an operator's and resumes the job after the reboot.
        f"Before={SUPERVISOR_UNIT}",
    ]


def render_quadlet(spec: ContainerSpec) -> str:
    lines = _header(spec, "Quadlet, Podman >= 4.4") + [""] + _unit_section(spec) + [
        "",
        "[Container]",
    ] + spec.quadlet_lines() + [""]
    lines += _service_section(spec)
    return "\n".join(lines) + "\n"


def render_service(spec: ContainerSpec, podman: str = "/usr/bin/podman") -> str:
    """The unit Quadlet would generate, for Podman < 4.4 (Debian 12's 4.3.1) where there is no Quadlet."""
    # %t/%N in the lifecycle flags are systemd specifiers on purpose; everything else is literal
    words = [podman, "run"] + [sd_quote(w) for w in cli_words(spec, only=("name",))] + [
        "--cidfile=%t/%N.cid", "--replace", "--rm", "--cgroups=split", "--sdnotify=conmon", "-d",
    ] + [sd_quote(w) for w in spec.podman_run_options()]
    rm = f"{podman} rm -v -f -i --cidfile=%t/%N.cid"
    lines = _header(spec, "podman run unit for Podman < 4.4, in the shape Quadlet generates") + [
        "",
    ] + _unit_section(spec) + [
        "Wants=network-online.target",
        "After=network-online.target",
        "RequiresMountsFor=%t/containers",
    ]
    for s, _d, _o in spec.volumes:
        if s.startswith("/"):
            lines.append(f"RequiresMountsFor={sd_quote(s)}")
    lines += [
        "",
    ] + _service_section(spec) + [
        "Environment=PODMAN_SYSTEMD_UNIT=%n",
        "KillMode=mixed",
        f"ExecStop={rm}",
        f"ExecStopPost=-{rm}",
        "Delegate=yes",
        "Type=notify",
        "NotifyAccess=all",
        "SyslogIdentifier=%N",
        "ExecStart=" + " ".join(words),
    ]
    return "\n".join(lines) + "\n"


def launch_token_of(path: Path) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("# isaacd-launch: "):
                    return line.split(":", 1)[1].strip()
                if not line.startswith("#"):
                    break
    except OSError:
        return None
    return None


# ---- Podman on this host ----------------------------------------------------------------------
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


QUADLET_PATHS = ("/usr/libexec/podman/quadlet", "/usr/lib/podman/quadlet")
GENERATOR_PATHS = ("/usr/lib/systemd/system-generators/podman-system-generator",
                   "/lib/systemd/system-generators/podman-system-generator")


def quadlet_binary() -> str | None:
    return next((p for p in QUADLET_PATHS if os.access(p, os.X_OK)), None)


def has_quadlet(version: tuple[int, ...] | None) -> bool:
    if os.environ.get("ISAACD_FORCE_SERVICE_FALLBACK") == "1":
        return False
    return bool(version and version >= (4, 4) and
                any(os.path.exists(p) for p in GENERATOR_PATHS + QUADLET_PATHS))


def containers_conf_ulimits() -> list[str]:
    """`default_ulimits` from containers.conf, which the podman CLI applies and the API does not."""
    import tomllib

    files = [Path("/usr/share/containers/containers.conf"), Path("/etc/containers/containers.conf")]
    d = Path("/etc/containers/containers.conf.d")
    if d.is_dir():
        files += sorted(d.glob("*.conf"))
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


# ---- shared by the podman and systemd runtimes ------------------------------------------------
def clean_env() -> dict[str, str]:
    """The supervisor's environment minus systemd's notify/watchdog/socket variables, for the
    podman/systemctl commands it runs (a podman child must never talk to our NOTIFY_SOCKET)."""
    return {k: v for k, v in os.environ.items() if k not in CONTAINER_ENV_DROP}


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


def attempt_number(spec: LaunchSpec, state_dir: Path) -> int:
    """The attempt this launch is (1, 2, ...): LaunchSpec.attempt when the core passes it, else one
    more than the last attempt saved in the state store (the runner saves after start())."""
    n = getattr(spec, "attempt", None)
    if isinstance(n, int) and n > 0:
        return n
    from ..store import StateStore

    try:
        hist = StateStore(state_dir).load(spec.job.name)
    except Exception:  # noqa: BLE001 - a label is not worth failing a launch for
        return 0
    return hist.attempts[-1].number + 1 if hist.attempts else 1


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
