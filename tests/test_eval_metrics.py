"""Checkpoint evaluations in /metrics (issue 41, metrics/eval_collector.py): a status whose jobs carry an `EvalsStatus`,
as the supervisor publishes it (typed) and as its JSON; the assertions read the exposition a Prometheus would
scrape."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from isaacd.evals.types import EvalResult, EvalsStatus
from isaacd.metrics.collector import IsaacdCollector
from isaacd.metrics.eval_collector import EVAL_OUTCOMES
from isaacd.status.types import JobStatus, Status

NOW = 1_700_000_000.0


def result(it: int, mean: float, success: float | None = None) -> EvalResult:
    return EvalResult(iteration=it, checkpoint=f"/runs/model_{it}.pt", episodes=100, return_mean=mean, return_std=9.0,
                      length_mean=299.0, length_std=1.0, success_rate=success, seed=42, num_envs=100, device="cpu",
                      duration_seconds=30.0, finished_at=NOW - 10)


def evals(**kw: object) -> EvalsStatus:
    return EvalsStatus(every="1", where="cpu", **kw)  # type: ignore[arg-type]


SCORED = evals(last=result(400, 487.1, success=0.93), best=result(350, 495.4), failed=2, given_up=(120,), done=7,
               cost_seconds=0.24)
FRESH = evals(running=50)  # [jobs.eval], nothing finished yet
STATUS = Status(jobs=(JobStatus("cartpole", state="running", evals=SCORED), JobStatus("fresh", evals=FRESH),
                      JobStatus("plain", state="running")))


def scrape(status: Status | dict) -> dict[str, dict[tuple, float]]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(IsaacdCollector(lambda: status, None, clock=lambda: NOW))
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def by_job(series: dict[tuple, float]) -> dict[str, float]:
    return {dict(k)["job"]: v for k, v in series.items()}


def test_the_newest_and_the_best_score_and_where_they_are():
    m = scrape(STATUS)
    assert by_job(m["isaacd_job_eval_return"]) == {"cartpole": 487.1}  # fresh: no score yet, no fake 0
    assert by_job(m["isaacd_job_eval_best_return"]) == {"cartpole": 495.4}
    assert by_job(m["isaacd_job_eval_iteration"]) == {"cartpole": 400}
    assert by_job(m["isaacd_job_eval_success_rate"]) == {"cartpole": 0.93}
    assert by_job(m["isaacd_job_eval_training_cost_seconds"]) == {"cartpole": 0.24}  # not measured: absent


def test_outcomes_count_from_zero_and_a_job_without_evals_has_none():
    m = scrape(STATUS)
    got = {(dict(k)["job"], dict(k)["outcome"]): v for k, v in m["isaacd_job_evals_total"].items()}
    assert got == {("cartpole", "done"): 7, ("cartpole", "failed"): 2, ("cartpole", "given_up"): 1,
                   ("fresh", "done"): 0, ("fresh", "failed"): 0, ("fresh", "given_up"): 0}
    assert {o for _, o in got} == set(EVAL_OUTCOMES)
    assert not any(dict(k).get("job") == "plain" for name, s in m.items() if "eval" in name for k in s)


def test_no_success_rate_where_the_task_logs_none():
    m = scrape(Status(jobs=(JobStatus("a", evals=evals(last=result(10, 3.0), best=result(10, 3.0))),)))
    assert by_job(m["isaacd_job_eval_return"]) == {"a": 3.0}
    assert "isaacd_job_eval_success_rate" not in m


def test_the_json_status_gives_the_same_series_and_an_odd_row_costs_only_itself():
    raw = STATUS.to_json()
    assert scrape(raw)["isaacd_job_eval_return"] == scrape(STATUS)["isaacd_job_eval_return"]
    raw["jobs"][1]["evals"] = {"every": "1", "last": {"iteration": "x", "return_mean": "not a number"}}
    m = scrape(raw)
    assert by_job(m["isaacd_job_eval_return"]) == {"cartpole": 487.1}  # the odd value: no series, not a crash
    assert by_job(m["isaacd_job_eval_best_return"]) == {"cartpole": 495.4}
