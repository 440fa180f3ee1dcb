"""The Ray runtime's view of the cluster: one connection (ray.init, the actor class) and the node listing from the
GCS, cached for NODES_REFRESH seconds. Called on the runtime's worker thread, or at recovery (runtimes/ray.py);
`nodes` and `connect_error` are the cached answers the operator side reads.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from ..config.schema import RayConfig
from ..daemon_log import log

NODES_REFRESH = 1.0  # s between GCS node listings while attempts live


def ray_available() -> str | None:
    """Why `import ray` fails here, or None."""
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        return f"{exc}"
    return None


@dataclass
class NodeView:
    node_id: str
    name: str
    alive: bool
    address: str
    hostname: str
    labels: dict[str, str]
    total: dict[str, float]
    avail: dict[str, float]


class RayCluster:
    """The connection and the nodes as last listed. `ray` is the connected module (None until connected)."""

    def __init__(self, cfg: RayConfig):
        self.cfg = cfg
        self.ray: Any = None
        self.actor_cls: Any = None
        self.connect_error: str | None = None
        self.nodes: dict[str, NodeView] = {}
        self._nodes_at = float("-inf")

    def connect(self) -> Any:
        if self.ray is not None:
            return self.ray
        import ray

        from .ray_actor import TrainerActor

        try:
            if not ray.is_initialized():
                ray.init(address=self.cfg.address, namespace=self.cfg.namespace, log_to_driver=False,
                         logging_level=logging.WARNING, configure_logging=False)
        except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, ...
            self.connect_error = f"cannot reach the Ray cluster at {self.cfg.address}: {exc}"
            raise
        self.actor_cls = ray.remote(TrainerActor)
        self.ray = ray
        self.connect_error = None
        log.info("ray_connected", address=self.cfg.address, namespace=self.cfg.namespace)
        return ray

    def refresh(self, force: bool = False) -> dict[str, NodeView]:
        """The nodes by NodeID, listed again when the last listing is older than NODES_REFRESH (or `force`)."""
        now = time.monotonic()
        if not force and now - self._nodes_at < NODES_REFRESH:
            return self.nodes
        ray = self.connect()
        raw = ray.nodes()
        try:
            from ray._private.state import state as _gstate

            avail_by_node = _gstate.available_resources_per_node()
        except Exception:  # noqa: BLE001 - private API: without it, totals stand in for what is free
            avail_by_node = {}
        hosts: dict[str, int] = {}
        for n in raw:
            hosts[n.get("NodeManagerHostname", "")] = hosts.get(n.get("NodeManagerHostname", ""), 0) + 1
        nodes: dict[str, NodeView] = {}
        for n in raw:
            labels = {str(k): str(v) for k, v in (n.get("Labels") or {}).items()}
            host = n.get("NodeManagerHostname", "")
            name = labels.get(self.cfg.node_label) or (host if hosts.get(host, 0) == 1 else f"{host}-{n['NodeID'][:8]}")
            total = {k: float(v) for k, v in (n.get("Resources") or {}).items()}
            nodes[n["NodeID"]] = NodeView(n["NodeID"], name, bool(n.get("Alive")), n.get("NodeManagerAddress", ""),
                                          host, labels, total,
                                          {k: float(v) for k, v in (avail_by_node.get(n["NodeID"]) or total).items()})
        # a name reused by a node that came back (new NodeID): the alive one wins
        self.nodes, self._nodes_at = nodes, now
        return nodes

    def refresh_or_cached(self, force: bool = False) -> dict[str, NodeView]:
        """`refresh`, or the last listing when the cluster cannot be asked now (the caller decides without it)."""
        try:
            return self.refresh(force=force)
        except Exception:  # noqa: BLE001
            return self.nodes
