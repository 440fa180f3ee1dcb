"""ASHA with pause and promotion (daemon/sweeps/asha.py, issue 39): one scenario per rule, named after what a
researcher watching the sweep would notice, and a simulated sweep of 27 trials on synthetic learning curves."""

from __future__ import annotations

import math
import random

import pytest

from isaacd.sweeps.asha import (Asha, Continue, Done, Launch, Pause, Promote, TrialState, TrialView, best_trial,
                                decide, ranking, smoothed)

S = TrialState
ASHA = Asha(rungs=(10, 30), max_iterations=90, eta=3, concurrency=4)


def arrived(n: int, *values: float, passed: int | None = None) -> TrialView:
    """A running trial that just reached the rung of its last value (not yet judged there)."""
    return TrialView(n, S.RUNNING, iteration=(10, 30, 90)[len(values) - 1], values=values,
                     passed=len(values) - 1 if passed is None else passed)


def going(n: int, *values: float) -> TrialView:
    """A running trial let past the rung of its last value (continued or promoted)."""
    return TrialView(n, S.RUNNING, iteration=(10, 30, 90)[len(values) - 1] + 1, values=values, passed=len(values))


def paused(n: int, *values: float) -> TrialView:
    return TrialView(n, S.PAUSED, iteration=(10, 30)[len(values) - 1], values=values, passed=len(values) - 1)


def pending(n: int) -> TrialView:
    return TrialView(n, S.PENDING)


def completed(n: int, *values: float) -> TrialView:
    return TrialView(n, S.COMPLETED, iteration=90, values=values, passed=2)


def kinds(decisions) -> list[tuple[str, int]]:  # noqa: ANN001
    return [(type(d).__name__, getattr(d, "trial", getattr(d, "best", None))) for d in decisions]


# ---- a rung's decision -------------------------------------------------------------------------------------------
def test_a_trial_reaching_a_rung_in_its_top_third_continues_and_is_never_paused_to_be_resumed():
    trials = [paused(1, 5.0), paused(2, 4.0), arrived(3, 6.0)]
    assert decide(ASHA, trials) == (Continue(3, rung=0, milestone=10, rank=1, of=3, cut=6.0),)


def test_the_first_trial_at_a_rung_continues_as_in_ray_where_nothing_is_recorded_yet():
    assert decide(ASHA, [arrived(1, 0.1), going(2)]) == (Continue(1, 0, 10, 1, 1, 0.1),)


def test_a_trial_below_its_rungs_top_third_is_paused_with_its_rank_and_the_cut_and_its_slot_goes_on():
    asha = Asha(rungs=(10, 30), max_iterations=90, eta=3, concurrency=2)
    trials = [going(1, 6.0), paused(2, 5.0), arrived(3, 4.0), pending(4)]
    assert decide(asha, trials) == (Pause(3, rung=0, milestone=10, rank=3, of=3, cut=6.0), Launch(4))


def test_a_paused_trial_is_promoted_when_worse_results_at_its_rung_push_it_into_the_top_third():
    # trial 2 was paused when the rung held 2 trials (top 1); two worse arrivals make the top 2 of 4
    trials = [going(1, 6.0), paused(2, 5.0), arrived(3, 1.0), arrived(4, 2.0)]
    assert decide(ASHA, trials) == (Pause(3, 0, 10, 4, 4, 5.0), Pause(4, 0, 10, 3, 4, 5.0),
                                    Promote(2, rung=0, milestone=10, rank=2, of=4, cut=5.0))


def test_promotions_come_before_launches_from_the_highest_rung_down():
    # rung 1 (iteration 30): 1 (8.0), 2 paused (7.5), 3 (3.0), 4 (2.0): the top 2 of 4, trial 2 promotable
    # rung 0 (iteration 10): 1, 2, 7 paused (6.5), 3, 4, 8 and 9 paused: the top 3 of 7, trial 7 promotable
    rung0 = {1: 9.0, 2: 7.0, 3: 6.0, 4: 5.0, 7: 6.5, 8: 1.0, 9: 0.5}
    trials = [completed(1, 9.0, 8.0, 9.5), paused(2, 7.0, 7.5), paused(3, 6.0, 3.0), paused(4, 5.0, 2.0),
              paused(7, 6.5), paused(8, 1.0), paused(9, 0.5), pending(10), pending(11)]
    assert all(t.values[0] == rung0[t.number] for t in trials if t.values)
    one = Asha(rungs=(10, 30), max_iterations=90, eta=3, concurrency=1)
    assert decide(one, trials) == (Promote(2, 1, 30, 2, 4, 7.5),)
    two = Asha(rungs=(10, 30), max_iterations=90, eta=3, concurrency=2)
    assert decide(two, trials) == (Promote(2, 1, 30, 2, 4, 7.5), Promote(7, 0, 10, 3, 7, 6.5))
    assert kinds(decide(ASHA, trials)) == [("Promote", 2), ("Promote", 7), ("Launch", 10), ("Launch", 11)]


def test_concurrency_is_never_exceeded_by_running_trials_promotions_and_launches():
    asha = Asha(rungs=(10, 30), max_iterations=90, eta=3, concurrency=3)
    assert decide(asha, [going(1), going(2), *map(pending, range(3, 9))]) == (Launch(3),)
    assert decide(asha, [going(1), going(2), going(3), *map(pending, range(4, 9))]) == ()
    # and whatever the sweep looks like (random views): a pass starts trials only into free slots
    rng = random.Random(0)
    for _ in range(500):
        trials = [_random_view(rng, n) for n in range(1, 16)]
        running = {t.number for t in trials if t.state is S.RUNNING}
        started = 0
        for d in decide(asha, trials):
            if isinstance(d, Pause):
                running.discard(d.trial)
            elif isinstance(d, (Promote, Launch)):
                assert d.trial not in running
                running.add(d.trial)
                started += 1
        assert started == 0 or len(running) <= asha.concurrency


def _random_view(rng: random.Random, n: int) -> TrialView:
    state = rng.choice(list(S))
    if state is S.PENDING:
        return pending(n)
    reached = rng.randint(1, 2)
    values = tuple(round(rng.random(), 2) for _ in range(reached))
    passed = rng.choice([reached - 1, reached]) if state is S.RUNNING else reached - 1
    return TrialView(n, state, (10, 30)[reached - 1], values, passed)


def test_ties_are_broken_by_trial_number_the_earlier_first():
    trials = [arrived(1, 5.0), arrived(2, 5.0), arrived(3, 5.0)]
    assert decide(ASHA, trials) == (Continue(1, 0, 10, 1, 3, 5.0), Pause(2, 0, 10, 2, 3, 5.0),
                                    Pause(3, 0, 10, 3, 3, 5.0))
    # two paused at the same value, one slot: the earlier is promoted
    one = Asha(rungs=(10, 30), max_iterations=90, eta=3, concurrency=1)
    trials = [paused(4, 2.0), paused(3, 2.0), completed(1, 3.0, 1.0, 1.0), *(paused(n, 0.0) for n in range(5, 9))]
    assert decide(one, trials) == (Promote(3, 0, 10, 2, 7, 2.0),)


def test_a_failed_trial_counts_as_the_worst_at_its_rung_and_is_never_promoted():
    # trial 1 was the best at rung 0 and failed on its way to rung 1: its place in the top goes to trial 2
    failed = TrialView(1, S.FAILED, iteration=17, values=(10.0,), passed=1)
    assert decide(ASHA, [failed, paused(2, 5.0), paused(3, 4.0)]) == (Promote(2, 0, 10, 1, 3, 5.0),)
    # a trial that failed before its first rung counts there too (the worst): the rung of 4 keeps its top 2
    early = TrialView(4, S.FAILED, iteration=3)
    alive = going(1, 10.0)
    assert decide(ASHA, [alive, paused(2, 5.0), paused(3, 4.0), early]) == (Promote(2, 0, 10, 2, 4, 5.0),)
    # a failed trial, however good its value, is neither promoted nor launched again
    gone = TrialView(1, S.FAILED, iteration=10, values=(99.0,), passed=0)
    assert kinds(decide(ASHA, [gone, completed(2, 1.0, 1.0, 1.0)])) == [("Done", 2)]


def test_a_promoted_trial_is_not_paused_again_at_its_rung_when_better_ones_arrive_there():
    # trial 2 was promoted from rung 0 (passed = 1); two better ones arrive there: it is 3rd of 4, out of the top 2
    trials = [going(2, 5.0), paused(1, 4.0), arrived(3, 8.0), arrived(4, 9.0)]
    decisions = decide(ASHA, trials)
    assert [d for d in decisions if getattr(d, "trial", None) == 2] == []  # still running toward rung 1
    assert decisions == (Continue(3, 0, 10, 2, 4, 8.0), Continue(4, 0, 10, 1, 4, 8.0))


def test_the_top_third_of_a_small_rung_is_its_ceiling_as_rays_percentile_cutoff_decides_by_rank():
    # Ray (async_hyperband.py): continue unless the value is below np.nanpercentile(others, (1 - 1/eta) * 100).
    # For each rung size and rank, where Ray's answer is the same whatever the values (decided by the rank), ASHA's
    # ceil(n / eta) gives it; floor would pause the first trial at a rung, which Ray lets through.
    rng = random.Random(1)
    for eta in (2, 3, 4):
        for n in range(1, 13):
            for rank in range(1, n + 1):
                ray = {_ray_continues(rng, n, rank, eta) for _ in range(40)}
                if len(ray) == 1:
                    assert (rank <= math.ceil(n / eta)) == ray.pop(), (eta, n, rank)
    asha = Asha(rungs=(10,), max_iterations=90, eta=3, concurrency=9)
    assert kinds(decide(asha, [arrived(1, 1.0)])) == [("Continue", 1)]
    assert kinds(decide(asha, [going(1, 2.0), arrived(2, 1.0)])) == [("Pause", 2)]
    assert kinds(decide(asha, [going(1, 4.0), paused(2, 1.0), paused(3, 2.0), arrived(4, 3.0)])) == [("Continue", 4)]


def _ray_continues(rng: random.Random, n: int, rank: int, eta: float) -> bool:
    values = sorted((rng.random() for _ in range(n)), reverse=True)
    mine, others = values[rank - 1], sorted(values[:rank - 1] + values[rank:])
    if not others:
        return True
    pos = (1 - 1 / eta) * (len(others) - 1)  # numpy's linear percentile
    lo = math.floor(pos)
    hi = min(lo + 1, len(others) - 1)
    cutoff = others[lo] + (pos - lo) * (others[hi] - others[lo])
    return not mine < cutoff


def test_reaching_stop_at_ends_the_sweep_with_that_trial_the_best():
    asha = Asha(rungs=(10, 30), max_iterations=90, eta=3, concurrency=4, stop_at=0.9)
    busy = TrialView(3, S.RUNNING, iteration=44, values=(0.5, 0.8), passed=2, objective=0.93)
    trials = [going(1, 0.7), busy, arrived(2, 0.1), pending(4)]
    decisions = decide(asha, trials)
    assert decisions == (Done(3, 0.93, "trial 3's objective 0.93 reached stop_at = 0.9"),)
    assert kinds(decide(asha, [going(1, 0.7), arrived(2, 0.1), pending(4)])) == [("Pause", 2), ("Launch", 4)]


def test_mode_min_ranks_the_lowest_objective_first():
    asha = Asha(rungs=(10, 30), max_iterations=90, eta=3, concurrency=4, mode="min", stop_at=0.01)
    trials = [going(1, 0.5), paused(2, 0.9), arrived(3, 0.2), arrived(4, 2.0)]
    assert decide(asha, trials) == (Continue(3, 0, 10, 1, 4, 0.5), Pause(4, 0, 10, 4, 4, 0.5))
    assert decide(asha, [going(1, 0.5), going(2, 0.3, 0.005)])[0] == Done(2, 0.005, "trial 2's objective 0.005 "
                                                                                     "reached stop_at = 0.01")
    assert best_trial(asha, [completed(1, 1.0, 0.5, 0.3), completed(2, 1.0, 0.5, 0.1)]) == 2


def test_done_when_nothing_runs_is_pending_or_can_be_promoted_and_the_last_pause_comes_with_it():
    trials = [completed(1, 5.0, 5.0, 7.0), completed(2, 4.0, 6.0, 6.5), paused(3, 1.0), arrived(4, 0.5)]
    decisions = decide(ASHA, trials)
    assert decisions[0] == Pause(4, 0, 10, 4, 4, 4.0)
    assert decisions[1] == Done(1, 7.0, "every trial completed, failed or paused below its rung's top 1/eta")
    assert decide(ASHA, [])[-1].best is None


def test_the_best_trial_is_the_one_that_got_furthest_then_the_best_value_there():
    trials = [paused(1, 9.0), completed(2, 5.0, 5.0, 6.0), completed(3, 5.0, 5.0, 6.5), going(4, 8.0, 9.0),
              TrialView(5, S.FAILED, values=(9.9, 9.9, 9.9), passed=2), pending(6), TrialView(7, S.RUNNING, 4)]
    assert ranking(ASHA, trials) == (3, 2, 4, 1, 5, 7, 6)
    assert best_trial(ASHA, trials) == 3


def test_a_sweep_of_1000_trials_keeps_its_concurrency_and_names_only_its_own_trials():
    # (how long a decision takes is bench/asha_decide.py's to print, never a timed assert here)
    rng = random.Random(3)
    trials = [_random_view(rng, n) for n in range(1, 1001)]
    asha = Asha(rungs=(10, 30), max_iterations=90, eta=3, concurrency=50)
    decisions = decide(asha, trials)
    running = sum(1 for t in trials if t.state is S.RUNNING) - sum(isinstance(d, Pause) for d in decisions)
    started = sum(isinstance(d, (Launch, Promote)) for d in decisions)
    assert started == 0 if running >= 50 else running + started <= 50  # never past concurrency 50
    assert {d.trial for d in decisions if not isinstance(d, Done)} <= {t.number for t in trials}


def test_the_objective_is_the_mean_of_the_last_n_logged_values():
    assert smoothed([1.0, 2.0, 3.0, 4.0], 2) == 3.5
    assert smoothed([1.0], 5) == 1.0
    assert smoothed([], 5) is None


def test_rungs_past_max_iterations_or_a_reduction_factor_of_1_are_refused():
    with pytest.raises(ValueError, match=r"rungs = \[10, 100\]: each must be below max_iterations = 90"):
        Asha(rungs=(10, 100), max_iterations=90)
    with pytest.raises(ValueError, match="increasing"):
        Asha(rungs=(30, 10), max_iterations=90)
    with pytest.raises(ValueError, match="reduction_factor = 1"):
        Asha(rungs=(10,), max_iterations=90, eta=1)


# ---- a simulated sweep ------------------------------------------------------------------------------------------
def _curves(n: int, seed: int) -> list[tuple[float, float]]:
    """Synthetic learning curves: trial i's objective at iteration t is q * (1 - exp(-t / tau)): configurations
    differ in where they end (q) and how fast they get there (tau), so a slow good one may trail at a low rung."""
    rng = random.Random(seed)
    return [(rng.uniform(100.0, 500.0), rng.uniform(4.0, 30.0)) for _ in range(n)]


def _simulate(asha: Asha, curves: list[tuple[float, float]]) -> tuple[Done, dict[int, int], int]:
    """Runs the decisions as the wiring would: one iteration per step for each running trial, a rung's value
    recorded when it reaches the milestone, a paused trial resumed exactly where it stopped (zero lost
    iterations). Returns the Done, each trial's last iteration and the iterations spent."""
    value = {n: (lambda t, q=q, tau=tau: q * (1 - math.exp(-t / tau))) for n, (q, tau) in enumerate(curves, 1)}
    views = {n: TrialView(n, S.PENDING) for n in value}
    spent = 0
    for _ in range(100_000):
        for d in decide(asha, list(views.values())):
            v = views.get(getattr(d, "trial", 0))
            if isinstance(d, Done):
                return d, {n: t.iteration for n, t in views.items()}, spent
            if isinstance(d, Continue):
                views[d.trial] = TrialView(d.trial, v.state, v.iteration, v.values, d.rung + 1)
            elif isinstance(d, Pause):
                views[d.trial] = TrialView(d.trial, S.PAUSED, v.iteration, v.values, v.passed)
            elif isinstance(d, Promote):
                views[d.trial] = TrialView(d.trial, S.RUNNING, v.iteration, v.values, d.rung + 1)
            elif isinstance(d, Launch):
                views[d.trial] = TrialView(d.trial, S.RUNNING)
        assert sum(t.state is S.RUNNING for t in views.values()) <= asha.concurrency
        for n, t in list(views.items()):
            if t.state is not S.RUNNING:
                continue
            it = t.iteration + 1
            spent += 1
            values = t.values + ((value[n](it),) if it in asha.milestones else ())
            views[n] = TrialView(n, S.COMPLETED if it == asha.max_iterations else S.RUNNING, it, values, t.passed)
    raise AssertionError("the sweep never ended")


def test_a_simulated_sweep_of_27_trials_runs_the_best_to_the_end_for_far_fewer_iterations():
    asha = Asha(rungs=(3, 9, 27), max_iterations=81, eta=3, concurrency=4)
    curves = _curves(27, seed=39)
    done, iterations, spent = _simulate(asha, curves)
    finals = [q * (1 - math.exp(-81 / tau)) for q, tau in curves]
    truly_best = finals.index(max(finals)) + 1
    assert done.best == truly_best and iterations[truly_best] == 81
    assert done.value == pytest.approx(max(finals))
    ratio = spent / (27 * 81)
    print(f"ASHA spent {spent} iterations of {27 * 81} ({ratio:.3f}); "
          f"{sum(i == 81 for i in iterations.values())} trials ran to the end")
    assert ratio < 0.3
    assert all(i in (3, 9, 27, 81) for i in iterations.values())  # every trial ended at a rung: nothing lost


def test_across_many_simulated_sweeps_asha_finds_the_best_or_one_close_to_it():
    # slow starters (large tau) can trail at the first rung and stay paused there: the price of stopping early.
    # Over 30 sweeps the best found is the true best in most, and never far from it.
    asha = Asha(rungs=(3, 9, 27), max_iterations=81, eta=3, concurrency=4)
    found, spent = [], []
    for seed in range(30):
        curves = _curves(27, seed)
        done, _, iterations = _simulate(asha, curves)
        found.append(done.value / max(q * (1 - math.exp(-81 / tau)) for q, tau in curves))
        spent.append(iterations / (27 * 81))
    assert sum(f == pytest.approx(1.0) for f in found) >= 15
    assert min(found) > 0.8
    assert max(spent) < 0.5
