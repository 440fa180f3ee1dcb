"""One source of truth in the saved history: the job's model (`machine`) holds its counters and resting state;
a document from before (the counters as fields of their own, no `machine`) is read once, turned into a model,
and saved in the new format."""

from __future__ import annotations

import json

import pytest

from job_fakes import FakeClock, FakeRuntime

from isaacd.config.schema import parse_config
from isaacd.runner import JobRunner
from isaacd.history.store import JobHistory, StateStore

JOB = '[[jobs]]\nname = "cp"\ncommand = ["sleep", "600"]\nmax_iterations = 100\n'
LEGACY_KEYS = {"restarts", "restart_times", "restarts_by_reason", "last_restart_reason", "rollbacks",
               "watchdog_trips", "final_state", "final_reason"}
OLD = {"name": "cp", "restarts": 4, "restart_times": [], "restarts_by_reason": {"signal": 3, "watchdog": 1},
       "last_restart_reason": "killed by signal 9 (SIGKILL)", "rollbacks": 1,
       "watchdog_trips": {"divergence/rollback": 1}, "final_state": "failed",
       "final_reason": "restart limit reached", "trainer_rsl_rl_version": "5.0.1", "last_iteration": 40,
       "attempts": [{"number": 1, "started_at": 1.0, "reason": "initial", "run_dir": "/l/run", "ended_at": 2.0,
                     "exit": {"code": 1}}]}


def runner(tmp_path) -> JobRunner:  # noqa: ANN001
    cfg = parse_config(JOB, "t.toml", tmp_path).jobs[0]
    r = JobRunner(cfg, FakeRuntime(), StateStore(tmp_path / "state"), tmp_path / "state", FakeClock())
    r.recover()
    return r


def write(tmp_path, doc: dict) -> None:  # noqa: ANN001
    (tmp_path / "state" / "jobs").mkdir(parents=True, exist_ok=True)
    (tmp_path / "state" / "jobs" / "cp.json").write_text(json.dumps(doc))


def saved(tmp_path) -> dict:  # noqa: ANN001
    return json.loads((tmp_path / "state" / "jobs" / "cp.json").read_text())


def counters(r: JobRunner) -> tuple:
    m = r.record.model
    return (m.state.value, m.final, m.reason, m.restarts, dict(m.restarts_by_reason), m.last_restart_reason,
            m.rollbacks, dict(m.watchdog_trips))


def test_an_old_document_keeps_its_counters_and_state_and_is_saved_in_the_new_format(tmp_path):
    write(tmp_path, OLD)
    r = runner(tmp_path)
    want = ("failed", True, "restart limit reached", 4, {"signal": 3, "watchdog": 1},
            "killed by signal 9 (SIGKILL)", 1, {"divergence/rollback": 1})
    assert counters(r) == want
    assert r.record.history.trainer_rsl_rl_version == "5.0.1" and r.record.history.current.run_dir == "/l/run"
    assert r.record.persist()
    doc = saved(tmp_path)
    assert not LEGACY_KEYS & set(doc) and doc["machine"]["restarts"] == 4 and doc["machine"]["state"] == "failed"
    assert doc["last_iteration"] == 40 and doc["attempts"][0]["run_dir"] == "/l/run"
    again = runner(tmp_path)  # read back from the new format alone
    assert counters(again) == want and again.snapshot().restarts_by_reason == {"signal": 3, "watchdog": 1}


def test_mirrored_counters_beside_the_model_are_dropped_and_the_model_wins(tmp_path):
    write(tmp_path, OLD)
    r = runner(tmp_path)
    r.record.persist()
    doc = saved(tmp_path)
    doc.update(restarts=99, final_state="stopped")  # an older isaacd mirrored these beside the model
    write(tmp_path, doc)
    r2 = runner(tmp_path)
    assert r2.record.model.restarts == 4 and r2.state.value == "failed"
    r2.record.persist()
    assert not LEGACY_KEYS & set(saved(tmp_path))


def test_an_old_document_is_never_rewritten_without_its_counters(tmp_path):
    """rebuild.py saves a rebuilt history before the runner has made a model of it: still in the old format."""
    h = JobHistory.from_json(OLD)
    assert h.legacy is not None and h.legacy.restarts == 4
    doc = h.to_json()
    assert doc["restarts"] == 4 and doc["final_state"] == "failed" and "legacy" not in doc


def test_field_types_are_checked_from_the_dataclasses_themselves():
    with pytest.raises(ValueError, match="restarts"):
        JobHistory.from_json({**OLD, "restarts": "four"})
    with pytest.raises(ValueError, match=r"attempts\[0\].number"):
        JobHistory.from_json({**OLD, "attempts": [{**OLD["attempts"][0], "number": "1"}]})
    with pytest.raises(ValueError, match="last_fps"):
        JobHistory.from_json({**OLD, "last_fps": True})
    ok = JobHistory.from_json({**OLD, "last_fps": 3, "last_mean_reward": None, "from_a_newer_isaacd": 1})
    assert ok.last_fps == 3 and ok.last_mean_reward is None
