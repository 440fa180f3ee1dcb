"""One job attempt as a container: the spec, and the table that renders it for Quadlet, `podman run` and the API.

`ContainerSpec.from_launch` is the single place that decides what a job's container looks like (image, command,
mounts, GPUs, environment, ports, labels, limits). `FIELDS` maps each property to its spelling in each backend,
Quadlet's own approach (one table maps every `.container` key to its `podman run` option); the renderings only
change the syntax:

- `ContainerSpec.quadlet_lines`: the [Container] keys of a Quadlet `.container` (quadlet.py writes the unit);
- `ContainerSpec.podman_run_options` / `cli_words`: the words of `podman run` (quadlet.render_service for
  Podman < 4.4, the ray runtime's actor);
- `ContainerSpec.libpod_create_body`: the JSON body of the libpod API's `POST /containers/create`, for the
  `podman` runtime.

Also what every container runtime does to the host around a launch: the log root handed to the container's user
(`prepare_log_root`: the owner, or a numeric container.user; through the OS seam), the attempt number for the
container's label (`attempt_number`).
"""

from __future__ import annotations

import ipaddress
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import trainer_command
from ..caches.compile_caches import container_volumes
from ..caches.compile_caches import trainer_env as cache_trainer_env
from ..config.schema import JobConfig
from ..config.sizes import podman_bytes
from ..gpu import assign as gpu_assign
from ..history.store import StateStore
from ..workflows import resolve
from ..workflows.base import AGENT_DEVICE_KEYS
from ..workflows.launcher import shim_mounts
from isaacd_trainer.shim_protocol import (LAUNCH_TOKEN_ENV, SNAPSHOT_BUDGET_ENV, SNAPSHOT_EVERY_ENV,
                                          SNAPSHOT_MIN_SECONDS_ENV, SPARE_ENV_PREFIX)

from .base import LaunchSpec, RuntimeFailure
from .host import SYSTEMD_SERVICE_ENV, containers_conf_ulimits, memlock_ulimit
from ..access.owner import container_user
from ..os_seam.oscalls import HOST_OS, OsCalls, RunAs
from ..os_seam.owned_dirs import OwnershipRefused
from .unit_syntax import sd_escape, sd_join, sd_quote

# a job's container, and the systemd unit that runs it (quadlet.unit_name), are named after the job
CONTAINER_PREFIX = "isaaclab-job-"

# Isaac Sim refuses to start without the EULA accepted; PRIVACY_CONSENT silences the telemetry
# prompt; HEADLESS is read by Isaac Lab's AppLauncher. The job's own environment wins.
CONTAINER_BASE_ENV = {
    "ACCEPT_EULA": "Y",
    "PRIVACY_CONSENT": "Y",
    "OMNI_KIT_ACCEPT_EULA": "YES",
    "HEADLESS": "1",
    "PYTHONUNBUFFERED": "1",
}

# the launch token (LaunchSpec.token) on the container: `find` looks for it; containers started by
# isaacd before the token had this name carry the older label
TOKEN_LABEL = "isaacd.token"
LEGACY_TOKEN_LABEL = "isaacd.launch"

# what a spare's container takes from its LaunchSpec.env besides ISAACD_SPARE_* (an attempt's container takes the
# job's environment only): its token, and the W&B placeholder a booted boot needs (spare.py)
SPARE_CARRIED_ENV = (LAUNCH_TOKEN_ENV, "WANDB_RUN_ID")
SNAPSHOT_SETTINGS_ENV = (SNAPSHOT_EVERY_ENV, SNAPSHOT_MIN_SECONDS_ENV, SNAPSHOT_BUDGET_ENV)

LOOPBACK_NAMES = {"127.0.0.1", "::1", "localhost"}
# Hydra's run dir in the cwd: hydra/conf/hydra/output/default.yaml `run.dir: outputs/${now:%Y-%m-%d}/...`, which
# Isaac Lab 3.0's train entry keeps (isaaclab_tasks/utils/hydra.py:476 `@hydra.main(config_path=None, ...)`)
HYDRA_OUTPUTS = "outputs"


def container_name(job: str) -> str:
    return f"{CONTAINER_PREFIX}{job}"


SPARE_INFIX = "-spare-"


def spare_container_name(job: str, token: str) -> str:
    """A warm spare's container (spare.py): its own name, so it never takes the attempt's. At the go it becomes the
    attempt under this name (the token on its label is the attempt's); `isaacd logs` follows the attempt's handle."""
    return f"{spare_name_prefix(job)}{token[:12]}"


def spare_name_prefix(job: str) -> str:
    """What the names of the job's spare containers, and of their systemd units and unit files, start with."""
    return f"{container_name(job)}{SPARE_INFIX}"


def is_spare_container(job: str, name: str) -> bool:
    """A spare's container (podman lists names with a leading "/") or its unit (quadlet.spare_unit_name)."""
    return name.lstrip("/").startswith(spare_name_prefix(job))


# ---- pieces of the spec ---------------------------------------------------------------------
def cdi_devices(job: JobConfig) -> list[str]:
    """CDI names for the job's GPUs (`nvidia.com/gpu=<index|uuid|N:M|all>`); none for a CPU job.
    The claim is isaacd.gpu.assign.job_gpus's: device = "cuda:N" with no gpus passes GPU N alone."""
    try:
        return gpu_assign.cdi_devices(job)
    except ValueError as exc:
        raise RuntimeFailure(str(exc)) from None


def container_device_arg(job: JobConfig) -> str:
    """--device inside the container: CDI passes the job's GPUs renumbered from 0 (in PCI order,
    which is nvidia-smi's index order), so `device = "cuda:2"` with `gpus = [2, 3]`, or with no gpus
    (CDI passes GPU 2 alone), is cuda:0 inside. Kept in step with cdi_devices by isaacd.gpu.assign."""
    return gpu_assign.container_device(job)


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


def container_ulimits() -> list[str]:
    """memlock (see memlock_ulimit) plus containers.conf's default_ulimits: Podman 4.x replaces the
    whole default list when a unit passes any --ulimit, which would bring back nofile=1048576 on
    hosts that cannot grant it."""
    out = {u.partition("=")[0]: u for u in containers_conf_ulimits()}
    out["memlock"] = memlock_ulimit()
    return list(out.values())


def prepare_log_root(job: JobConfig, owner: RunAs | None, oscalls: OsCalls = HOST_OS) -> None:
    """Create the log root; hand it and the experiment dir to the container's user (the job's owner, as the launch's
    `LaunchSpec.run_as` says; else a numeric container.user: Isaac Lab 3 images run as uid 1000) so the trainer can
    write checkpoints (not recursive)."""
    job.log_root.mkdir(parents=True, exist_ok=True)
    hand_dirs_to_container_user(oscalls, job, owner,
                                [job.log_root, job.log_root / "rsl_rl", job.log_root / "rsl_rl" / job.experiment_name])


def hand_dirs_to_container_user(oscalls: OsCalls, job: JobConfig, owner: RunAs | None, dirs: list[Path]) -> None:
    """chown existing `dirs` (or files: a spare's FIFO) to the container's user, so a non-root trainer can write
    there: the job's owner as resolved by the caller (issue 32; `oscalls.hand_over`, never through a symlink, never a
    third user's), else a numeric container.user (`oscalls.chown`: a symlink itself is chowned, never its target).
    Every call to the kernel goes through the seam (issue 38); a path that is not there is skipped."""
    if owner is not None:
        for d in dirs:
            try:
                oscalls.hand_over(d, owner)
            except (OwnershipRefused, OSError):
                pass  # stays root's: the planner has refused a log_root it could not hand over, naming it
        return
    m = re.fullmatch(r"(\d+)(?::(\d+))?", (job.container.user or "").strip())
    if not m:
        return
    uid = int(m.group(1))
    gid = int(m.group(2)) if m.group(2) else uid
    for d in dirs:
        try:
            oscalls.chown(d, uid, gid)
        except OSError:
            pass  # not there (yet), or not ours to change: the trainer says what it cannot write


def container_command(job: JobConfig, trainer_args: list[str]) -> list[str]:
    """The container's command: launcher (+ torchrun) + shim + train script + flags, as the job's workflow says.

    Inside the container CDI numbers the job's GPUs from 0, so `--device` is rewritten to match, and so are
    isaacd's own `agent.device=`-style overrides (the policy's device; a user's own values are left alone).
    """
    return resolve(job).program(in_container=True).argv(container_args(job, trainer_args))


def container_args(job: JobConfig, trainer_args: list[str]) -> list[str]:
    """The trainer's flags as the container sees them: `--device` and isaacd's `agent.device=`-style overrides
    renumbered to the container's GPUs (a spare's boot and go command lines are rewritten the same way)."""
    inner = container_device_arg(job)
    ours = {f"{key}={job.device}" for key in AGENT_DEVICE_KEYS}
    args = list(trainer_args)
    for i, a in enumerate(args):
        if a == "--device" and i + 1 < len(args):
            args[i + 1] = inner
        elif a in ours:
            args[i] = f"{a.split('=', 1)[0]}={inner}"
    return args


def container_env(job: JobConfig) -> dict[str, str]:
    env = dict(CONTAINER_BASE_ENV)
    env.update(job.container.environment)
    env.update(job.environment)
    for k in SYSTEMD_SERVICE_ENV:  # see host.clean_env
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
        cmd = list(spec.container_argv) if spec.spare else container_command(job, spec.trainer_args)
        log_root = str(job.log_root)
        volumes = [parse_volume(v, job.name) for v in job.container.volumes]
        # the log root at the same absolute path: checkpoint discovery, run-dir detection and
        # TensorBoard tailing in the supervisor see exactly what the trainer writes
        volumes.append((log_root, log_root, ""))
        # upstream train scripts write ./logs/<library>/... relative to their cwd
        workdir = trainer_command.container_workdir(job)
        volumes.append((log_root, f"{workdir}/logs", ""))
        if spec.run_as is not None:
            # Hydra writes outputs/ in the cwd, and an image's workdir is root's: the owner's own directory there
            # (the host cwd's, made theirs by the planner or the spare keeper)
            volumes.append((str(spec.cwd / HYDRA_OUTPUTS), f"{workdir}/{HYDRA_OUTPUTS}", ""))
        env = container_env(job)
        # the compile caches (prepared and handed to container.user by the planner): Warp's, and Kit's for
        # Isaac Sim-based images, at upstream's places (caches/compile_caches.py)
        caches = list(spec.caches)
        volumes.extend(container_volumes(caches))
        env.update(cache_trainer_env(caches, env))
        shim_events = spec.env.get(trainer_command.SHIM_EVENTS_ENV)
        if job.shim and not job.command:
            volumes.extend((host, inside, "ro") for host, inside in shim_mounts())  # the shim, its protocol, its parts
            if shim_events:
                # the side channel at the same path in and out of the container
                volumes.append((str(Path(shim_events).parent), str(Path(shim_events).parent), ""))
                env[trainer_command.SHIM_EVENTS_ENV] = shim_events
                # the shim's snapshot settings (JobConfig.snapshot_*), as the process runtime passes them
                env.update({k: spec.env[k] for k in SNAPSHOT_SETTINGS_ENV if k in spec.env})
        if spec.spare:  # its FIFO, events and staging; the attempts' events dir; its own settings (ISAACD_SPARE_*)
            volumes.extend((str(d), str(d), "") for d in spec.same_path_mounts)
            env.update({k: v for k, v in spec.env.items() if k.startswith(SPARE_ENV_PREFIX) or k in SPARE_CARRIED_ENV})
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
            job=job.name, name=spare_container_name(job.name, token) if spec.spare else container_name(job.name),
            image=image, rootfs=rootfs, entrypoint=cmd[0], args=cmd[1:], env=env, volumes=vols,
            ports=[] if spec.spare else [parse_port(p, job.name) for p in job.container.ports], devices=cdi_devices(job),
            shm_size=job.container.shm_size, ulimits=container_ulimits(),
            labels={"isaacd.job": job.name, "isaacd.attempt": str(attempt), TOKEN_LABEL: token},
            workdir=workdir, user=container_user(job, spec.run_as), stop_timeout=max(1, int(round(job.stop_timeout))),
            attempt=attempt, token=token,
            description=f"isaacd job {job.name} ({'warm spare' if spec.spare else f'attempt {attempt}'})",
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
    """shm_size in bytes as podman reads `--shm-size` (config.sizes.podman_bytes: binary units), so the API's body
    says what `podman run` and Quadlet would."""
    try:
        return podman_bytes(s)
    except ValueError:
        raise RuntimeFailure(f"shm_size {s!r}: use a size such as \"8g\" or \"512m\"") from None


# ---- around a launch ------------------------------------------------------------------------
def attempt_number(spec: LaunchSpec, state_dir: Path) -> int:
    """The attempt this launch is (1, 2, ...): LaunchSpec.attempt when the core passes it, else one
    more than the last attempt saved in the state store (the runner saves after start())."""
    n = getattr(spec, "attempt", None)
    if isinstance(n, int) and n > 0:
        return n
    try:
        hist = StateStore(state_dir).load(spec.job.name)
    except Exception:  # noqa: BLE001 - a label is not worth failing a launch for
        return 0
    return hist.attempts[-1].number + 1 if hist.attempts else 1
