"""Which checkpoint is evaluated next (daemon/evals/choose.py, issue 41) and which result is the best
(daemon/evals/best.py): one scenario per rule, named after what a researcher watching the evaluations would notice."""

from __future__ import annotations

from isaacd.config.eval import EvalConfig
from isaacd.evals.best import best_result, is_better
from isaacd.evals.choose import (EvalTask, backoff, chosen, next_eval, plan, should_give_up, waiting_count)
from isaacd.evals.record import EvalRecord
from isaacd.evals.types import EvalResult

T0 = 1_800_000_000.0  # wall seconds


def cks(*iterations: int) -> list[tuple[int, str]]:
    return [(i, f"/runs/a/model_{i}.pt") for i in iterations]


def result(iteration: int, ret: float, finished_at: float = T0) -> EvalResult:
    return EvalResult(iteration=iteration, checkpoint=f"/runs/a/model_{iteration}.pt", episodes=100,
                      return_mean=ret, return_std=1.0, length_mean=200.0, length_std=3.0, success_rate=None,
                      seed=42, num_envs=100, device="cpu", duration_seconds=10.0, finished_at=finished_at)


def done(*iterations: int) -> EvalRecord:
    rec = EvalRecord("a")
    for i in iterations:
        rec.started(i)
        rec.finished(result(i, float(i)))
    return rec


EVERY1 = EvalConfig()


# ---- which checkpoints the `every` rule chooses ------------------------------------------------------------------
def test_every_n_evaluates_the_first_checkpoint_and_each_nth_after_it_by_order_of_iteration():
    cfg = EvalConfig(every=3)
    # out of order, as a listing of a directory gives them
    assert list(chosen(cfg, cks(350, 0, 50, 100, 150, 200, 250, 300), {})) == [0, 150, 300]
    assert list(chosen(EVERY1, cks(0, 50, 100), {})) == [0, 50, 100]


def test_every_best_evaluates_each_checkpoint_whose_training_reward_is_a_new_best_of_the_run():
    cfg = EvalConfig(every="best")
    rewards = {0: 1.0, 40: 5.0, 50: 4.0, 90: 9.0, 100: 3.0, 140: 3.5, 150: 6.0}
    # 50's reward is 4.0 (its own), above 0's 1.0; 100: 3.0 (no); 150: 6.0, above 50's 4.0 though below 90's 9.0
    # logged between checkpoints: the best *checkpoint* so far by training reward
    assert list(chosen(cfg, cks(0, 50, 100, 150), rewards)) == [0, 50, 150]


def test_every_best_takes_the_newest_reward_at_or_before_a_checkpoint_and_skips_one_with_none_yet():
    cfg = EvalConfig(every="best")
    assert list(chosen(cfg, cks(0, 10, 20), {5: 2.0, 15: 1.0})) == [10]  # 0 has no reward at or before it
    assert list(chosen(cfg, cks(0, 10, 20), {})) == []
    assert list(chosen(cfg, cks(10, 20, 30), {10: 2.0, 20: 2.0, 30: 2.5})) == [10, 30]  # a tie is no new best


# ---- the order ---------------------------------------------------------------------------------------------------
def test_the_oldest_chosen_checkpoint_not_yet_evaluated_comes_first_so_the_curve_fills_in_order():
    rec = done(0)
    assert next_eval(EVERY1, cks(0, 50, 100), {}, rec, T0) == EvalTask(50, "/runs/a/model_50.pt", 1)
    assert next_eval(EVERY1, cks(0, 50, 100), {}, done(0, 50, 100), T0) is None


def test_nothing_to_evaluate_before_the_first_checkpoint():
    assert next_eval(EVERY1, [], {1: 2.0}, EvalRecord("a"), T0) is None
    assert waiting_count(EVERY1, [], {}, EvalRecord("a")) == 0


def test_when_more_than_3_chosen_checkpoints_wait_only_the_newest_3_are_evaluated_and_the_others_are_skipped():
    rec = done(0)
    checkpoints = cks(*range(0, 101, 10))  # 0 done; 10..100 wait: 10 of them
    p = plan(EVERY1, checkpoints, {}, rec)
    assert p.waiting == (80, 90, 100) and p.skipped == (10, 20, 30, 40, 50, 60, 70)
    assert next_eval(EVERY1, checkpoints, {}, rec, T0).iteration == 80
    # evaluating the newest three does not bring the skipped ones back
    for i in (80, 90):
        rec.started(i)
        rec.finished(result(i, 1.0))
    assert next_eval(EVERY1, checkpoints, {}, rec, T0).iteration == 100
    assert plan(EVERY1, checkpoints, {}, rec).skipped == (10, 20, 30, 40, 50, 60, 70)
    assert rec.skip(plan(EVERY1, checkpoints, {}, rec).skipped) == (10, 20, 30, 40, 50, 60, 70)
    assert rec.skip((10, 20)) == ()  # counted once


def test_exactly_3_waiting_are_all_evaluated_and_a_running_one_is_never_skipped():
    assert plan(EVERY1, cks(0, 10, 20), {}, EvalRecord("a")).skipped == ()
    rec = EvalRecord("a")
    rec.started(0)  # running while 10, 20, 30 were written: three wait, none skipped
    p = plan(EVERY1, cks(0, 10, 20, 30), {}, rec, running=0)
    assert p.waiting == (10, 20, 30) and p.skipped == ()
    assert waiting_count(EVERY1, cks(0, 10, 20, 30), {}, rec, running=0) == 3


def test_a_skipped_checkpoint_the_record_holds_stays_skipped():
    rec = EvalRecord("a")
    rec.skip([10])
    assert next_eval(EVERY1, cks(10, 20), {}, rec, T0).iteration == 20
    assert waiting_count(EVERY1, cks(10, 20), {}, rec) == 1


# ---- failures ------------------------------------------------------------------------------------------------------
def test_a_failed_evaluation_is_retried_after_2_s_then_30_s_doubling_up_to_10_minutes():
    assert [backoff(k) for k in range(0, 9)] == [0.0, 2.0, 30.0, 60.0, 120.0, 240.0, 480.0, 600.0, 600.0]
    cfg = EvalConfig(retries=10)
    rec = EvalRecord("a")
    rec.started(0)
    rec.failed(0, "killed at the deadline (600 s)", at=T0)
    assert next_eval(cfg, cks(0), {}, rec, T0 + 1.9) is None
    assert next_eval(cfg, cks(0), {}, rec, T0 + 2.0) == EvalTask(0, "/runs/a/model_0.pt", 2)
    rec.started(0)
    rec.failed(0, "exit 1", at=T0 + 40)
    assert next_eval(cfg, cks(0), {}, rec, T0 + 69.9) is None
    assert next_eval(cfg, cks(0), {}, rec, T0 + 70.0).attempt == 3


def test_a_newer_ready_checkpoint_goes_first_while_a_failed_one_waits_its_backoff_then_the_retry_comes_first():
    rec = EvalRecord("a")
    rec.started(0)
    rec.failed(0, "exit -9", at=T0)
    assert next_eval(EVERY1, cks(0, 10), {}, rec, T0 + 1).iteration == 10
    assert next_eval(EVERY1, cks(0, 10), {}, rec, T0 + 31).iteration == 0  # the oldest again, once ready


def test_a_checkpoint_is_given_up_after_retries_failed_attempts_and_never_chosen_again():
    cfg = EvalConfig(retries=2)
    rec = EvalRecord("a")
    for k in range(2):
        assert not should_give_up(cfg, rec, 0)
        rec.started(0)
        rec.failed(0, "checkpoint does not load: torn", at=T0 + k)
    assert should_give_up(cfg, rec, 0)
    # even before the keeper records the give-up, it is not chosen again
    assert next_eval(cfg, cks(0), {}, rec, T0 + 10_000) is None
    rec.give_up(0, "checkpoint does not load: torn", at=T0 + 2)
    assert next_eval(cfg, cks(0, 10), {}, rec, T0 + 10_000).iteration == 10
    assert waiting_count(cfg, cks(0, 10), {}, rec) == 1


def test_an_attempt_lost_with_the_supervisor_is_started_again_at_once_and_is_no_failure():
    rec = EvalRecord("a")
    rec.started(0)  # no outcome recorded: the supervisor went down mid-evaluation
    assert next_eval(EVERY1, cks(0), {}, rec, T0) == EvalTask(0, "/runs/a/model_0.pt", 1)


# ---- the best --------------------------------------------------------------------------------------------------------
def test_the_best_is_the_highest_mean_return_and_of_equal_ones_the_earlier_iteration():
    a, b, c = result(100, 480.0), result(200, 495.0), result(300, 495.0)
    assert best_result([c, a, b]) is b
    assert best_result([]) is None
    assert is_better(b, a) and not is_better(c, b) and is_better(a, None)


def test_the_record_names_a_new_best_once_and_keeps_an_earlier_equal_one():
    rec = EvalRecord("a")
    assert rec.finished(result(100, 480.0)) is True
    assert rec.finished(result(200, 470.0)) is False and rec.best == 100
    assert rec.finished(result(300, 480.0)) is False and rec.best == 100  # a tie: the earlier stays best
    assert rec.finished(result(400, 495.0)) is True and rec.best_result.iteration == 400
