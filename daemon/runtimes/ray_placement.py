"""Which node of the Ray cluster an attempt goes to (runtimes/ray.py): alive, not cordoned, one the job names,
with the job's labels, big enough, with room now; the job's previous node first, so a crash resumes in place.
No node fits, or none has room: no node, and the reason the attempt waits. Pure choice over the node listing
(ray_cluster.NodeView), the cordons and what this runtime released lately; the cordons persist in a file.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from ..config.schema import JobConfig
from ..daemon_log import log
from .ray_cluster import NodeView

RELEASED_CREDIT = 30.0  # s resources of an actor we killed count as free on its node (Ray reports lag)


class Cordons:
    """Nodes isaacd avoids, by name, until an operator clears them; persisted across supervisor restarts."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        try:
            self._data: dict[str, dict[str, Any]] = json.loads(path.read_text())
        except (OSError, ValueError):
            self._data = {}

    def get(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {k: dict(v) for k, v in self._data.items()}

    def add(self, node: str, reason: str, node_id: str | None = None) -> bool:
        with self._lock:
            if node in self._data:
                return False
            self._data[node] = {"reason": reason, "since": time.time(), "node_id": node_id}
            self._save()
        log.warning("ray_node_cordoned", node=node, reason=reason,
                    detail=f"no job is placed there until `isaacd uncordon {node}`")
        return True

    def remove(self, node: str) -> bool:
        with self._lock:
            if self._data.pop(node, None) is None:
                return False
            self._save()
        log.info("ray_node_uncordoned", node=node)
        return True

    def _save(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._data, indent=1))
            os.replace(tmp, self.path)
        except OSError as exc:
            log.error("ray_cordons_not_saved", path=str(self.path), error=str(exc))


def _fits(demand: dict[str, float], have: dict[str, float]) -> bool:
    return all(have.get(k, 0.0) + 1e-9 >= v for k, v in demand.items())


def _short(demand: dict[str, float], have: dict[str, float]) -> str:
    miss = [f"{k} {have.get(k, 0.0):g} < {v:g}" for k, v in demand.items() if have.get(k, 0.0) + 1e-9 < v]
    return ", ".join(miss)


class Placement:
    """The node choice and what it remembers between choices: each job's last node (resume in place) and the
    resources of actors this runtime killed, which Ray reports free only after a lag. Worker thread only."""

    def __init__(self, cordons: Cordons):
        self.cordons = cordons
        self._released: list[tuple[float, str, dict[str, float]]] = []  # (when, node_id, demand)
        self._last_node: dict[str, str] = {}  # job -> node name of its latest attempt (resume in place)

    def choose(self, job: JobConfig, nodes: dict[str, NodeView]) -> tuple[NodeView | None, str | None]:
        """The node for the job's next attempt, or None and why it waits."""
        demand = job.ray.demand()
        cordoned = self.cordons.get()
        now = time.monotonic()
        self._released = [r for r in self._released if now - r[0] < RELEASED_CREDIT]
        why: list[str] = []
        cands: list[NodeView] = []
        for n in sorted(nodes.values(), key=lambda v: v.name):
            if not n.alive:
                continue
            if n.name in cordoned:
                why.append(f"{n.name} cordoned ({cordoned[n.name]['reason']})")
            elif job.ray.nodes and n.name not in job.ray.nodes:
                continue
            elif any(n.labels.get(k) != v for k, v in job.ray.labels.items()):
                why.append(f"{n.name} lacks labels {job.ray.labels}")
            elif not _fits(demand, n.total):
                why.append(f"{n.name} too small ({_short(demand, n.total)})")
            else:
                cands.append(n)
        if not cands:
            return None, "no node fits: " + ("; ".join(why) if why else "no alive node in the cluster")
        fits = [n for n in cands if _fits(demand, self._free(n))]
        last = self._last_node.get(job.name)
        for n in fits:
            if n.name == last:
                return n, None
        if fits:
            return max(fits, key=lambda n: (self._free(n).get("GPU", 0.0), self._free(n).get("CPU", 0.0))), None
        busy = "; ".join(f"{n.name} ({_short(demand, self._free(n))})" for n in cands)
        return None, f"waiting for room: every node that fits is busy: {busy}"

    def _free(self, n: NodeView) -> dict[str, float]:
        """What Ray says is free on the node, plus what we released there lately."""
        have = dict(n.avail)
        for _, nid, d in self._released:
            if nid == n.node_id:
                for k, v in d.items():
                    have[k] = min(have.get(k, 0.0) + v, n.total.get(k, 0.0))
        return have

    def taken(self, job: JobConfig, node: NodeView) -> None:
        """The job was placed on `node`: it resumes there next, and what it takes is not free for the next
        placement in the same pass."""
        self._last_node[job.name] = node.name
        for k, v in job.ray.demand().items():
            node.avail[k] = node.avail.get(k, 0.0) - v

    def released(self, node_id: str, demand: dict[str, float]) -> None:
        """An actor of ours on `node_id` was killed: count its resources as free there for RELEASED_CREDIT s."""
        self._released.append((time.monotonic(), node_id, demand))

    def remember(self, job: str, node: str) -> None:
        """The job's attempt runs on `node` (adopted at recovery): its next attempt prefers it."""
        self._last_node[job] = node
