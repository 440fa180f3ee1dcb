"""What a user who is no admin may ask for in a job (issue 32): refused at submit, each with the key named and the fix.
Pure, apart from resolving symlinks (`os.path.realpath`, a parameter so tests pass a fake).

Refused, each a `ConfigIssue`:
  * `log_root` outside the user's `[access] areas` ("{user}", "{home}" expanded), compared after resolving symlinks:
    a symlink inside an area that points outside is refused. A relative log_root too (it would be the supervisor's).
  * `[jobs.container] volumes` whose host side is outside the areas, or a named volume (rootful Podman keeps named
    volumes in one store for every user: another user's volume could be mounted by name).
  * `environment` / `[jobs.container] environment` keys that make a program load code or write files the job did
    not name (LOADER_KEYS, PATH_KEYS below); path lists (PYTHONPATH, LD_LIBRARY_PATH...) are allowed inside the areas.
  * `priority` above the user's `max_priority`; `preemptible = false` without `non_preemptible`
    (`effective_limits`: defaults, then the user's groups in the order `[access] groups` lists them, then the user).
  * `[jobs.container] user`: the job runs as the user who owns it; a non-admin may not choose a uid.
  * `owner` naming someone else (only an admin gives a job to another user).
  * GPUs named (`gpus = [0, 1]`, `gpus = "all"`, `device = "cuda:N"` or "cuda" without asking the queue): such a job
    is outside the queue, so outside its priorities and the user's quotas, and holds those GPUs whole; a non-admin
    asks with `gpus = N` or `gpu_memory`.
  * `runtime = "ray"`: the trainer would run as the Ray cluster's user, not as the job's owner, outside this host's
    queue and quotas.
  * `[jobs.backup] url = "file://..."` outside the areas: the supervisor (root) writes and prunes there.
  * `[jobs.container] ports` below 1024 on the host: rootful Podman binds them as root.

Nothing to refuse, by construction: isaacd's schema has no key for `--privileged`, added capabilities, the host's
network or PID namespace (`[jobs.container]` is image, shm_size, volumes, ports, environment, user; the runtimes add
nothing of the kind), and every config model forbids unknown keys, so `privileged = true`, `cap_add`, `network =
"host"` or `pid = "host"` is refused by the schema itself as an unknown key.

Allowed: `isaaclab_dir`, `launcher`, `command`, `train_script`, `extra_args`, `spare_preload`: they name what the
job's trainer runs, and the trainer runs as the job's owner (runtimes/), as does isaacd's probe of the launcher's
Isaac Lab version (workflows/installed.py), so they grant nothing the user does not already have at a shell.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

from ..config.access import AccessConfig, Limits
from ..config.schema import ConfigIssue, JobConfig
from ..config.users import User

Realpath = Callable[[str], str]
KEY = "jobs[0]"  # a submitted job file holds one [[jobs]] table: keys are named as in it

# Environment keys refused outright. glibc strips these from a set-uid program's environment because they make the
# dynamic loader or libc load code, or write files, named by whoever sets them (sysdeps/generic/unsecvars.h,
# UNSECURE_ENVVARS: LD_PRELOAD, LD_AUDIT, GCONV_PATH, LD_PROFILE, LD_DEBUG_OUTPUT, MALLOC_TRACE, ...). Today no
# root process loads a job's environment (the process runtime takes the owner's uid in the child before exec(),
# access/owner.py; a container gets it inside only), so this is defence in depth: a root helper put in the start
# path later (sudo, runuser, setpriv, a wrapper script) would load them before it drops to the owner, and no
# training job needs them. BASH_ENV / ENV: a non-interactive bash (Isaac Lab's isaaclab.sh is one) / sh sources it.
# PYTHONSTARTUP / PYTHONINSPECT / PYTHONBREAKPOINT run code the job did not name (an interactive start-up file, a
# prompt, an imported callable).
LOADER_KEYS = frozenset({
    "LD_PRELOAD", "LD_AUDIT", "LD_PROFILE", "LD_DEBUG_OUTPUT", "LD_ORIGIN_PATH", "LD_USE_LOAD_BIAS", "GCONV_PATH",
    "GETCONF_DIR", "MALLOC_TRACE", "GLIBC_TUNABLES", "NLSPATH", "LOCPATH", "HOSTALIASES", "RESOLV_HOST_CONF",
    "BASH_ENV", "ENV", "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONBREAKPOINT",
})
# Path lists the loader or Python search for code: allowed only inside the user's areas, where only they can write
# (a world-writable directory such as /tmp, or another user's, would let someone else plant the code their job
# imports). In a container they name the container's paths (the image, the volumes: checked above), not the host's.
PATH_KEYS = frozenset({"LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX"})
PRIVILEGED_PORTS = 1024  # below it, a port only root binds (the kernel's default ip_unprivileged_port_start)


def effective_limits(user: User, access: AccessConfig) -> Limits:
    """A user's limits: `[access.defaults]`, then each of their groups in the order `[access] groups` lists them,
    then `[access.users.<name>]`, key by key (a key a layer leaves unset keeps the one below). Unset everywhere:
    max_priority 0, non_preemptible false, no quota.

    The quotas (gpus, gpu_memory, queued) skip the groups: a group's quota counts its members together (the
    scheduler holds the group to it), so it is no member's own; merging it in would turn `[access.groups.lab] gpus
    = 8` (the lab's eight) into eight for each member, over `[access.defaults] gpus = 1`."""
    merged = access.defaults.model_dump(exclude_none=True)
    for group, limits in access.groups.items():
        if group in user.groups:
            merged.update(limits.model_dump(exclude_none=True, exclude={"gpus", "gpu_memory", "queued"}))
    if user.name in access.users:
        merged.update(access.users[user.name].model_dump(exclude_none=True))
    merged.setdefault("max_priority", 0)
    merged.setdefault("non_preemptible", False)
    return Limits(**merged)


def areas_of(user: User, access: AccessConfig, realpath: Realpath = os.path.realpath) -> list[str]:
    """The user's areas, expanded and resolved (an area may itself be a symlink, /data -> /mnt/data). An area that
    comes out as "/" or relative is none: a system account's home is often "/" (or unset), and "{home}" must not
    make the whole filesystem theirs."""
    out = []
    for a in access.areas:
        path = a.replace("{home}", user.home).replace("{user}", user.name)
        if not os.path.isabs(path):
            continue
        resolved = realpath(os.path.normpath(path))
        if resolved != "/":
            out.append(resolved)
    return out


def refusals(job: JobConfig, user: User, access: AccessConfig,
             realpath: Realpath = os.path.realpath) -> list[ConfigIssue]:
    """Every reason `user` (no admin) may not run `job` as written, each naming the key and the fix; [] when it may."""
    areas = areas_of(user, access, realpath)
    where = " or ".join(areas) or "nowhere ([access] areas is empty)"
    out: list[ConfigIssue] = []

    def outside(path: str) -> bool:
        return not Path(path).is_absolute() or not any(_under(realpath(os.path.normpath(path)), a) for a in areas)

    if outside(str(job.log_root)):
        out.append(ConfigIssue(f"{KEY}.log_root", f"{job.log_root} is outside your areas (after symlinks): put it "
                                                  f"under {where}"))
    for i, spec in enumerate(job.container.volumes):
        host = spec.split(":", 1)[0]
        if not host.startswith("/"):
            out.append(ConfigIssue(f"{KEY}.container.volumes[{i}]", f'"{spec}" mounts a named volume, which every '
                                   f"user's containers share; mount a directory under {where} instead"))
        elif outside(host):
            out.append(ConfigIssue(f"{KEY}.container.volumes[{i}]", f'"{spec}": {host} is outside your areas (after '
                                                                     f"symlinks): mount a directory under {where}"))
    out += _environment(job.environment, f"{KEY}.environment", None if job.in_container else outside, where)
    out += _environment(job.container.environment, f"{KEY}.container.environment", None, where)
    limits = effective_limits(user, access)
    ceiling = limits.max_priority if limits.max_priority is not None else 0
    if job.priority > ceiling:
        out.append(ConfigIssue(f"{KEY}.priority", f"{job.priority} is above your max_priority ({ceiling}); ask "
                                                  f"{ceiling} or less, or an admin to raise [access] max_priority"))
    if not job.preemptible and not limits.non_preemptible:
        out.append(ConfigIssue(f"{KEY}.preemptible", "false needs [access] non_preemptible, which you do not have; "
                                                     "remove it (your job saves before any preemption: 0 lost)"))
    if job.container.user is not None:
        out.append(ConfigIssue(f"{KEY}.container.user", f'"{job.container.user}": the job runs as you ({user.name}, '
                                                        f"uid {user.uid}); remove user"))
    if job.owner is not None and job.owner != user.name:
        out.append(ConfigIssue(f"{KEY}.owner", f'"{job.owner}": only an admin gives a job to another user; remove '
                                               f"owner (the job is then {user.name}'s)"))
    out += _named_gpus(job)
    if job.runtime == "ray":
        out.append(ConfigIssue(f"{KEY}.runtime", '"ray": its trainer would run as the Ray cluster\'s user, not as '
                                                 'you; use runtime = "process" or "podman"'))
    if job.backup is not None and job.backup.protocol == "file" and outside(urlsplit(job.backup.url).path):
        out.append(ConfigIssue(f"{KEY}.backup.url", f'"{job.backup.url}" is outside your areas (the supervisor writes '
                                                    f"and prunes there): use file:// under {where}"))
    elif job.backup is not None and job.backup.protocol != "file":
        # the supervisor uploads and prunes with its own credentials: a prefix a user names could be anyone's
        out.append(ConfigIssue(f"{KEY}.backup.url", f'"{job.backup.url}": object storage is written with the '
                                                    "supervisor's credentials, under any prefix they reach; ask an "
                                                    f"admin to set it in your job, or use file:// under {where}"))
    for i, spec in enumerate(job.container.ports):
        port = _host_port(spec)
        if port is not None and port < PRIVILEGED_PORTS:
            out.append(ConfigIssue(f"{KEY}.container.ports[{i}]", f'"{spec}": host port {port} is one only root may '
                                   f"bind; use {PRIVILEGED_PORTS} or above"))
    return out


def _under(path: str, area: str) -> bool:
    return path == area or path.startswith(area.rstrip("/") + "/")


def _environment(env: dict[str, str], key: str, outside: Callable[[str], bool] | None,
                 where: str) -> Iterable[ConfigIssue]:
    """`outside` None: paths name a container's filesystem, not the host's (only LOADER_KEYS are refused there)."""
    for name, value in env.items():
        if name in LOADER_KEYS:
            yield ConfigIssue(f"{key}.{name}", "makes the loader or interpreter run code the job did not name, so "
                                               f"a job may not set it; remove {name}")
        elif name in PATH_KEYS and outside is not None:
            bad = [p for p in value.split(":") if p and outside(p)]  # an empty entry: the trainer's cwd, theirs
            if bad:
                yield ConfigIssue(f"{key}.{name}", f"{', '.join(bad)} is outside your areas (after symlinks); list "
                                                   f"only directories under {where}")


def _named_gpus(job: JobConfig) -> list[ConfigIssue]:
    if job.placed_by_isaacd:
        return []
    if job.gpus:
        return [ConfigIssue(f"{KEY}.gpus", f"{job.gpus!r} names GPUs, which puts the job outside the queue (and your "
                                           'quotas); ask with gpus = N or gpu_memory = "12GiB"')]
    if job.device.startswith("cuda"):
        return [ConfigIssue(f"{KEY}.device", f'"{job.device}" uses a GPU outside the queue (and your quotas); ask '
                                             'with gpus = N or gpu_memory = "12GiB"')]
    return []


def _host_port(spec: str) -> int | None:
    """The (first) host port a `container.ports` entry publishes: "PORT" publishes that port on the host too
    (runtimes/container_spec.py); None for what is no port (the runtime refuses it)."""
    parts = spec.rsplit(":", 2)
    host = parts[0] if len(parts) == 1 else parts[-2]
    try:
        return int(host.split("/")[0].split("-")[0])
    except ValueError:
        return None
