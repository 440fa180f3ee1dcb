"""What `isaacd nodes` shows of the Ray cluster (control.Fleet.nodes_status): each node as last listed, with its
cordon and the jobs on it, cordoned nodes that are gone, and the jobs waiting for room. Cached data only: the
control socket's threads call it, never waiting on Ray.
"""

from __future__ import annotations

from typing import Any

from .ray_attempts import RayAttempt
from .ray_cluster import RayCluster


def _shown(resources: dict[str, float]) -> dict[str, float]:
    """Without Ray's per-node markers and the object store: what a job can ask for."""
    return {k: v for k, v in resources.items() if not k.startswith("node:") and k != "object_store_memory"}


def nodes_status(cluster: RayCluster, cordoned: dict[str, dict[str, Any]], atts: list[RayAttempt]) -> dict[str, Any]:
    jobs_on: dict[str, list[str]] = {}
    waiting: list[dict[str, Any]] = []
    for a in atts:
        if a.phase in ("launching", "running") and a.node_id:
            jobs_on.setdefault(a.node_id, []).append(a.job.name)
        elif a.phase in ("waiting", "placing") and a.waiting:
            waiting.append({"job": a.job.name, "reason": a.waiting})
    nodes = []
    listed = cluster.nodes
    alive_names = {n.name for n in listed.values() if n.alive}
    shown: set[str] = set()
    for n in sorted(listed.values(), key=lambda v: (not v.alive, v.name)):
        if not n.alive and n.name in alive_names | shown:
            continue  # an earlier incarnation of a node that is back (or listed once already)
        shown.add(n.name)
        nodes.append({"name": n.name, "node_id": n.node_id, "alive": n.alive, "address": n.address,
                      "labels": {k: v for k, v in n.labels.items() if not k.startswith("ray.io/")},
                      "total": _shown(n.total), "available": _shown(n.avail),
                      "cordoned": cordoned.get(n.name), "jobs": sorted(jobs_on.get(n.node_id, []))})
    known = {n["name"] for n in nodes}
    for name, c in sorted(cordoned.items()):
        if name not in known:
            nodes.append({"name": name, "node_id": c.get("node_id"), "alive": False, "address": None,
                          "labels": {}, "total": {}, "available": {}, "cordoned": c, "jobs": []})
    return {"address": cluster.cfg.address, "connected": cluster.ray is not None, "error": cluster.connect_error,
            "nodes": nodes, "waiting": waiting}
