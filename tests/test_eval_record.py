"""An evaluation's result JSON read and checked (daemon/evals/result.py), the job's eval record saved and read back
(daemon/evals/record.py), and the status types' JSON both ways (daemon/evals/types.py), issue 41."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from isaacd.evals.record import EvalRecord, EvalStore
from isaacd.evals.result import parse_result, read_result, result_path, video_reason
from isaacd.evals.types import EvalResult, EvalsStatus

T0 = 1_800_000_000.0
GOOD = {"version": 1, "checkpoint": "/abs/model_400.pt", "iteration": 400, "task": "Isaac-Cartpole-Direct",
        "library": "rsl_rl", "episodes": 100, "num_envs": 100, "seed": 42, "deterministic": True,
        "return_mean": 487.1, "return_std": 12.3, "length_mean": 299.0, "length_std": 1.5,
        "success_rate": None, "duration_seconds": 31.2, "device": "cpu",
        "video": None, "gif": None, "video_reason": "no renderer: the host has no GPU"}


def write(path: Path, raw: object) -> Path:
    path.write_text(raw if isinstance(raw, str) else json.dumps(raw))
    return path


# ---- the result JSON ---------------------------------------------------------------------------------------------
def test_a_result_of_the_design_reads_as_the_figures_the_status_shows(tmp_path):
    ck = tmp_path / "model_400.pt"
    path = write(result_path(ck), GOOD)
    assert path.name == "model_400.pt.eval.json"
    r = read_result(path, finished_at=T0, iteration=400)
    assert isinstance(r, EvalResult)
    assert (r.iteration, r.return_mean, r.return_std, r.episodes, r.success_rate, r.finished_at) == \
        (400, 487.1, 12.3, 100, None, T0)
    assert r.checkpoint_name == "model_400.pt"
    assert video_reason(path) == "no renderer: the host has no GPU"


@pytest.mark.parametrize("raw, says", [
    (None, "no result at"),
    ("{not json", "is not JSON"),
    ("[1, 2]", "is not a JSON object"),
    ({**GOOD, "version": 2}, "has version 2; this isaacd reads version 1"),
    ({k: v for k, v in GOOD.items() if k != "version"}, "has version null"),
    ({"version": 1, "checkpoint": "/abs/model_400.pt", "iteration": 400,
      "error": "checkpoint does not load:\n torn file (unexpected EOF)"}, "checkpoint does not load: torn file"),
    ({**GOOD, "return_mean": float("nan")}, "return_mean is nan, not a finite number"),
    ({**GOOD, "return_std": float("inf")}, "return_std is inf, not a finite number"),
    ({**GOOD, "episodes": 0}, "episodes is 0, below 1"),
    ({**GOOD, "episodes": True}, "episodes is true, not a whole number"),
    ({**GOOD, "length_mean": "299"}, 'length_mean is "299", not a number'),
    ({**GOOD, "success_rate": 1.5}, "success_rate is 1.5, above 1"),
    ({**GOOD, "iteration": 350}, "is of iteration 350, not 400: a stale result"),
])
def test_a_result_that_cannot_be_used_is_one_line_saying_why(tmp_path, raw, says):
    path = tmp_path / "model_400.pt.eval.json"
    if raw is not None:
        write(path, raw if isinstance(raw, str) else json.dumps(raw))  # json.dumps writes NaN and Infinity
    why = read_result(path, finished_at=T0, iteration=400)
    assert isinstance(why, str) and says in why and "\n" not in why


def test_a_success_rate_the_task_logs_is_kept():
    r = parse_result(json.dumps({**GOOD, "success_rate": 0.93}), T0)
    assert isinstance(r, EvalResult) and r.success_rate == 0.93


# ---- the record --------------------------------------------------------------------------------------------------
def result(iteration: int, ret: float) -> EvalResult:
    r = parse_result(json.dumps({**GOOD, "iteration": iteration, "return_mean": ret,
                                 "checkpoint": f"/abs/model_{iteration}.pt"}), T0 + iteration)
    assert isinstance(r, EvalResult)
    return r


def test_the_record_round_trips_results_attempts_failures_give_ups_skips_and_the_best(tmp_path):
    store = EvalStore(tmp_path)
    rec = EvalRecord("cartpole")
    rec.started(0)
    rec.finished(result(0, 10.0))
    rec.started(50)
    rec.failed(50, "killed at the deadline (600 s)", at=T0 + 1)
    rec.started(50)
    rec.finished(result(50, 400.0))
    rec.started(100)
    rec.failed(100, "checkpoint does not load: torn", at=T0 + 2)
    rec.give_up(100, "checkpoint does not load: torn", at=T0 + 2)
    rec.skip([150])
    store.save(rec)
    assert store.path("cartpole") == tmp_path / "evals" / "cartpole.json"
    assert oct(os.stat(store.path("cartpole")).st_mode & 0o777) == "0o600"
    assert not list((tmp_path / "evals").glob(".*tmp"))
    loaded = store.load("cartpole", now=T0)
    assert loaded.problem is None
    back = loaded.record
    assert back.to_json() == rec.to_json()
    assert [r.iteration for r in back.ordered()] == [0, 50]
    assert back.best == 50 and back.best_result == result(50, 400.0)
    assert back.attempts == {0: 1, 50: 2, 100: 1}
    assert back.failure_count() == 2 and back.failure_count(50) == 1
    assert back.last_failure.reason == "checkpoint does not load: torn"
    assert back.given_up[100].at == T0 + 2 and back.skipped == {150}
    assert back.last_result.iteration == 50


def test_a_job_without_a_record_starts_a_fresh_one(tmp_path):
    loaded = EvalStore(tmp_path).load("new", now=T0)
    assert loaded.problem is None and loaded.record == EvalRecord("new")


@pytest.mark.parametrize("text", [
    "{torn", "[]", '{"version": 1, "job": "cartpole", "results": {"50": {"iteration": 50}}}',
    '{"version": 1, "job": "cartpole", "failures": {"x": []}}', '{"version": 9, "job": "cartpole"}',
    '{"version": 1, "job": "other"}',
])
def test_a_corrupt_record_is_set_aside_with_a_reason_and_evaluations_start_afresh(tmp_path, text):
    store = EvalStore(tmp_path)
    store.dir.mkdir()
    store.path("cartpole").write_text(text)
    loaded = store.load("cartpole", now=T0)
    assert loaded.record == EvalRecord("cartpole")
    assert "unusable" in loaded.problem and f"cartpole.json.corrupt-{int(T0)}" in loaded.problem
    assert "\n" not in loaded.problem
    assert not store.path("cartpole").exists()
    assert (store.dir / f"cartpole.json.corrupt-{int(T0)}").read_text() == text  # kept for a person to read
    store.save(loaded.record)  # and the fresh record is saved in its place
    assert store.load("cartpole", now=T0).problem is None


def test_a_saved_best_is_taken_from_the_results_not_from_what_the_file_says(tmp_path):
    rec = EvalRecord("a")
    rec.finished(result(0, 10.0))
    rec.finished(result(50, 20.0))
    raw = rec.to_json()
    raw["best"] = 0
    assert EvalRecord.from_json(raw).best == 50


# ---- the status types ----------------------------------------------------------------------------------------------
def test_evals_status_round_trips_through_json_and_reads_an_older_supervisors_row():
    last, best = result(400, 487.1), result(350, 495.0)
    status = EvalsStatus(every="5", last=last, best=best, running=450, running_since=T0, waiting=2, failed=1,
                         given_up=(100,), last_error="exit 1", video_unavailable="no renderer", where="gpu 0 (4 GiB)")
    text = json.dumps(status.to_json())
    assert EvalsStatus.from_json(json.loads(text)) == status
    assert EvalResult.from_json(last.to_json()) == last
    old = EvalsStatus.from_json({"every": "best", "last": "garbage", "future_key": 1})
    assert old == EvalsStatus(every="best")
    assert math.isclose(EvalsStatus.from_json(json.loads(text)).best.return_mean, 495.0)
