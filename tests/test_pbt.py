"""PBT's pure decision (issue 40, daemon/sweeps/pbt.py): one scenario per rule, named after it."""

from __future__ import annotations

import math
import random

import pytest

from isaacd.sweeps.pbt import (Done, Exploit, Keep, MemberState, MemberView, Mutation, Pbt, decide, explore,
                               member_rng, quantile_size)
from isaacd.sweeps.space import Choice, Grid, IntRange, LogUniform, Uniform

LR = "agent.algorithm.learning_rate"
ENT = "agent.algorithm.entropy_coef"
T = MemberState.TRAINING


def pbt(**over) -> Pbt:  # noqa: ANN003
    fields = {"interval": 10, "max_iterations": 100, "quantile": 0.25, "seed": 7,
              "mutations": {LR: Mutation(LogUniform(1e-5, 1e-2)), ENT: Mutation(Uniform(0.0, 0.02))}}
    fields.update(over)
    return Pbt(**fields)


def member(n: int, objective: float | None, state: MemberState = T, **over) -> MemberView:  # noqa: ANN003
    fields = {"number": n, "state": state, "config": {LR: 1e-3 * n, ENT: 0.001 * n}, "iteration": 10,
              "objective": objective, "judged_at": 0, "checkpoint": 10}
    fields.update(over)
    return MemberView(**fields)


def test_a_member_before_its_interval_is_not_judged():
    assert decide(pbt(), [member(1, 5.0, iteration=9), member(2, 1.0, iteration=9)]) == []


def test_a_member_judged_once_is_judged_again_only_an_interval_later():
    ms = [member(1, 5.0, iteration=15, judged_at=10), member(2, 1.0, iteration=20, judged_at=10)]
    out = decide(pbt(), ms)
    assert [d.member for d in out] == [2]  # member 1 has trained 5 of its 10 since it was judged


def test_the_top_member_keeps_training_and_the_bottom_one_exploits_it():
    out = decide(pbt(), [member(1, 1.0), member(2, 9.0), member(3, 5.0), member(4, 3.0)])
    by = {d.member: d for d in out}
    assert by[2] == Keep(2, 10, 1, 4, "top")
    assert isinstance(by[3], Keep) and by[3].why == "middle" and isinstance(by[4], Keep) and by[4].why == "middle"
    ex = by[1]
    assert isinstance(ex, Exploit) and (ex.source, ex.source_checkpoint, ex.rank, ex.of) == (2, 10, 4, 4)
    assert ex.old == {LR: 1e-3, ENT: 0.001}  # what it had: the lineage's "from"
    assert ex.new != ex.old and set(ex.new) == {LR, ENT}  # the source's values, perturbed


@pytest.mark.parametrize(("n", "quantile", "size"), [(0, 0.25, 0), (1, 0.5, 0), (2, 0.25, 1), (3, 0.25, 1),
                                                     (4, 0.25, 1), (5, 0.25, 2), (8, 0.25, 2), (5, 0.5, 2),
                                                     (8, 0.5, 4), (16, 0.2, 4)])
def test_the_quantiles_are_ceil_of_the_fraction_at_most_half(n, quantile, size):
    assert quantile_size(n, quantile) == size  # Ray's _quantiles: never both top and bottom


def test_a_member_alone_keeps_training():
    [keep] = decide(pbt(), [member(1, 1.0), member(2, None, MemberState.BOOTING)])
    assert keep == Keep(1, 10, 1, 1, "middle")


def test_ties_rank_by_member_number():
    out = decide(pbt(), [member(1, 4.0), member(2, 4.0), member(3, 4.0), member(4, 4.0)])
    ex = [d for d in out if isinstance(d, Exploit)]
    assert [(d.member, d.source) for d in ex] == [(4, 1)]


def test_a_nan_objective_ranks_last():
    out = decide(pbt(), [member(1, math.nan), member(2, 1.0), member(3, 2.0), member(4, 3.0)])
    [ex] = [d for d in out if isinstance(d, Exploit)]
    assert (ex.member, ex.source, ex.rank) == (1, 4, 4)


def test_mode_min_ranks_the_lowest_first():
    out = decide(pbt(mode="min"), [member(1, 1.0), member(2, 9.0), member(3, 5.0), member(4, 3.0)])
    [ex] = [d for d in out if isinstance(d, Exploit)]
    assert (ex.member, ex.source) == (2, 1)


def test_a_failed_member_is_neither_ranked_nor_a_source():
    ms = [member(1, 99.0, MemberState.FAILED), member(2, 1.0), member(3, 2.0), member(4, 3.0)]
    out = decide(pbt(), ms)
    assert all(d.member != 1 for d in out)
    [ex] = [d for d in out if isinstance(d, Exploit)]
    assert (ex.member, ex.source, ex.of) == (2, 4, 3)  # ranked among the three that train


@pytest.mark.parametrize("state", [MemberState.BOOTING, MemberState.EXPLOITING])
def test_a_booting_or_exploiting_member_is_neither_judged_ranked_nor_a_source(state):
    # its objective is from before its exploit (or about to be replaced): it would be copied or judged on it
    ms = [member(1, 99.0, state, iteration=50), member(2, 1.0), member(3, 2.0), member(4, 3.0)]
    out = decide(pbt(), ms)
    assert all(d.member != 1 for d in out)
    [ex] = [d for d in out if isinstance(d, Exploit)]
    assert ex.source == 4 and ex.of == 3


def test_a_bottom_member_keeps_training_when_no_top_member_has_a_checkpoint():
    out = decide(pbt(), [member(1, 1.0), member(2, 9.0, checkpoint=None), member(3, 5.0), member(4, 3.0)])
    assert Keep(1, 10, 4, 4, "no checkpoint") in out  # Ray skips the exploit; never a torn or missing file


def test_the_source_is_drawn_from_the_top_members_with_a_checkpoint():
    ms = [member(n, float(n)) for n in range(1, 9)]  # quantile 0.25 of 8: top 2 (8, 7), bottom 2 (1, 2)
    sources = {d.source for seed in range(40) for d in decide(pbt(seed=seed), ms) if isinstance(d, Exploit)}
    assert sources == {7, 8}
    ms[7] = member(8, 8.0, checkpoint=None)
    assert {d.source for d in decide(pbt(), ms) if isinstance(d, Exploit)} == {7}


def test_the_same_seed_member_and_exploit_count_decide_the_same_exploit_after_a_restart():
    ms = [member(n, float(n)) for n in range(1, 9)]
    assert decide(pbt(), ms) == decide(pbt(), list(reversed(ms)))  # nor does the order the wiring lists them in
    again = [member(1, 1.0, exploits=1)] + ms[1:]
    first = next(d for d in decide(pbt(), ms) if d.member == 1)
    second = next(d for d in decide(pbt(), again) if d.member == 1)
    assert first.new != second.new  # its next exploit draws anew


def test_a_continuous_value_moves_by_a_factor_within_its_bounds():
    m = {LR: Mutation(LogUniform(1e-5, 1e-2), resample_probability=0.0)}
    seen = {explore({LR: 1e-3}, m, random.Random(i))[LR] for i in range(50)}
    assert seen == {0.0008, 0.0012}  # 6 significant digits: no float noise in the value the trainer gets
    near_top = {explore({LR: 9e-3}, m, random.Random(i))[LR] for i in range(50)}
    assert max(near_top) == 1e-2  # 9e-3 * 1.2 is past the bound: the bound


def test_an_integer_value_is_rounded_and_bounded():
    m = {"num_envs": Mutation(IntRange(64, 100), factors=(0.5, 1.5), resample_probability=0.0)}
    seen = {explore({"num_envs": 80}, m, random.Random(i))["num_envs"] for i in range(50)}
    assert seen == {64, 100}


def test_a_choice_value_moves_to_an_adjacent_one_and_an_unknown_one_is_drawn_anew():
    m = {"gamma": Mutation(Choice((0.9, 0.95, 0.99, 0.995)), resample_probability=0.0)}
    assert {explore({"gamma": 0.95}, m, random.Random(i))["gamma"] for i in range(50)} == {0.9, 0.99}
    assert {explore({"gamma": 0.9}, m, random.Random(i))["gamma"] for i in range(50)} == {0.9, 0.95}
    g = {"gamma": Mutation(Grid((0.9, 0.95)), resample_probability=0.0)}
    assert explore({"gamma": 0.5}, g, random.Random(0))["gamma"] in (0.9, 0.95)


def test_resampling_draws_from_the_distribution_and_unmutated_keys_are_the_sources():
    m = {LR: Mutation(Uniform(0.5, 0.6), resample_probability=1.0)}
    out = explore({LR: 1e-3, "seed": 42}, m, random.Random(3))
    assert 0.5 <= out[LR] <= 0.6 and out["seed"] == 42


def test_stop_at_ends_the_population_with_the_member_that_reached_it():
    [done] = decide(pbt(stop_at=8.0), [member(1, 1.0, iteration=3), member(2, 8.5, iteration=3)])
    assert done == Done(2, 8.5, "stop_at 8.0 reached")


def test_the_population_is_done_when_every_member_finished_and_the_best_is_named():
    ms = [member(1, 3.0, MemberState.COMPLETED, iteration=100), member(2, 7.0, MemberState.COMPLETED, iteration=100),
          member(3, 99.0, MemberState.FAILED)]  # a failed member's objective is no result
    assert decide(pbt(), ms) == [Done(2, 7.0, "every member finished")]
    assert decide(pbt(), ms[:2] + [member(3, 1.0)]) != [Done(2, 7.0, "every member finished")]


def test_a_member_at_max_iterations_is_not_judged():
    assert decide(pbt(), [member(1, 1.0, iteration=100), member(2, 9.0, iteration=100)]) == []


@pytest.mark.parametrize(("over", "says"), [
    ({"interval": 0}, "interval = 0"), ({"interval": 100}, "below max_iterations = 100"),
    ({"quantile": 0.6}, "at most 0.5"), ({"quantile": 0.0}, "above 0"),
    ({"mutations": {}}, "no hyperparameter to perturb"), ({"mode": "best"}, "use 'max' or 'min'")])
def test_bad_settings_are_refused_naming_the_key_and_the_fix(over, says):
    with pytest.raises(ValueError, match=says):
        pbt(**over)


@pytest.mark.parametrize(("kw", "says"), [({"factors": ()}, "positive multipliers"),
                                          ({"factors": (0.8, -1.0)}, "positive multipliers"),
                                          ({"resample_probability": 1.5}, "a probability")])
def test_bad_perturbations_are_refused(kw, says):
    with pytest.raises(ValueError, match=says):
        Mutation(Uniform(0, 1), **kw)


def test_over_random_populations_an_exploit_copies_a_ranked_top_member_never_itself():
    rng = random.Random(0)
    for _ in range(500):
        n = rng.randint(1, 12)
        states = [rng.choice([T, T, T, MemberState.BOOTING, MemberState.FAILED]) for _ in range(n)]
        ms = [member(i + 1, rng.choice([None, rng.random(), math.nan]) if s is T else None, s,
                     iteration=rng.randint(0, 30), checkpoint=rng.choice([None, 5])) for i, s in enumerate(states)]
        p = pbt(quantile=rng.choice([0.2, 0.25, 0.5]), seed=rng.randint(0, 9))
        ranked = sorted((m for m in ms if m.state is T and m.objective is not None),
                        key=lambda m: (-p.key(m.objective), m.number))
        top = {m.number for m in ranked[:quantile_size(len(ranked), p.quantile)]}
        exploits = [d for d in decide(p, ms) if isinstance(d, Exploit)]
        assert len(exploits) <= quantile_size(len(ranked), p.quantile)
        for d in exploits:
            assert d.source != d.member and d.source in top
            assert member_rng(p.seed, d.member, 0).random() == member_rng(p.seed, d.member, 0).random()
