"""A sweep's sampler (daemon/sweeps/sampler.py, issue 39): the trials' configurations, seeded and reproducible; one
scenario each, named after what a researcher would notice."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from isaacd.sweeps.sampler import as_override, grid_points, sample, trial_name, trial_number
from isaacd.sweeps.space import Choice, Grid, IntRange, LogUniform, Uniform

SPACE = {
    "agent.algorithm.learning_rate": LogUniform(1e-5, 1e-3),
    "agent.algorithm.entropy_coef": Uniform(0.0, 0.02),
    "num_envs": Grid((1024, 4096)),
    "seed": IntRange(1, 100),
    "act": Choice(("elu", "relu")),
}


def test_the_same_seed_gives_the_same_trials_on_any_machine():
    # pinned values: the draws depend on random.Random(seed) and the space's order only, never on PYTHONHASHSEED
    # (pytest runs each session under a fresh hash seed, so this would break on a draw that iterated a set)
    trials = sample(SPACE, 4, seed=0)
    assert trials[:2] == [
        {"agent.algorithm.learning_rate": 0.000488477, "agent.algorithm.entropy_coef": 0.0151591, "num_envs": 1024,
         "seed": 54, "act": "elu"},
        {"agent.algorithm.learning_rate": 3.29483e-05, "agent.algorithm.entropy_coef": 0.0102255, "num_envs": 4096,
         "seed": 52, "act": "relu"},
    ]
    assert sample(SPACE, 4, seed=0) == trials
    assert sample(SPACE, 4, seed=1) != trials


def test_each_trial_names_every_key_in_the_sweep_files_order():
    for config in sample(SPACE, 6, seed=3):
        assert list(config) == list(SPACE)


def test_a_longer_sweep_of_the_same_seed_starts_with_the_same_trials():
    assert sample(SPACE, 10, seed=7)[:6] == sample(SPACE, 6, seed=7)


def test_grid_keys_are_a_cross_product_each_point_as_often_with_fresh_draws_of_the_others():
    space = {"num_envs": Grid((1024, 4096)), "lr": LogUniform(1e-4, 1e-2), "clip": Grid((0.1, 0.2))}
    trials = sample(space, 12, seed=5)
    points = Counter((t["num_envs"], t["clip"]) for t in trials)
    assert points == {(1024, 0.1): 3, (1024, 0.2): 3, (4096, 0.1): 3, (4096, 0.2): 3}
    # the points take turns, so the first trials launched cover the grid
    assert [(t["num_envs"], t["clip"]) for t in trials[:4]] == [(1024, 0.1), (1024, 0.2), (4096, 0.1), (4096, 0.2)]
    assert len({t["lr"] for t in trials}) == 12  # each repetition of a point samples its learning rate afresh
    assert grid_points(space) == [{"num_envs": 1024, "clip": 0.1}, {"num_envs": 1024, "clip": 0.2},
                                  {"num_envs": 4096, "clip": 0.1}, {"num_envs": 4096, "clip": 0.2}]


def test_trials_not_a_multiple_of_the_grid_are_refused_naming_the_counts_that_fit():
    refused = r"trials = 10 is not a multiple of the grid's 4 points .* use trials = 8 or 12"
    with pytest.raises(ValueError, match=refused):
        sample({"a": Grid((1, 2)), "b": Grid(("x", "y"))}, 10, seed=0)
    with pytest.raises(ValueError, match="at least 1 trial"):
        sample(SPACE, 0, seed=0)


def test_an_int_range_includes_both_ends():
    values = {t["n"] for t in sample({"n": IntRange(1, 3)}, 200, seed=0)}
    assert values == {1, 2, 3}


def test_a_loguniform_is_uniform_in_log_space_and_stays_within_its_bounds():
    lrs = [t["lr"] for t in sample({"lr": LogUniform(1e-5, 1e-1)}, 2000, seed=11)]
    assert all(1e-5 <= x <= 1e-1 for x in lrs)
    decades = Counter(math.floor(math.log10(x)) for x in lrs)  # -5, -4, -3, -2: a quarter each
    assert set(decades) == {-5, -4, -3, -2}
    assert all(400 <= n <= 600 for n in decades.values()), decades


def test_a_uniform_stays_within_its_bounds_even_when_rounding_would_step_past_them():
    xs = [t["x"] for t in sample({"x": Uniform(0.1234567891, 0.1234567899)}, 50, seed=0)]
    assert all(0.1234567891 <= x <= 0.1234567899 for x in xs)


def test_sampled_floats_read_well_and_round_trip_through_a_command_line():
    for t in sample(SPACE, 50, seed=2):
        for key in ("agent.algorithm.learning_rate", "agent.algorithm.entropy_coef"):
            text = as_override(t[key])
            assert float(text) == t[key]
            assert float(f"{t[key]:.6g}") == t[key], text  # 6 significant digits at most
    assert as_override(True) == "true" and as_override(4096) == "4096" and as_override("elu") == "elu"


def test_choice_values_come_back_as_written():
    values = {t["c"] for t in sample({"c": Choice((0.1, "adam", False))}, 100, seed=0)}
    assert values == {0.1, "adam", False}


def test_trials_are_numbered_from_1_as_sortable_job_names():
    assert trial_name("cartpole-lr", 7, 27) == "cartpole-lr-t007"
    assert trial_name("big", 42, 1500) == "big-t0042"
    assert trial_number("cartpole-lr", "cartpole-lr-t007") == 7
    assert trial_number("cartpole-lr", "cartpole-lr2-t007") is None
    assert trial_number("cartpole-lr", "other") is None
    with pytest.raises(ValueError):
        trial_name("s", 0, 5)
