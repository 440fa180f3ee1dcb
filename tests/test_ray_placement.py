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
