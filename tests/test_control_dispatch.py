"""The control socket's requests against the narrow interfaces it is given (control.Controlled, control.Fleet),
without a supervisor, a socket or Ray; and the real parts fit those interfaces."""

from __future__ import annotations

import json
import os
from collections.abc import Collection
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import NoGpus, write_config

from isaacd.access.policy import Caller
from isaacd.config.schema import load_config
from isaacd.config.users import User
from isaacd.control import ControlServer, Controlled, Fleet, RequestError, Rules, dispatch as dispatch_as
from isaacd.jobs.model import JobState
from isaacd.status.types import JobStatus
from isaacd.status.signals import JobSignals
from isaacd.runtimes.ray import RayRuntime
from isaacd.runtimes.ray_fleet import FleetStatus, NodeStatus
from isaacd.status.types import Status
from isaacd.sweeps.trial_file import toml_job_file
from isaacd.supervisor import Supervisor
from isaacd.watchdogs.engine import WatchdogEngine

ROOT = Caller(0, "root", True)


def dispatch(sup: Controlled, req: Any) -> Any:
    """A request of root's (the requests' own tests); a user who is no admin: dispatch_as, at the end."""
    return dispatch_as(sup, req, ROOT)


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

    def ended(self, job: str, nth: int = 1) -> Any:
        return None  # no ended jobs here (tests/test_ended_jobs.py has them)

    def ended_jobs(self, job: str | None = None) -> list[Any]:
        return []


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
    cfg = load_config(write_config(tmp_path, '[[jobs]]\nname = "a"\n'))
    engine = WatchdogEngine(NoGpus())
    sig = JobSignals(name="a", cfg=cfg.jobs[0], alive=True, attempt=1, attempt_started_at=0.0, first_step=0,
                     iteration=0, last_progress_time=0.0, state=JobState.RUNNING)
    assert engine.tick(1.0, [sig]) == []
    assert set(engine.job_status(JobStatus(name="a")).watchdogs) >= {"no_progress", "xid"}
    assert engine.job_status(JobStatus(name="b")) == JobStatus(name="b")


# ---- issue 32: a caller who is no admin (access/policy.py decides; here, that dispatch asks it and acts on it) ----
def _job(name: str, owner: str | None, env: dict[str, str] | None = None) -> Any:
    return SimpleNamespace(name=name, owner=owner, environment=env or {}, container=SimpleNamespace(environment={}))


class SharedSupervisor(FakeSupervisor):
    """alice's job "a" (its token in its output), bob's "b", root's "r"; a GPU each of them is seen on."""

    def __init__(self, scope: str = "all") -> None:
        super().__init__()
        self.store = FakeJournal()
        jobs = [_job("a", "alice", {"API_TOKEN": "tok-alice-1234"}), _job("b", "bob"), _job("r", None)]
        self.config = SimpleNamespace(jobs=jobs, job=lambda n: next((j for j in jobs if j.name == n), None),
                                      access=SimpleNamespace(status=scope))
        self.jobs = {"a": [{"event": "exited", "tail": "token is tok-alice-1234"}], "b": [], "r": []}

    def status(self) -> Status:
        return Status.from_json({"jobs": [{"name": "a", "owner": "alice", "boot": {"last_line": "tok-alice-1234"}},
                                          {"name": "b", "owner": "bob"}, {"name": "r"}],
                                 "gpus": {"devices": [{"index": "0", "jobs": ["a", "b"], "assigned": ["a"],
                                                       "placed": ["a"], "processes": [{"pid": 7, "job": "a"}]}]}})


BOB = Caller(1002, "bob", False, User(1002, 1002, "bob", "/home/bob", ("bob",), (1002,)))
RULES = Rules(admin_group="adm")


def test_a_user_is_refused_another_users_job_and_nothing_reaches_it() -> None:
    sup = SharedSupervisor()
    for cmd in ("stop", "start", "restart", "reset", "backup-takeover", "cancel", "logs"):
        with pytest.raises(RequestError, match="^not .*: a is alice's job; only alice or an admin"):
            dispatch_as(sup, {"cmd": cmd, "job": "a", "uid": 1001, "user": "alice"}, BOB, RULES)  # forged: ignored
    with pytest.raises(RequestError, match="^not reloaded: only an admin"):
        dispatch_as(sup, {"cmd": "reload", "uid": 0}, BOB, RULES)
    assert sup.commands == [] and sup.store.events == []


def test_a_users_command_on_their_job_is_carried_out_and_written_down_with_their_name_and_uid() -> None:
    sup = SharedSupervisor()
    assert dispatch_as(sup, {"cmd": "stop", "job": "b"}, BOB, RULES) == "ok"
    assert sup.store.events == [("b", "operator_command", {"command": "stop", "user": "bob", "uid": 1002})]
    assert sup.commands == [("stop", "b")]


def test_another_users_secrets_are_hidden_from_status_and_events() -> None:
    sup = SharedSupervisor()
    st = dispatch_as(sup, {"cmd": "status"}, BOB, RULES)
    assert [j["name"] for j in st["jobs"]] == ["a", "b", "r"] and "tok-alice-1234" not in json.dumps(st)
    assert st["jobs"][0]["boot"]["last_line"] == "<hidden>"
    assert dispatch_as(sup, {"cmd": "events", "job": "a"}, BOB, RULES) == [{"event": "exited",
                                                                           "tail": "token is <hidden>"}]
    alice = Caller(1001, "alice", False, User(1001, 1001, "alice", "/home/alice", ("alice",), (1001,)))
    assert "tok-alice-1234" in json.dumps(dispatch_as(sup, {"cmd": "status"}, alice, RULES))


class SweepingSupervisor(SharedSupervisor):
    """SharedSupervisor with alice's sweep "hp": its trials are her jobs (with her token), and its best trial's job
    file carries the base job's environment, as `isaacd sweep best` prints it (sweeps/trial_file.py)."""

    def __init__(self) -> None:
        super().__init__()
        env = {"API_TOKEN": "tok-alice-1234", "DB_PASSWORD": 'pa"ss\\word'}  # TOML escapes a quote, a backslash
        self.config.jobs.append(_job("hp-t001", "alice", env))
        best = toml_job_file({"name": "hp-best", "environment": env}, "the best trial of sweep hp")
        self.sweep = SimpleNamespace(name="hp", owner="alice", to_json=lambda: {
            "name": "hp", "trials": [{"job": "hp-t001", "reason": "exited: token is tok-alice-1234"}]})
        self.best = best

    def sweep_statuses(self) -> tuple[Any, ...]:
        return (self.sweep,)

    def sweep_best(self, name: str) -> str:
        return self.best


def test_another_users_sweep_best_and_status_hide_her_environment_values() -> None:
    """`isaacd sweep best` is a job file, environment and all: another user who may see the sweep gets it with her
    values hidden, as status and events hide them; she and an admin get them as written."""
    sup = SweepingSupervisor()
    best = dispatch_as(sup, {"cmd": "sweep-best", "sweep": "hp"}, BOB, RULES)
    assert 'API_TOKEN = "<hidden>"' in best and 'DB_PASSWORD = "<hidden>"' in best, best
    status = dispatch_as(sup, {"cmd": "sweep-status", "sweep": "hp"}, BOB, RULES)
    assert status["trials"][0]["reason"] == "exited: token is <hidden>"
    assert dispatch_as(sup, {"cmd": "sweeps"}, BOB, RULES) == [status]
    alice = Caller(1001, "alice", False, User(1001, 1001, "alice", "/home/alice", ("alice",), (1001,)))
    for caller in (alice, ROOT):
        assert "tok-alice-1234" in dispatch_as(sup, {"cmd": "sweep-best", "sweep": "hp"}, caller, RULES)


def test_status_own_leaves_out_other_users_rows_and_their_names_on_the_gpus() -> None:
    st = dispatch_as(SharedSupervisor("own"), {"cmd": "status"}, BOB, RULES)
    assert [j["name"] for j in st["jobs"]] == ["b"]
    gpu = st["gpus"]["devices"][0]
    assert (gpu["jobs"], gpu["assigned"], gpu["placed"], gpu["processes"][0]["job"]) == (
        ["another user's job", "b"], ["another user's job"], ["another user's job"], "another user's job")
    with pytest.raises(RequestError, match='^not shown: a is alice\'s job; with \\[access\\] status = "own"'):
        dispatch_as(SharedSupervisor("own"), {"cmd": "events", "job": "a"}, BOB, RULES)


def test_logs_through_the_socket_give_the_tail_then_what_follows_to_the_owner_only(tmp_path: Path) -> None:
    log = tmp_path / "b.log"
    log.write_text("one\ntwo\nthree\n")

    class WithLog(SharedSupervisor):
        def status(self) -> Status:
            return Status.from_json({"jobs": [{"name": "b", "owner": "bob", "runtime": "process",
                                               "log_path": str(log)}, {"name": "a", "owner": "alice"}]})

    sup = WithLog()
    first = dispatch_as(sup, {"cmd": "logs", "job": "b", "lines": 2}, BOB, RULES)
    assert first == {"text": "two\nthree\n", "offset": len("one\ntwo\nthree\n")}
    with log.open("a") as f:
        f.write("four\n")
    assert dispatch_as(sup, {"cmd": "logs", "job": "b", "offset": first["offset"]}, BOB, RULES)["text"] == "four\n"
    with pytest.raises(RequestError, match="^not shown: a is alice's job"):
        dispatch_as(sup, {"cmd": "logs", "job": "a"}, BOB, RULES)


def test_the_sockets_directory_is_opened_to_its_group_only_when_it_holds_nothing_else(tmp_path: Path) -> None:
    """/run/isaacd (made now, or the socket alone) becomes 0750 of socket_group; a directory that holds more (a
    state dir) is left as it is, since the group would reach what else it holds. The socket is 0660 either way."""
    import grp
    import stat

    group = grp.getgrgid(os.getgid()).gr_name
    shared = tmp_path / "state"
    shared.mkdir(mode=0o700)
    (shared / "history.json").write_text("{}")
    for sock, dir_mode in ((tmp_path / "run" / "isaacd.sock", 0o750), (shared / "isaacd.sock", 0o700)):
        server = ControlServer(FakeSupervisor(), sock, 0o600, group)
        server.start()
        try:
            assert stat.S_IMODE(sock.parent.stat().st_mode) == dir_mode
            assert (stat.S_IMODE(sock.stat().st_mode), sock.stat().st_gid) == (0o660, os.getgid())
        finally:
            server.stop()
