"""The watchdogs' rules on exact signal sequences (the classes the supervisor runs, no supervisor)."""

from __future__ import annotations

from typing import get_args

from isaacd.jobs.messages import WatchdogAction
from isaacd.observations.tensorboard import ScalarPoint
from isaacd.config import watchdogs as wc
from isaacd.watchdogs.base import JobView
from isaacd.watchdogs.divergence import DivergenceWatchdog
from isaacd.watchdogs.no_progress import NoProgressWatchdog
from isaacd.watchdogs.reward_plateau import RewardPlateauWatchdog


def view(now: float, step: int | None = None, points: list[ScalarPoint] | None = None, attempt: int = 1,
         last_progress: float | None = None) -> JobView:
    return JobView(name="j", now=now, alive=True, attempt_started_at=0.0, attempt_first_step=0, iteration=step,
                   last_progress_time=last_progress if last_progress is not None else now,
                   new_points=points or [], attempt=attempt)


def reward(step: int, value: float) -> list[ScalarPoint]:
    return [ScalarPoint(step, "Train/mean_reward", value, 0.0)]


def test_reward_plateau_trips_after_patience_and_improvement_resets_it():
    wd = RewardPlateauWatchdog(wc.RewardPlateau(patience=5, min_delta=0.5, warmup_iterations=0, warmup_seconds=0.0,
                                                cooldown=0.0))
    values = [1, 2, 3, 3.2, 3.4, 3.1, 3.3, 3.49]  # best 3 at step 2; nothing beats it by > 0.5 afterwards
    trips = [wd.step(view(float(i), i, reward(i, v))) for i, v in enumerate(values)]
    assert [t is not None for t in trips] == [False] * 7 + [True]
    assert "no improvement over 3 for 5 iterations" in trips[-1].detail
    # an improvement by more than min_delta starts the count again
    assert wd.step(view(8.0, 8, reward(8, 4.0))) is None
    assert wd.step(view(9.0, 9, reward(9, 4.1))) is None


def test_reward_plateau_mode_min_and_warmup_in_iterations():
    wd = RewardPlateauWatchdog(wc.RewardPlateau(tag="Train/mean_episode_length", mode="min", patience=2,
                                                warmup_iterations=10, warmup_seconds=0.0))
    for i in range(6):
        assert wd.step(view(float(i), i, [ScalarPoint(i, "Train/mean_episode_length", 100.0, 0.0)])) is None
    assert wd.state == "warmup"


def test_hold_time_must_elapse_and_recovery_resets_it():
    wd = NoProgressWatchdog(wc.NoProgress(timeout=5.0, hold=2.0, warmup_seconds=0.0, cooldown=0.0))
    assert wd.step(view(6.0, 1, last_progress=0.0)) is None and wd.state == "pending"
    assert wd.step(view(7.5, 1, last_progress=0.0)) is None
    assert wd.step(view(8.1, 1, last_progress=0.0)) is not None  # pending since 6.0 + hold 2.0
    assert wd.state == "tripped"


def test_divergence_nan_is_immediate_and_spike_names_the_first_bad_iteration():
    wd = DivergenceWatchdog(wc.Divergence(median_window=6, warmup_iterations=0))
    for i in range(6):
        assert wd.step(view(float(i), i, [ScalarPoint(i, "Loss/value", 10.0 + i % 2, 0.0)])) is None
    # a spike that stays: the trip comes on its third iteration and names the first
    assert wd.step(view(6.0, 6, [ScalarPoint(6, "Loss/value", 500.0, 0.0)])) is None
    assert wd.step(view(7.0, 7, [ScalarPoint(7, "Loss/value", 480.0, 0.0)])) is None
    trip = wd.step(view(8.0, 8, [ScalarPoint(8, "Loss/value", 510.0, 0.0)]))
    assert trip is not None and trip.trouble_iteration == 6 and trip.action == "rollback"
    assert "3 iterations in a row" in trip.detail
    wd2 = DivergenceWatchdog(wc.Divergence(warmup_iterations=0))
    trip = wd2.step(view(0.0, 3, [ScalarPoint(3, "Loss/surrogate", float("nan"), 0.0)]))
    assert trip is not None and trip.trouble_iteration == 3


def test_divergence_forgets_a_lone_spike_that_comes_back_down():
    """Seen on the built-in cartpole after a resume: the value loss went 36 -> 56 -> 19 on a median of ~5."""
    wd = DivergenceWatchdog(wc.Divergence(median_window=6, warmup_iterations=0))
    series = [5.0, 4.0, 6.0, 5.0, 4.5, 5.5, 36.0, 56.0, 19.0, 7.0, 60.0, 6.0, 5.0, 70.0, 65.0, 6.0]
    assert all(wd.step(view(float(i), i, [ScalarPoint(i, "Loss/value", v, 0.0)])) is None
               for i, v in enumerate(series))
    assert wd.state == "ok"


def test_divergence_ignores_a_converged_tiny_loss_wobbling():
    """Seen on an H200: a converged value loss (~0.01) jumping to 0.3 is no divergence."""
    wd = DivergenceWatchdog(wc.Divergence(median_window=6, warmup_iterations=0))
    series = [20.0, 15.0, 8.0, 3.0, 1.0, 0.3] + [0.01] * 8 + [0.3, 0.01, 0.5]
    assert all(wd.step(view(float(i), i, [ScalarPoint(i, "Loss/value", v, 0.0)])) is None
               for i, v in enumerate(series))


def test_the_configs_actions_are_the_machines():
    # the config validates the TOML's words (a Literal); the engine and the machine work with WatchdogAction
    assert set(get_args(wc.Action)) == {a.value for a in WatchdogAction}
