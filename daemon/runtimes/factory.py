"""The runtime a job's `runtime = "..."` names, built once per supervisor (see Supervisor.runtime).

Kept apart from base.py, the interface: the concrete runtimes import the interface, and only this module
knows them all.
"""

from __future__ import annotations

from ..config.schema import Config
from .base import Runtime
from .podman import PodmanRuntime
from .process import ProcessRuntime
from .ray import RayRuntime
from .systemd import SystemdRuntime


def make_runtime(name: str, config: Config) -> Runtime:
    if name == "process":
        return ProcessRuntime()
    if name == "podman":
        return PodmanRuntime(config)
    if name == "systemd":
        return SystemdRuntime(config)
    if name == "ray":
        return RayRuntime(config)
    raise ValueError(f"unknown runtime {name!r}")
