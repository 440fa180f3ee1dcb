"""Ended jobs (issue 37): a cancelled or removed job's history archived whole (history/ended.py), crash-consistently,
readable through the control socket with the same access rules as a live job's, and a new job of that name fresh.
The end to end story (cancel, `isaacd events|logs|history`, resubmit) is in tests/test_queue_e2e.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from isaacd.access.policy import Caller
from isaacd.attempt.ending import ended_how
from isaacd.config.users import User
from isaacd.control import RequestError, Rules, dispatch
from isaacd.history import ended as ended_mod
from isaacd.history.ended import EndedJob, archive, archive_folders, ended_events, ended_history, finish_pending, \
    find_ended, list_ended
from isaacd.history.store import Attempt, JobHistory, StateStore, job_log_path
from isaacd.status.types import Status

T0 = 1_765_000_000.0


def live_job(state: Path, runs_parent: Path, name: str = "j1") -> tuple[StateStore, list[Path]]:
    """A job's files as a supervisor leaves them: its document, journal, log, shim events and two run dirs."""
    store = StateStore(state)
    log = job_log_path(state, name)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("attempt 1 output\nattempt 2 output\n")
    runs = [runs_parent / f"2026-12-0{i}_10-00-00_{name}" for i in (1, 2)]
    for r in runs:
        r.mkdir(parents=True)
        (r / "model_5.pt").write_bytes(b"x")
    store.save(JobHistory(name=name, last_iteration=7, attempts=[
        Attempt(number=1, started_at=T0, reason="initial", run_dir=str(runs[0]),
                handle={"log_path": str(log), "log_offset": 0}),
        Attempt(number=2, started_at=T0 + 10, reason="restart", run_dir=str(runs[1]),
                handle={"log_path": str(log), "log_offset": len("attempt 1 output\n")})]))
    store.append_event(name, "started", attempt=1)
    store.append_event(name, "operator_command", command="cancel", user="alice", uid=1001)
    (state / "shim" / name).mkdir(parents=True)
    (state / "shim" / name / "attempt-1.jsonl").write_text("{}\n")
    return store, runs


def plan(store: StateStore, name: str, runs: list[Path], folder: Path, wall: float = T0 + 100) -> EndedJob:
    files = [(job_log_path(store.dir, name), f"{name}.log"), (store.dir / "shim" / name, "shim"),
             (store.journal_path(name), f"{name}.events.jsonl"), (store.doc_path(name), f"{name}.json")]
    runs_folder = runs[0].parent.with_name(runs[0].parent.name + ".ended-x")
    return EndedJob(name=name, owner="alice", submitted_at=T0 - 5, ended_at=wall, how="cancelled", by="alice",
                    state="stopped", reason="removed from config", iteration=7, restarts=1, attempts=2,
                    runtime="process", folder=str(folder), runs_folder=str(runs_folder),
                    runs=tuple((str(r), str(runs_folder / r.name)) for r in runs),
                    files=tuple((str(p), n) for p, n in files), hidden=("tok-alice-1234",))


def assert_archived(state: Path, runs: list[Path], name: str = "j1") -> EndedJob:
    """What a reader and a new job of the name see once the archive is whole."""
    found = find_ended(state, name)
    assert found is not None and found.how == "cancelled" and found.by == "alice"
    assert not (state / "jobs" / f"{name}.json").exists() and not (state / "jobs" / f"{name}.events.jsonl").exists()
    assert not job_log_path(state, name).exists() and not (state / "shim" / name).exists()
    assert [e["event"] for e in ended_events(found)] == ["started", "operator_command", "ended"]
    h = ended_history(found)
    assert [a.number for a in h.attempts] == [1, 2]
    log = Path(h.attempts[1].handle["log_path"])  # pointed at the archive's copy
    assert log.parent == Path(found.folder) and log.read_text().endswith("attempt 2 output\n")
    assert (Path(found.folder) / "shim" / "attempt-1.jsonl").exists()
    for r in runs:
        assert not r.exists() and (Path(found.runs_folder) / r.name / "model_5.pt").exists()
    return found


def test_an_ended_jobs_files_move_whole_into_its_archive_and_read_back(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store, runs = live_job(state, tmp_path / "logs" / "rsl_rl" / "cartpole")
    partial, final = archive_folders(state, "j1", T0 + 100)
    assert partial.parent == final.parent == state / "jobs" / ".ended" / "j1" and partial.name.startswith(".")
    archive(plan(store, "j1", runs, final), partial)
    found = assert_archived(state, runs)
    assert found.folder == str(final) and ended_events(found, 1)[0]["event"] == "ended"
    assert "hidden" not in found.to_json() and found.hidden == ("tok-alice-1234",)  # kept for redaction only


@pytest.mark.parametrize("crash_after", range(7))  # renames: 4 files, 2 run dirs, the folder
def test_a_supervisor_killed_at_any_step_of_the_archive_neither_loses_the_history_nor_revives_the_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_after: int) -> None:
    state = tmp_path / "state"
    store, runs = live_job(state, tmp_path / "logs" / "rsl_rl" / "cartpole")
    partial, final = archive_folders(state, "j1", T0 + 100)
    done = []
    real_rename, real_replace = os.rename, os.replace

    class Killed(BaseException):
        pass

    def step(real: Any) -> Any:
        def call(src: Any, dst: Any) -> None:
            if Path(dst).name == "ended.json":  # the plan's own atomic write is no step here
                return real(src, dst)
            if len(done) == crash_after:
                raise Killed()
            real(src, dst)
            done.append(dst)
        return call

    monkeypatch.setattr(ended_mod.os, "rename", step(real_rename))
    monkeypatch.setattr(ended_mod.os, "replace", step(real_replace))
    with pytest.raises(Killed):
        archive(plan(store, "j1", runs, final), partial)
    monkeypatch.undo()
    assert list_ended(state, "j1") == []  # half made: not listed yet
    assert finish_pending(state) == [final]  # the next supervisor's start
    assert_archived(state, runs)
    assert not partial.exists() and finish_pending(state) == []


def test_a_partial_archive_without_its_plan_is_dropped_and_the_job_is_left_whole(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store, runs = live_job(state, tmp_path / "exp")
    partial, _ = archive_folders(state, "j1", T0)
    partial.mkdir(parents=True)
    (partial / ".ended.json.123.tmp").write_text('{"na')  # killed while the plan was written
    assert finish_pending(state) == [] and not partial.exists()
    assert store.exists("j1") and all(r.exists() for r in runs) and list_ended(state) == []


def test_the_newest_ended_job_of_a_name_comes_first_and_an_older_one_by_number(tmp_path: Path) -> None:
    state = tmp_path / "state"
    for wall, exp in ((T0 + 100, "a"), (T0 + 200, "b")):
        store, runs = live_job(state, tmp_path / exp)
        partial, final = archive_folders(state, "j1", wall)
        archive(plan(store, "j1", runs, final, wall), partial)
    assert [j.ended_at for j in list_ended(state)] == [T0 + 200, T0 + 100]
    assert find_ended(state, "j1").ended_at == T0 + 200 and find_ended(state, "j1", 2).ended_at == T0 + 100
    assert find_ended(state, "j1", 3) is None and find_ended(state, "other") is None


def test_cancelled_by_whom_or_removed_from_the_config_is_read_from_the_newest_operator_command() -> None:
    cancel = {"event": "operator_command", "command": "cancel", "user": "alice"}
    assert ended_how([{"event": "started"}, cancel, {"event": "state"}]) == ("cancelled", "alice")
    assert ended_how([cancel, {"event": "operator_command", "command": "start", "user": "bob"}]) == (
        "removed from the config", None)
    assert ended_how([]) == ("removed from the config", None)


# ---- the control socket: an ended job read as a live one is, by whom may read it ----
ALICE = Caller(1001, "alice", False, User(1001, 1001, "alice", "/home/alice", ("alice",), (1001,)))
BOB = Caller(1002, "bob", False, User(1002, 1002, "bob", "/home/bob", ("bob",), (1002,)))
ROOT = Caller(0, "root", True)
RULES = Rules(admin_group="adm")


class Journal:
    def append_event(self, job: str, event: str, **fields: Any) -> dict[str, Any]:
        raise AssertionError("reading an ended job writes nothing")


class WithEnded:
    """A supervisor with one live job ("live", bob's) and alice's ended "j1" (its token in its journal)."""

    store = Journal()

    def __init__(self, state: Path, scope: str = "all") -> None:
        self.state = state
        self.config = SimpleNamespace(jobs=[], job=lambda n: None, access=SimpleNamespace(status=scope))

    def status(self) -> Status:
        return Status.from_json({"jobs": [{"name": "live", "owner": "bob"}]})

    def job_names(self) -> list[str]:
        return ["live"]

    def events(self, job: str, limit: int | None = None) -> list[dict[str, Any]]:
        return [{"event": "started"}]

    def ended(self, job: str, nth: int = 1) -> EndedJob | None:
        return find_ended(self.state, job, nth)

    def ended_jobs(self, job: str | None = None) -> list[EndedJob]:
        return list_ended(self.state, job)


@pytest.fixture()
def sup(tmp_path: Path) -> WithEnded:
    state = tmp_path / "state"
    store, runs = live_job(state, tmp_path / "exp")
    store.append_event("j1", "exited", tail="token is tok-alice-1234")
    partial, final = archive_folders(state, "j1", T0 + 100)
    archive(plan(store, "j1", runs, final), partial)
    return WithEnded(state)


def test_events_of_an_ended_job_say_it_ended_and_hide_its_secrets_from_others(sup: WithEnded) -> None:
    mine = dispatch(sup, {"cmd": "events", "job": "j1"}, ALICE, RULES)
    assert mine[-1]["event"] == "ended" and mine[-1]["how"] == "cancelled" and mine[-1]["by"] == "alice"
    assert "tok-alice-1234" in json.dumps(mine)
    theirs = dispatch(sup, {"cmd": "events", "job": "j1"}, BOB, RULES)
    assert "tok-alice-1234" not in json.dumps(theirs) and "token is <hidden>" in json.dumps(theirs)
    with pytest.raises(RequestError, match='^not shown: j1 is alice\'s job; with \\[access\\] status = "own"'):
        dispatch(WithEnded(sup.state, "own"), {"cmd": "events", "job": "j1"}, BOB, RULES)
    with pytest.raises(RequestError, match='^no job named "nope"; jobs here: live'):
        dispatch(sup, {"cmd": "events", "job": "nope"}, ROOT, RULES)
    assert dispatch(sup, {"cmd": "events", "job": "live"}, ROOT, RULES) == [{"event": "started"}]
    with pytest.raises(RequestError, match="^live has no ended jobs of that name; `isaacd history live`"):
        dispatch(sup, {"cmd": "events", "job": "live", "ended": 1}, ROOT, RULES)


def test_logs_of_an_ended_job_are_its_owners_and_the_admins(sup: WithEnded) -> None:
    text = dispatch(sup, {"cmd": "logs", "job": "j1", "lines": 1}, ALICE, RULES)
    assert text["text"] == "attempt 2 output\n" and text["ended"]["how"] == "cancelled"
    with pytest.raises(RequestError, match="^not shown: j1 is alice's job; only alice or an admin"):
        dispatch(sup, {"cmd": "logs", "job": "j1"}, BOB, RULES)
    src = dispatch(sup, {"cmd": "log-source", "job": "j1"}, ROOT, RULES)
    assert src["log_path"].startswith(src["ended"]["folder"])
    assert [a["handle"]["log_path"] for a in src["attempts"]] == [src["log_path"]] * 2
    with pytest.raises(RequestError, match="^not shown: j1 is alice's job"):
        dispatch(sup, {"cmd": "log-source", "job": "j1"}, BOB, RULES)


def test_the_list_of_ended_jobs_shows_others_jobs_as_status_does(sup: WithEnded) -> None:
    rows = dispatch(sup, {"cmd": "history"}, BOB, RULES)
    assert [(r["name"], r["owner"], r["how"], r["state"]) for r in rows] == [("j1", "alice", "cancelled", "stopped")]
    assert "hidden" not in rows[0] and rows[0]["runs_folder"] and rows[0]["folder"]
    assert dispatch(WithEnded(sup.state, "own"), {"cmd": "history"}, BOB, RULES) == []
    assert len(dispatch(WithEnded(sup.state, "own"), {"cmd": "history"}, ALICE, RULES)) == 1


def test_a_new_job_of_an_ended_name_starts_with_a_fresh_history_even_beside_old_runs(tmp_path: Path) -> None:
    from helpers import builtin_job, write_config

    from isaacd.config.schema import load_config
    from isaacd.history.rebuild import load_history

    cfg = load_config(write_config(tmp_path, builtin_job("j1")))
    state = cfg.supervisor.state_dir
    store, runs = live_job(state, tmp_path / "elsewhere")
    partial, final = archive_folders(state, "j1", T0 + 100)
    job = plan(store, "j1", runs, final)
    archive(EndedJob(**{**job.__dict__, "runs": ()}), partial)  # its run dirs left where they were
    fresh = load_history(StateStore(state), cfg.job("j1"), state)
    assert fresh.attempts == [] and fresh.machine is None and not store.journal_path("j1").exists()


def test_an_ended_job_reads_as_ended_first_and_the_list_says_where_its_files_are() -> None:
    from isaacd.cli.render_ended import events_note, format_ended

    row = {"name": "j1", "owner": "alice", "submitted_at": T0, "ended_at": T0 + 60, "how": "cancelled", "by": "alice",
           "state": "stopped", "reason": "removed from config", "folder": "/s/jobs/.ended/j1/x", "runs_folder": "/l/r"}
    note = events_note("j1", [{"event": "started", "time": T0}, {**row, "event": "ended", "time": T0 + 60}])
    assert note is not None and note.startswith("j1 has ended: cancelled by alice at ")
    assert "last state stopped (removed from config)" in note and "/s/jobs/.ended/j1/x" in note and "/l/r" in note
    assert events_note("j1", [{"event": "started", "time": T0}]) is None  # a live job's events: no note
    table = format_ended([row, {**row, "owner": None, "by": None, "how": "removed from the config", "reason": None,
                                "runs_folder": None}]).splitlines()
    assert table[0].split() == ["NAME", "OWNER", "SUBMITTED", "ENDED", "HOW", "LAST", "STATE"]
    assert "cancelled by alice" in table[1] and table[2] == "  files: /s/jobs/.ended/j1/x; runs: /l/r"
    assert "removed from the config" in table[3] and " - " in table[3] and table[4] == "  files: /s/jobs/.ended/j1/x"
    assert format_ended([]) == "(no ended jobs)"


def test_a_supervisor_starting_finishes_an_archive_a_killed_one_left_before_any_job_is_made(tmp_path: Path,
                                                                                          monkeypatch) -> None:
    from helpers import builtin_job, write_config

    from isaacd.config.schema import load_config
    from isaacd.supervisor import Supervisor

    path = write_config(tmp_path, builtin_job("j1"))
    cfg = load_config(path)
    store, runs = live_job(cfg.supervisor.state_dir, tmp_path / "exp")
    partial, final = archive_folders(cfg.supervisor.state_dir, "j1", T0 + 100)
    calls = []

    def killed_after_two(src: Any, dst: Any, real: Any = os.rename) -> None:
        if len(calls) == 2:
            raise KeyboardInterrupt  # stands in for SIGKILL: nothing after it runs
        calls.append(dst)
        real(src, dst)

    monkeypatch.setattr(ended_mod.os, "rename", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        archive(plan(store, "j1", runs, final), partial)
    monkeypatch.undo()
    assert store.exists("j1")  # half made: the document still in jobs/
    sup = Supervisor(cfg, str(path))
    try:
        assert_archived(cfg.supervisor.state_dir, runs)  # before start(): no runner of j1 can find the old document
        assert sup.runners == {} and sup.ended("j1") is not None and [j.name for j in sup.ended_jobs()] == ["j1"]
    finally:
        os.close(sup._lock_fd)
