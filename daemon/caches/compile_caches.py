"""Compile caches that survive a restart: Warp's kernel cache, and Kit's caches for Isaac Sim-based images.

Why: on the H200 the real Isaac Lab 3.0 takes 26 s from launch to its first iteration with warm caches, 50 s with
an empty Warp kernel cache and 165 s on a fresh machine (measured on the H200, session 4). A container
started from an image has none of them unless they live on a volume, so every container restart paid the 50 s.

Where (one host directory per job by default, `compile_cache = "image"` shares one per image):
    <state_dir>/caches/<job>/warp                  -> WARP_CACHE_PATH (process runtime: the host path itself)
    <state_dir>/caches/<job>/kit/{kit,ov,glcache,computecache}  (containers of Isaac Sim-based images only)
    <state_dir>/caches/<job>/cuda                  -> CUDA_CACHE_PATH (containers of kit-less images: the driver's
                                                      JIT cache, which Kit's set carries as ComputeCache)

What reads them, as read upstream:
- Warp 1.17 `warp/_src/build.py` `init_kernel_cache`: `warp.config.kernel_cache_dir`, else the environment's
  `WARP_CACHE_PATH` (kernels under `<it>/<warp version>`), else the user cache dir (`~/.cache/warp/<version>`).
  isaacd sets `WARP_CACHE_PATH` unless the job's own environment already does (a user's choice wins). Warp
  builds each module in a temporary directory and renames it into place (`warp/_src/context.py`, `safe_rename`
  and `os.replace`), so trainers of one image may share a directory.
- Kit: Isaac Lab's own `docker/docker-compose.yaml` keeps `/isaac-sim/kit/cache`, `~/.cache/ov`,
  `~/.cache/nvidia/GLCache` and `~/.nv/ComputeCache` on volumes; `docker/.env.base` has the user's home at
  `/root`. The same four are mounted here, at the same places.

Which jobs get which (`for_job`, the rules the README states):
- the built-in trainer without a `command` gets none: it is isaacd's torch-only toy trainer, Warp is never imported,
  so a directory would only clutter status and doctor;
- Ray jobs with `container = true` get none (see for_job: the node may not have the head's directory);
- every other job gets the Warp cache (a `command` job may well run Isaac Lab itself);
- Kit's caches only for containers of Isaac Sim-based images: a train-script job (rsl_rl, rl_games, skrl; Isaac Lab
  1.x/2.x, or a 3.x source checkout in an image), not the kit-less 3.x form (the package in the launcher's Python,
  `launcher = ["/opt/isaaclab-venv/bin/python"]`, or an image whose reference says "kitless"), not `command` jobs
  (isaacd cannot tell what they run). Kit never boots in a process-runtime job's own directories here: the host's
  `~/.cache/ov` etc. already survive a restart there.

This module only says where; the launch adds the environment and the volumes, `doctor` and `isaacd status` show
the directories and their sizes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config.schema import JobConfig

WARP_ENV = "WARP_CACHE_PATH"
# the CUDA driver's JIT cache (PTX compiled for this GPU; ~/.nv/ComputeCache by default, gone with a container)
CUDA_ENV = "CUDA_CACHE_PATH"
CACHE_ENV = {"warp": WARP_ENV, "cuda": CUDA_ENV}  # cache name -> the variable that points the trainer at it
CONTAINER_CACHE_ROOT = "/var/cache/isaacd"  # inside containers: where the Warp cache is mounted
CONTAINER_HOME = "/root"  # Isaac Lab's Isaac Sim-based images (docker/.env.base DOCKER_USER_HOME)
ISAACSIM_ROOT = "/isaac-sim"  # docker/.env.base DOCKER_ISAACSIM_ROOT_PATH
KIT_TARGETS = {  # name -> where Kit reads it inside an Isaac Sim-based image (docker/docker-compose.yaml)
    "kit": f"{ISAACSIM_ROOT}/kit/cache",
    "ov": f"{CONTAINER_HOME}/.cache/ov",
    "glcache": f"{CONTAINER_HOME}/.cache/nvidia/GLCache",
    "computecache": f"{CONTAINER_HOME}/.nv/ComputeCache",
}
SCOPES = ("job", "image", "off")


@dataclass(frozen=True)
class CacheDir:
    """One cache: its name, the host directory, and where a container sees it (None: process runtime only)."""

    name: str
    host: Path
    container: str | None


def scope_dir(state_dir: Path, job_name: str, scope: str, image: str | None, owner: str | None = None) -> Path | None:
    """The directory a job's caches live in; None when caching is off."""
    if scope == "off":
        return None
    if scope == "image" and image:
        # one per image reference, in a file-system-safe spelling ("nvcr.io/nvidia/isaac-lab:2.3.0" ->
        # "nvcr.io_nvidia_isaac-lab_2.3.0"); without an image (process runtime) per job it is. A job that runs as
        # its owner (issue 32) shares only with that owner's jobs ("...@alice": "@" is never in the safe spelling),
        # since the cache is theirs and another user's trainer must not write what theirs will load
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", image)
        return state_dir / "caches" / "images" / (f"{safe}@{owner}" if owner not in (None, "root") else safe)
    return state_dir / "caches" / job_name


def cache_dirs(root: Path | None, *, in_container: bool, kit: bool) -> list[CacheDir]:
    """The caches a job's trainer gets. `kit`: the image carries Isaac Sim (Kit boots there)."""
    if root is None:
        return []
    dirs = [CacheDir("warp", root / "warp", f"{CONTAINER_CACHE_ROOT}/warp" if in_container else None)]
    if in_container and kit:
        dirs += [CacheDir(name, root / "kit" / name, target) for name, target in KIT_TARGETS.items()]
    elif in_container:  # Kit's set has ComputeCache at its own place; a kit-less image gets it by CUDA_CACHE_PATH
        dirs.append(CacheDir("cuda", root / "cuda", f"{CONTAINER_CACHE_ROOT}/cuda"))
    return dirs


def trainer_env(dirs: list[CacheDir], job_environment: dict[str, str]) -> dict[str, str]:
    """WARP_CACHE_PATH (and, in a kit-less container, CUDA_CACHE_PATH) for the trainer and its spare, unless the
    job's environment sets them itself."""
    env = {}
    for d in dirs:
        var = CACHE_ENV.get(d.name)
        if var is not None and var not in job_environment:
            env[var] = d.container or str(d.host)
    return env


def container_volumes(dirs: list[CacheDir]) -> list[tuple[str, str, str]]:
    """(host, container, options) bind mounts, in the shape of ContainerSpec's volumes."""
    return [(str(d.host), d.container, "rw") for d in dirs if d.container is not None]


def prepare(dirs: list[CacheDir]) -> str | None:
    """Create the directories; the problem (naming the directory and the fix) when one cannot be written."""
    for d in dirs:
        try:
            d.host.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return (f"cannot create the {d.name} compile cache {d.host}: {exc.strerror or exc}; make it writable "
                    "for isaacd, or set compile_cache = \"off\" for the job")
        if not os.access(d.host, os.W_OK | os.X_OK):
            return (f"the {d.name} compile cache {d.host} is not writable by isaacd (uid {os.getuid()}); "
                    "fix its owner or mode, or set compile_cache = \"off\" for the job")
    return None


def writable_problem(dirs: list[CacheDir]) -> str | None:
    """prepare()'s answer without creating anything (for `isaacd doctor`): a directory that exists must be writable,
    one that does not must be creatable (its nearest existing parent writable)."""
    for d in dirs:
        p = d.host
        while not p.exists() and p != p.parent:
            p = p.parent
        if not os.access(p, os.W_OK | os.X_OK):
            what = "is" if p == d.host else f"cannot be created: {p}"
            return (f"the {d.name} compile cache {d.host} {what} not writable by isaacd (uid {os.getuid()}); "
                    "fix its owner or mode, or set compile_cache = \"off\" for the job")
    return None


def size_bytes(path: Path) -> int:
    """Bytes under `path` (files only; what vanishes during the walk is skipped: a trainer may be writing)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path, onerror=lambda _e: None):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def kit_image(job: "JobConfig") -> bool:
    """The job's container image carries Isaac Sim, so Kit boots there and its caches matter (see the rules above)."""
    from ..workflows.launcher import pip_installed  # the workflows import config: kept out of import time

    if not job.in_container or job.workflow == "builtin" or job.command:
        return False
    return not pip_installed(job) and "kitless" not in job.container.image.lower()


def for_job(job: "JobConfig", state_dir: Path) -> list[CacheDir]:
    """The job's caches by its `compile_cache` key (none for the built-in trainer without a command: no Warp)."""
    if job.workflow == "builtin" and not job.command:
        return []
    if job.runtime == "ray" and job.in_container:
        # the trainer's node may be another machine: a bind mount of a directory only the head has makes
        # `podman run` fail there (podman does not create bind sources); such containers keep the image's caches
        return []
    image = job.container.image if job.in_container else None
    root = scope_dir(state_dir, job.name, job.compile_cache, image, job.owner)
    return cache_dirs(root, in_container=job.in_container, kit=kit_image(job))
