"""The control socket's requests against the narrow interfaces it is given (control.Controlled, control.Fleet),
without a supervisor, a socket or Ray; and the real parts fit those interfaces."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest
from helpers import write_config

from isaacd.config.schema import load_config
from isaacd.access.policy import Caller
from isaacd.control import Controlled, Fleet, RequestError, dispatch as dispatch_as

ROOT = Caller(0, "root", True)


def dispatch(sup: Controlled, req: Any) -> Any:
    return dispatch_as(sup, req, ROOT)
from isaacd.jobs.model import JobState
from isaacd.status.types import JobStatus
from isaacd.status.signals import JobSignals
from isaacd.runtimes.ray import RayRuntime
from isaacd.runtimes.ray_fleet import FleetStatus, NodeStatus
from isaacd.status.types import Status
from isaacd.supervisor import Supervisor
from isaacd.watchdogs.engine import WatchdogEngine
from isaacd.watchdogs.gpufeed import FeedTick


class FakeCordons:
    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}

    def get(self) -> dict[str, dict[str, Any]]:
        return dict(self.nodes)

    def add(self, node: str, reason: str, node_id: str | None = None) -> bool:
        if node in self.nodes:
            return False
        self.nodes[node] = {"reason": reason, "node_id": node_id}
        return True

    def remove(self, node: str) -> bool:
        return self.nodes.pop(node, None) is not None


class FakeFleet:
    def __init__(self) -> None:
        self.cordons = FakeCordons()
        self.listed: list[dict[str, Any]] = []
        self.refreshes = 0

    def nodes_status(self) -> FleetStatus:
        return FleetStatus("ray://head:10001", True, None,
                           tuple(NodeStatus(n["name"], None, True, None, {}, {}, {}, None, ()) for n in self.listed), ())

    def refresh_for_operator(self) -> None:
        self.refreshes += 1


class FakeJournal:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def append_event(self, job: str, event: str, **fields: Any) -> dict[str, Any]:
        self.events.append((job, event, fields))
        return fields


class FakeSupervisor:
    config = None
    store = FakeJournal()

    def __init__(self, fleet: Fleet | None = None) -> None:
        self.jobs = {"a": [{"event": "started"}]}
        self.commands: list[tuple[str, str]] = []
        self._fleet = fleet

    def status(self) -> Status:
        return Status.from_json({"jobs": [{"name": "a", "state": "running"}]})

    def job_names(self) -> Collection[str]:
        return self.jobs.keys()

    def events(self, job: str, limit: int | None = None) -> list[dict[str, Any]]:
        return self.jobs[job][:limit]

    def command(self, op: str, job: str) -> str:
        self.commands.append((op, job))
        return "ok"

    def reload(self) -> dict[str, Any]:
        return {"ok": True}

    def fleet(self) -> Fleet | None:
        return self._fleet


def test_job_requests_go_through_the_controlled_interface() -> None:
    sup: Controlled = FakeSupervisor()
    answer = dispatch(sup, {"cmd": "status"})
    assert [(j["name"], j["state"]) for j in answer["jobs"]] == [("a", "running")]  # the wire JSON
    assert dispatch(sup, {"cmd": "events", "job": "a", "limit": 1}) == [{"event": "started"}]
    assert dispatch(sup, {"cmd": "restart", "job": "a"}) == "ok"
    assert sup.commands == [("restart", "a")]  # type: ignore[attr-defined]
    with pytest.raises(RequestError, match='no job named "b"; jobs here: a'):
        dispatch(sup, {"cmd": "stop", "job": "b"})
    assert dispatch(sup, {"cmd": "reload"}) == {"ok": True}


def test_node_requests_need_a_fleet() -> None:
    with pytest.raises(RequestError, match=r"no \[ray\] section"):
        dispatch(FakeSupervisor(), {"cmd": "nodes"})


def test_node_requests_act_on_the_fleet() -> None:
    fleet = FakeFleet()
    sup = FakeSupervisor(fleet)
    assert dispatch(sup, {"cmd": "nodes"}) == {"address": "ray://head:10001", "connected": True, "error": None,
                                               "nodes": [], "waiting": []}
    assert fleet.refreshes == 1  # nothing listed yet: a listing is asked for
    fleet.listed = [{"name": "n1"}]
    dispatch(sup, {"cmd": "nodes"})
    assert fleet.refreshes == 1
    assert "n1 cordoned" in dispatch(sup, {"cmd": "cordon", "node": "n1"})
    assert fleet.cordons.nodes["n1"]["reason"] == "operator (isaacd cordon)"
    assert dispatch(sup, {"cmd": "cordon", "node": "n1"}) == "n1 was already cordoned"
    assert "n1 uncordoned" in dispatch(sup, {"cmd": "uncordon", "node": "n1"})
    with pytest.raises(RequestError, match=r"node 'n1' is not cordoned \(cordoned: none\)"):
        dispatch(sup, {"cmd": "uncordon", "node": "n1"})


def test_the_real_parts_fit_the_interfaces(tmp_path: Path) -> None:
    for name in ("status", "job_names", "events", "command", "reload", "fleet"):
        assert callable(getattr(Supervisor, name, None)), f"Supervisor lacks control.Controlled.{name}"
    cfg = load_config(write_config(tmp_path, "", extra='[ray]\naddress = "auto"\n'))
    assert isinstance(RayRuntime(cfg), Fleet)
    assert isinstance(FakeFleet(), Fleet)


def test_watchdog_engine_needs_only_the_jobs_signals(tmp_path: Path) -> None:
    """The engine holds no supervisor: the jobs' signals come with each tick."""
    class NoGpus:
        def poll(self) -> FeedTick:
            return FeedTick()

        def set_power_limit(self, gpu: int, watts: float) -> None:
            raise PermissionError

        def mark_unhealthy(self, gpu: int, reason: str) -> None:
            pass

    cfg = load_config(write_config(tmp_path, '[[jobs]]\nname = "a"\n'))
    engine = WatchdogEngine(NoGpus())
    sig = JobSignals(name="a", cfg=cfg.jobs[0], alive=True, attempt=1, attempt_started_at=0.0, first_step=0,
                     iteration=0, last_progress_time=0.0, state=JobState.RUNNING)
    assert engine.tick(1.0, [sig]) == []
    assert set(engine.job_status(JobStatus(name="a")).watchdogs) >= {"no_progress", "xid"}
    assert engine.job_status(JobStatus(name="b")) == JobStatus(name="b")
