"""The Ray runtime's node choice (runtimes/ray_placement.Placement), without a cluster: the reasons an attempt
waits, the job's previous node first, and the room an actor we killed leaves before Ray reports it. The same
choice on a real cluster: tests/test_ray_runtime.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import builtin_job, write_config

from isaacd.config.schema import JobConfig, RayJobConfig, load_config
from isaacd.runtimes.ray_cluster import NodeView
from isaacd.runtimes.ray_placement import Cordons, Placement


def _job(tmp_path: Path, **ray: Any) -> JobConfig:
    cfg = load_config(write_config(tmp_path, builtin_job("cp", runtime="ray"), extra='[ray]\naddress = "auto"\n'))
    job = cfg.jobs[0]
    return job.model_copy(update={"ray": RayJobConfig(num_cpus=1, **ray)})  # validated: labels as a TOML table


def _node(name: str, gpus: float, free_gpus: float, labels: dict[str, str] | None = None) -> NodeView:
    return NodeView(f"id-{name}", name, True, "10.0.0.1", name, labels or {},
                    {"CPU": 4.0, "GPU": gpus}, {"CPU": 4.0, "GPU": free_gpus})


def test_the_reasons_an_attempt_waits(tmp_path: Path) -> None:
    job = _job(tmp_path, num_gpus=2, labels={"gpu-type": "h200"})
    cordons = Cordons(tmp_path / "cordoned.json")
    cordons.add("a", "node lost: its raylet is gone")
    nodes = {n.node_id: n for n in (_node("a", 2, 2, {"gpu-type": "h200"}), _node("b", 2, 2),
                                    _node("c", 1, 1, {"gpu-type": "h200"}))}
    node, why = Placement(cordons).choose(job, nodes)
    assert node is None
    assert why == ("no node fits: a cordoned (node lost: its raylet is gone); b lacks labels {'gpu-type': 'h200'}; "
                   "c too small (GPU 1 < 2)")
    # persisted: a supervisor started later avoids the node too
    assert "a" in Cordons(tmp_path / "cordoned.json").get()


def test_busy_nodes_wait_and_a_released_actor_makes_room_at_once(tmp_path: Path) -> None:
    job = _job(tmp_path, num_gpus=1)
    busy = _node("a", 1, 0)
    placement = Placement(Cordons(tmp_path / "cordoned.json"))
    node, why = placement.choose(job, {busy.node_id: busy})
    assert node is None and why == "waiting for room: every node that fits is busy: a (GPU 0 < 1)"
    placement.released(busy.node_id, job.ray.demand())  # Ray still reports the GPU taken
    node, why = placement.choose(job, {busy.node_id: busy})
    assert node is busy and why is None


def test_the_previous_node_first_then_the_most_free_gpus(tmp_path: Path) -> None:
    job = _job(tmp_path, num_gpus=1)
    a, b = _node("a", 4, 1), _node("b", 4, 3)
    placement = Placement(Cordons(tmp_path / "cordoned.json"))
    nodes = {a.node_id: a, b.node_id: b}
    assert placement.choose(job, nodes)[0] is b
    placement.remember(job.name, "a")  # a crash resumes in place
    assert placement.choose(job, nodes)[0] is a
    placement.taken(job, a)  # a's one free GPU is spoken for in this pass
    assert a.avail["GPU"] == 0.0 and placement.choose(job, nodes)[0] is b


def test_isaacd_nodes_answer_keeps_its_json_shape(tmp_path: Path) -> None:
    """`isaacd nodes --json` (ray_fleet.FleetStatus.to_json): each node with its cordon and jobs, a cordoned node that
    is gone, Ray's own markers left out of the resources, and the jobs waiting for room."""
    from types import SimpleNamespace

    from isaacd.runtimes.ray_fleet import nodes_status

    a = NodeView("id-a", "a", True, "10.0.0.1", "a", {"gpu-type": "h200", "ray.io/node_id": "x"},
                 {"CPU": 4.0, "GPU": 2.0, "node:10.0.0.1": 1.0, "object_store_memory": 1e9}, {"CPU": 3.0, "GPU": 1.0})
    cluster = SimpleNamespace(nodes={"id-a": a}, cfg=SimpleNamespace(address="ray://head:10001"), ray=object(),
                              connect_error=None)
    job = _job(tmp_path)
    atts = [SimpleNamespace(phase="running", node_id="id-a", job=job, waiting=None),
            SimpleNamespace(phase="waiting", node_id=None, job=job.model_copy(update={"name": "big"}),
                            waiting="no node fits: a too small (GPU 1 < 4)")]
    cordons = {"gone": {"reason": "node lost", "since": 5.0, "node_id": "id-gone"}}
    assert nodes_status(cluster, cordons, atts).to_json() == {  # type: ignore[arg-type]
        "address": "ray://head:10001", "connected": True, "error": None,
        "nodes": [{"name": "a", "node_id": "id-a", "alive": True, "address": "10.0.0.1",
                   "labels": {"gpu-type": "h200"}, "total": {"CPU": 4.0, "GPU": 2.0},
                   "available": {"CPU": 3.0, "GPU": 1.0}, "cordoned": None, "jobs": ["cp"]},
                  {"name": "gone", "node_id": "id-gone", "alive": False, "address": None, "labels": {}, "total": {},
                   "available": {}, "cordoned": {"reason": "node lost", "since": 5.0, "node_id": "id-gone"},
                   "jobs": []}],
        "waiting": [{"job": "big", "reason": "no node fits: a too small (GPU 1 < 4)"}]}
