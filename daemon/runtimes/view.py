"""What a runtime can say about one trainer from its cached state (`Runtime.describe`): a value, no I/O."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RuntimeView:
    """One trainer as its runtime knows it; None where that runtime has no such thing (or does not know yet)."""

    pid: int | None = None  # the trainer's main process (on its node, for ray)
    cgroup: str | None = None  # podman, systemd: for GPU attribution by cgroup
    container: str | None = None  # podman, systemd (Quadlet): the container's name
    container_id: str | None = None
    unit: str | None = None  # systemd
    unit_file: str | None = None  # systemd
    node: str | None = None  # ray: the node it runs on
    node_id: str | None = None  # ray
    hostname: str | None = None  # ray
    log_path: str | None = None  # process, ray: where its output goes
    attempt: int | None = None  # podman, systemd: the attempt number its container/unit was made for
    waiting: str | None = None  # ray: why it is not placed yet (no room); never a hang
