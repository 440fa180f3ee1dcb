"""Sweeps in /metrics (issue 39, metrics/sweep_collector.py): a status with two sweeps, as the supervisor publishes
it (typed) and as its JSON; the assertions read the exposition a Prometheus would scrape."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from isaacd.metrics.collector import IsaacdCollector
from isaacd.status.types import Status
from isaacd.sweeps.asha import TrialState
from isaacd.status.sweeps import SweepStatus, TrialStatus

NOW = 1_700_000_000.0


def trial(n: int, state: str, objective: float | None = None, gpu_seconds: float = 0.0) -> TrialStatus:
    return TrialStatus(n, f"lr-t{n:03d}", {"agent.algorithm.learning_rate": 1e-3 * n}, state=state,
                       objective=objective, gpu_seconds=gpu_seconds)


LR = SweepStatus(name="lr", owner="alice", trials_total=8, best=3, best_objective=471.8, gpu_seconds=5400.0,
                 trials=(trial(3, "running", 471.8, 2000), trial(1, "paused", 431.2, 1500), trial(2, "paused", 188.3),
                         trial(4, "failed"), trial(5, "running", 21.4), *(trial(n, "pending") for n in (6, 7, 8))))
FRESH = SweepStatus(name="fresh", trials_total=2, trials=(trial(1, "running"), trial(2, "pending")))


def scrape(status: Status | dict) -> dict[str, dict[tuple, float]]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(IsaacdCollector(lambda: status, None, clock=lambda: NOW))
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def of(series: dict[tuple, float], **where: str) -> dict[tuple, float]:
    return {k: v for k, v in series.items() if all(dict(k).get(a) == b for a, b in where.items())}


def test_trials_by_state_every_state_from_zero():
    m = scrape(Status(sweeps=(LR, FRESH)))
    lr = {dict(k)["state"]: v for k, v in of(m["isaacd_sweep_trials"], sweep="lr").items()}
    assert lr == {"pending": 3, "running": 2, "paused": 2, "completed": 0, "failed": 1, "cancelled": 0}
    assert set(lr) == {s.value for s in TrialState}  # the enum's states, never a copied list
    fresh = {dict(k)["state"]: v for k, v in of(m["isaacd_sweep_trials"], sweep="fresh").items()}
    assert fresh["running"] == 1 and fresh["pending"] == 1 and fresh["completed"] == 0


def test_best_objective_and_gpu_seconds():
    m = scrape(Status(sweeps=(LR, FRESH)))
    assert m["isaacd_sweep_best_objective"] == {(("sweep", "lr"),): 471.8}  # fresh: no best yet, no series
    assert m["isaacd_sweep_gpu_seconds_total"] == {(("sweep", "lr"),): 5400.0, (("sweep", "fresh"),): 0.0}


def test_the_json_status_gives_the_same_series_and_an_odd_sweep_costs_only_itself():
    raw = Status(sweeps=(LR, FRESH)).to_json()
    assert scrape(raw)["isaacd_sweep_trials"] == scrape(Status(sweeps=(LR, FRESH)))["isaacd_sweep_trials"]
    raw["sweeps"].insert(0, {"name": "odd", "trials": [{"number": 1}], "gpu_seconds": "lots"})  # a trial without job
    raw["sweeps"].insert(0, {"trials": []})  # no name: its series cannot be told apart, so none
    m = scrape(raw)
    assert of(m["isaacd_sweep_trials"], sweep="lr") and "isaacd_sweep_best_objective" in m
    assert not of(m["isaacd_sweep_trials"], sweep="") and not of(m["isaacd_sweep_trials"], sweep="None")
    assert m["isaacd_scrape_errors_total"][(("source", "status"),)] >= 1


def test_no_sweeps_no_sweep_series():
    m = scrape(Status())
    assert not any(name.startswith("isaacd_sweep_") for name in m)


def test_a_nan_objective_is_exported_as_nan():
    m = scrape(Status(sweeps=(SweepStatus(name="n", best=1, best_objective=float("nan"),
                                          trials=(trial(1, "running", float("nan")),)),)))
    assert math.isnan(m["isaacd_sweep_best_objective"][(("sweep", "n"),)])
