"""The shim sets PBT's new hyperparameters on the algorithm after every load (issue 40; shim_hooks._set_algorithm):
rsl_rl's PPO.load takes the learning rate from the checkpoint's optimizer, so an exploit's new rate would be lost.

A unit test of the shim's wrapper around a runner's `load`, with a real torch optimizer; the algorithm stands in
for rsl_rl's PPO only in what the shim touches (attributes of the override's name, `optimizer.param_groups`), and
its load does what PPO.load does to the rate (rsl_rl 5.5.1 algorithms/ppo.py). Real rsl_rl runs in the PBT
end-to-end test."""

from __future__ import annotations

import json

import pytest
import torch

from isaacd_trainer import shim_hooks
from isaacd_trainer.shim_emit import Events
from isaacd_trainer.shim_protocol import ALGORITHM_SET_ENV, SHIM_EVENTS_ENV


class Alg:
    def __init__(self, lr: float) -> None:
        self.learning_rate = lr
        self.entropy_coef = 0.01
        self.optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=lr)


class Runner:
    def __init__(self) -> None:
        self.alg = Alg(1e-3)
        self.current_learning_iteration = 0

    def load(self, path: str) -> None:
        # what PPO.load does with the checkpoint's optimizer state: the saved member's rate wins
        for g in self.alg.optimizer.param_groups:
            g["lr"] = 5e-4
        self.alg.learning_rate = self.alg.optimizer.param_groups[0]["lr"]
        self.current_learning_iteration = 40


@pytest.fixture
def events(tmp_path, monkeypatch):  # noqa: ANN201
    path = tmp_path / "events.jsonl"
    monkeypatch.setenv(SHIM_EVENTS_ENV, str(path))
    Events.reopen()  # the side channel is opened once per process: this test's file
    yield lambda: [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    Events.reopen()


COPY = "/logs/exp/2026-12-06_08-00-00_pbt-from-pop-t003-at-40/model_40.pt"


def spec(values: object, checkpoint: str = "2026-12-06_08-00-00_pbt-from-pop-t003-at-40/model_40.pt") -> str:
    return json.dumps({"checkpoint": checkpoint, "values": values})


def loaded(monkeypatch, value: str | None, path: str = COPY) -> Runner:
    if value is None:
        monkeypatch.delenv(ALGORITHM_SET_ENV, raising=False)
    else:
        monkeypatch.setenv(ALGORITHM_SET_ENV, value)
    runner = Runner()
    shim_hooks._wrap_load(Runner.load)(runner, path)
    return runner


def test_the_new_learning_rate_and_entropy_coefficient_hold_after_the_checkpoints_load(monkeypatch, events):
    runner = loaded(monkeypatch, spec({"learning_rate": 2.5e-4, "entropy_coef": 0.004}))
    assert runner.alg.learning_rate == 2.5e-4 and runner.alg.entropy_coef == 0.004
    assert [g["lr"] for g in runner.alg.optimizer.param_groups] == [2.5e-4]  # what the next step uses
    [ev] = [e for e in events() if e["event"] == "algorithm_set"]
    assert ev["values"] == {"learning_rate": 2.5e-4, "entropy_coef": 0.004} and ev["unknown"] == []


def test_without_values_the_checkpoints_own_rate_is_kept(monkeypatch, events):
    runner = loaded(monkeypatch, None)
    assert runner.alg.learning_rate == 5e-4 and not [e for e in events() if e["event"] == "algorithm_set"]


def test_a_name_the_algorithm_has_not_is_reported_never_set(monkeypatch, events):
    runner = loaded(monkeypatch, spec({"entropy_coeff": 0.1}))
    assert not hasattr(runner.alg, "entropy_coeff") and runner.alg.entropy_coef == 0.01
    [ev] = [e for e in events() if e["event"] == "algorithm_set"]
    assert ev["values"] == {} and ev["unknown"] == ["entropy_coeff"]


def test_a_value_that_is_no_json_object_is_reported(monkeypatch, events):
    runner = loaded(monkeypatch, "[1, 2]")
    assert runner.alg.learning_rate == 5e-4
    [ev] = [e for e in events() if e["event"] == "algorithm_set"]
    assert "no JSON object" in ev["error"]


def test_the_members_own_checkpoint_keeps_what_it_saved(monkeypatch, events):
    # a later resume of the member's own save (its optimizer has the new rate, adapted since): nothing set again
    runner = loaded(monkeypatch, spec({"learning_rate": 2.5e-4}), path="/logs/exp/2026-12-06_09-00-00/model_60.pt")
    assert runner.alg.learning_rate == 5e-4 and not [e for e in events() if e["event"] == "algorithm_set"]


def test_a_container_sees_the_copy_at_another_path_and_it_is_still_the_copy(monkeypatch, events):
    runner = loaded(monkeypatch, spec({"learning_rate": 2.5e-4}),
                    path="/workspace/logs/2026-12-06_08-00-00_pbt-from-pop-t003-at-40/model_40.pt")
    assert runner.alg.learning_rate == 2.5e-4
