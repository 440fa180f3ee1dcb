"""What `isaacd nodes` shows of the Ray cluster (control.Fleet.nodes_status): each node as last listed, with its
cordon and the jobs on it, cordoned nodes that are gone, and the jobs waiting for room. Cached data only: the
control socket's threads call it, never waiting on Ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .ray_attempts import RayAttempt
from .ray_cluster import RayCluster


@dataclass(frozen=True)
class Cordon:
    """Why isaacd avoids a node (ray_placement.Cordons), since when (unix seconds), and the node's id then."""

    reason: str
    since: float | None = None
    node_id: str | None = None

    @classmethod
    def of(cls, saved: Mapping[str, Any]) -> "Cordon":
        return cls(str(saved.get("reason") or ""), saved.get("since"), saved.get("node_id"))


@dataclass(frozen=True)
class NodeStatus:
    """One node as last listed: its resources (what a job can ask for), its cordon and the jobs on it."""

    name: str
    node_id: str | None
    alive: bool
    address: str | None
    labels: Mapping[str, str]
    total: Mapping[str, float]
    available: Mapping[str, float]
    cordoned: Cordon | None
    jobs: tuple[str, ...]


@dataclass(frozen=True)
class WaitingJob:
    job: str
    reason: str


@dataclass(frozen=True)
class FleetStatus:
    """`isaacd nodes`: the cluster's address, whether isaacd is connected (or why not), its nodes, and the jobs
    waiting for room. Its JSON (the control socket's answer, `isaacd nodes --json`) is made here, in to_json."""

    address: str | None
    connected: bool
    error: str | None
    nodes: tuple[NodeStatus, ...]
    waiting: tuple[WaitingJob, ...]

    def to_json(self) -> dict[str, Any]:
        def node(n: NodeStatus) -> dict[str, Any]:
            cordon = n.cordoned
            return {"name": n.name, "node_id": n.node_id, "alive": n.alive, "address": n.address,
                    "labels": dict(n.labels), "total": dict(n.total), "available": dict(n.available),
                    "cordoned": None if cordon is None else
                    {"reason": cordon.reason, "since": cordon.since, "node_id": cordon.node_id},
                    "jobs": list(n.jobs)}
        return {"address": self.address, "connected": self.connected, "error": self.error,
                "nodes": [node(n) for n in self.nodes],
                "waiting": [{"job": w.job, "reason": w.reason} for w in self.waiting]}


def _shown(resources: dict[str, float]) -> dict[str, float]:
    """Without Ray's per-node markers and the object store: what a job can ask for."""
    return {k: v for k, v in resources.items() if not k.startswith("node:") and k != "object_store_memory"}


def nodes_status(cluster: RayCluster, cordoned: Mapping[str, Mapping[str, Any]], atts: list[RayAttempt]) -> FleetStatus:
    jobs_on: dict[str, list[str]] = {}
    waiting: list[WaitingJob] = []
    for a in atts:
        if a.phase in ("launching", "running") and a.node_id:
            jobs_on.setdefault(a.node_id, []).append(a.job.name)
        elif a.phase in ("waiting", "placing") and a.waiting:
            waiting.append(WaitingJob(a.job.name, a.waiting))
    nodes: list[NodeStatus] = []
    listed = cluster.nodes
    alive_names = {n.name for n in listed.values() if n.alive}
    shown: set[str] = set()
    for n in sorted(listed.values(), key=lambda v: (not v.alive, v.name)):
        if not n.alive and n.name in alive_names | shown:
            continue  # an earlier incarnation of a node that is back (or listed once already)
        shown.add(n.name)
        cordon = cordoned.get(n.name)
        nodes.append(NodeStatus(n.name, n.node_id, n.alive, n.address,
                                {k: v for k, v in n.labels.items() if not k.startswith("ray.io/")},
                                _shown(n.total), _shown(n.avail), Cordon.of(cordon) if cordon is not None else None,
                                tuple(sorted(jobs_on.get(n.node_id, [])))))
    known = {n.name for n in nodes}
    for name, c in sorted(cordoned.items()):
        if name not in known:
            nodes.append(NodeStatus(name, c.get("node_id"), False, None, {}, {}, {}, Cordon.of(c), ()))
    return FleetStatus(cluster.cfg.address, cluster.ray is not None, cluster.connect_error, tuple(nodes),
                       tuple(waiting))
