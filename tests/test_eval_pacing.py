"""Evaluations paced by what they cost the training (daemon/evals/pacing.py, issue 41): pure decisions, then the eval
keeper applying them with the job's real setting and the fake runtime (tests/test_eval_keeper.py's world).

What a user would notice: an evaluation on the job's GPU that stalls the trainer is followed by a wait long enough that
evaluations cost at most `max_training_cost` of the training's time (1 % unless set), said in the journal
(`eval_cost`) and the status ("next in 23s"); one that cost nothing is followed at once; CPU evaluations are not paced
unless asked; nothing waits for a measure that cannot come (a job no longer training)."""

from __future__ import annotations

import time

import pytest
from test_eval_keeper import Eval

from isaacd.attempt.eval_effects import StartEval
from isaacd.config.eval import EvalConfig
from isaacd.evals.pacing import MEASURE_LIMIT, SETTLE, Cost, Span, TrainerSteps, cost, pause_after
from isaacd.jobs.model import JobState
from isaacd.observations.tensorboard import ScalarPoint


def steps_at(walls: list[float], attempt: object = 1, first: int = 0) -> TrainerSteps:
    s = TrainerSteps()
    for i, w in enumerate(walls):
        s.add(attempt, first + i, w)
    return s


def walls(start: float, intervals: list[float]) -> list[float]:
    out = [start]
    for d in intervals:
        out.append(out[-1] + d)
    return out


def test_the_cost_is_the_time_the_trainers_iterations_took_above_their_usual_during_the_evaluation():
    # usual 0.15 s; during the evaluation (t 10..14) three iterations took 0.25 s: 0.3 s lost
    ts = walls(0.0, [0.15] * 66 + [0.25] * 3 + [0.15] * 30)
    span = Span(ts[66] - 0.05, ts[69] + 0.1)
    got = cost(steps_at(ts), span, [span])
    assert got is not None and got.iterations >= 3
    assert got.lost == pytest.approx(0.3, abs=1e-9) and got.usual == pytest.approx(0.15)
    # which iterations it looked at, said in its event: steps 1..99; 12 of them end in it or its SETTLE (66..77)
    assert got.window == (1, 99) and got.usual_of == 99 - 12


def test_noise_in_the_trainers_iteration_times_is_no_cost_only_a_net_slowdown_is():
    # a noisy host: iterations alternate 0.12 / 0.18 s (usual 0.15) before, during and after an evaluation that costs
    # nothing. Summing only the iterations above the usual would call that 0.03 s x half of them "lost" (~0.9 s here)
    ts = walls(0.0, [0.12, 0.18] * 40 + [0.12, 0.18] * 30 + [0.12, 0.18] * 20)
    span = Span(ts[80] + 0.01, ts[140] - 0.5)
    got = cost(steps_at(ts), span, [span])
    assert got is not None and got.iterations >= 50 and got.lost == pytest.approx(0.0, abs=0.05)
    # the same noise with 0.5 s of real slowdown in it: 0.5 s, not the noise's excesses on top
    slow = [0.12, 0.18] * 40 + [0.12, 0.18] * 5 + [0.37, 0.43] + [0.12, 0.18] * 24 + [0.12, 0.18] * 20
    ts = walls(0.0, slow)
    got = cost(steps_at(ts), Span(ts[80] + 0.01, ts[140] - 0.5), [Span(ts[80] + 0.01, ts[140] - 0.5)])
    assert got is not None and got.lost == pytest.approx(0.5, abs=0.05)


def test_the_pause_is_of_the_recent_measures_mean_so_one_lucky_measure_does_not_unpace_the_next():
    from isaacd.evals.pacing import Pacer
    p = Pacer()
    for lost, end in ((0.6, 100.0), (0.3, 200.0), (-0.3, 300.0)):  # net measures: noise can make one negative
        p.recent.append(Cost(lost=lost, seconds=10.0, usual=0.15, iterations=60, span=Span(end - 10.0, end)))
    # the mean, 0.2 s, at 1 %: 20 s from start to start, 10 s after the newest one's end (not 0: its own -0.3 s)
    assert p.until(0.01, 300.0) == pytest.approx(310.0)
    assert p.shown(0.01, 300.0, idle=True).cost_seconds == pytest.approx(0.2)
    # a mean below 0 paces nothing (a measure always carries its evaluation's run: the newest is the one paced from)
    p.recent.append(Cost(lost=-2.0, seconds=10.0, usual=0.15, iterations=60, span=Span(290.0, 300.0)))
    assert p.until(0.01, 300.0) is None and p.shown(0.01, 300.0, idle=True).cost_seconds == 0.0


def test_no_cost_until_the_trainer_logged_past_the_evaluations_end_or_without_a_usual_time():
    ts = walls(0.0, [0.15] * 20)
    assert cost(steps_at(ts), Span(ts[-1] - 1.0, ts[-1] - 0.5), []) is None  # its points still to come (SETTLE)
    span = Span(0.0, ts[-1] - 1.2)  # all but one interval overlap it (and SETTLE after): no usual time yet
    assert cost(steps_at(ts), span, [span]) is None


def test_the_usual_time_leaves_out_every_recent_evaluation_not_only_this_one():
    ts = walls(0.0, [0.2] * 10 + [0.4] * 10 + [0.2] * 10 + [0.4] * 3 + [0.2] * 10)
    earlier = Span(ts[10], ts[20])  # slow iterations under an earlier evaluation: not the trainer's usual
    this = Span(ts[30], ts[33])
    got = cost(steps_at(ts), this, [earlier, this])
    assert got is not None and got.usual == pytest.approx(0.2) and got.lost == pytest.approx(0.6)


def test_an_evaluation_at_the_attempts_start_waits_for_as_many_usual_iterations_as_ran_beside_it():
    # the first checkpoint comes at the 4th iteration: 3 iterations (slow: a trainer's first ones) before an evaluation
    # that 40 ran beside. Their mean as the usual made the measure 40 x their error; it waits for 40 outside ones
    ts = walls(0.0, [0.3] * 3 + [0.2] * 40 + [0.2] * 60)
    span = Span(ts[3], ts[43] - 1.0)  # the intervals up to SETTLE after its end are its
    early = steps_at(ts[:43 + 6])  # its SETTLE has passed: only 3 + 5 outside, against 40 during
    assert cost(early, span, [span]) is None
    assert cost(steps_at(ts[:1 + 43 + 36]), span, [span]) is None  # 3 + 36 outside: one short
    got = cost(steps_at(ts[:1 + 43 + 37]), span, [span])
    assert got is not None and got.iterations == 40 and got.usual_of == 3 + 37
    # the usual (3 x 0.3 + 37 x 0.2) / 40: -0.3 s, the 3 slow ones' pull; measured at once: 40 x (0.2 - 0.3) = -4 s
    assert got.usual == pytest.approx(8.3 / 40) and got.lost == pytest.approx(40 * (0.2 - 8.3 / 40))


def test_steps_of_a_new_attempt_start_afresh_and_other_tags_of_a_step_add_nothing():
    s = steps_at(walls(0.0, [0.1] * 5))
    s.add(1, 5, 0.55)  # a second tag of step 5, a moment later
    assert len(s.intervals) == 5
    s.add(2, 3, 100.0)  # a resume: attempt 2 logs from step 3 again; the gap since attempt 1 is no iteration
    s.add(2, 4, 100.3)
    assert [round(d, 3) for _, d, _ in s.intervals] == [0.3]


@pytest.mark.parametrize("lost, seconds, budget, pause", [
    (0.24, 13.0, 0.01, 11.0),   # H100 cart-pole: 0.24 s per 13 s evaluation -> 24 s from start to start
    (0.05, 13.0, 0.01, 0.0),    # cheaper than the budget over its own time: the next at once
    (0.24, 13.0, 0.0, 0.0),     # budget 0: never wait
    (1.0, 5.0, 0.05, 15.0),
])
def test_the_pause_makes_the_cost_at_most_the_budget_of_the_time_from_start_to_start(lost, seconds, budget, pause):
    c = Cost(lost=lost, seconds=seconds, usual=0.15, iterations=10)
    got = pause_after(c, budget)
    assert got == pytest.approx(pause)
    if budget > 0 and got > 0:
        assert lost / (seconds + got) == pytest.approx(budget)


def test_the_budget_defaults_to_half_a_percent_on_the_gpu_and_none_on_the_cpu_and_takes_a_setting():
    assert EvalConfig(gpu_memory="4GiB").cost_budget == 0.005
    assert EvalConfig().cost_budget == 0.0
    assert EvalConfig(max_training_cost=0.05).cost_budget == 0.05
    assert EvalConfig(gpu_memory="4GiB", max_training_cost=0.0).cost_budget == 0.0
    with pytest.raises(ValueError):
        EvalConfig(max_training_cost=1.5)


# ---- the keeper ---------------------------------------------------------------------------------------------------
PACED = '[jobs.eval]\nepisodes = 4\nseed = 7\ndeadline_seconds = 60\nretries = 2\nmax_training_cost = 0.01\n'


def feed(t: Eval, start_wall: float, intervals: list[float], first_step: int) -> int:
    """The trainer's TensorBoard points of this tick (one tag each), from `start_wall`; returns the next step."""
    ws = walls(start_wall, intervals)
    t.observer.live.new_points = [ScalarPoint(first_step + i, "Loss/value_function", 0.1, w) for i, w in enumerate(ws)]
    return first_step + len(ws)


def test_a_costly_evaluation_delays_the_next_so_they_cost_at_most_the_budget_and_says_so(tmp_path):
    from test_attempt_planner import JOB
    t = Eval(tmp_path, job=JOB + PACED)
    wall0 = t.w.clock.wall()
    step = feed(t, wall0 - 10.0, [0.2] * 50, 0)  # the trainer's usual: 0.2 s
    assert [type(e) for e in t.tick()] == [StartEval]
    t.observer.live.new_points = []
    t.w.clock.advance(10.0)
    t.now += 10.0
    t.finish(0, 20.0)
    t.tick()  # read and recorded: its cost is still to be measured, so nothing starts
    status = t.keeper.status()
    assert status.done == 1 and status.running is None and t.keeper.pacer.pending is not None
    # the trainer's points of the evaluation's 10 s: five iterations took 0.4 s (1.0 s lost), then usual again
    step = feed(t, wall0 + 0.2, [0.2] * 20 + [0.4] * 5 + [0.2] * 30, step)
    t.w.clock.advance(3.0)
    t.now += 3.0
    assert t.tick() == []  # measured: a 1.0 s cost at 1 % waits until 100 s after its start
    cost_ev = t.events("eval_cost")
    assert len(cost_ev) == 1 and cost_ev[0]["lost_seconds"] == pytest.approx(1.0, abs=0.01)
    assert cost_ev[0]["pause_seconds"] == pytest.approx(90.0, abs=1.0) and cost_ev[0]["budget"] == 0.01
    status = t.keeper.status()
    assert status.cost_seconds == pytest.approx(1.0, abs=0.01) and status.paced_until is not None
    t.observer.live.new_points = []
    t.w.clock.advance(80.0)
    t.now += 80.0
    assert t.tick() == []  # still paced
    t.w.clock.advance(10.0)
    t.now += 10.0
    assert [type(e) for e in t.tick()] == [StartEval]  # 100 s after the first one's start


def test_a_changed_budget_applies_to_the_wait_at_once(tmp_path):
    from test_attempt_planner import JOB
    t = Eval(tmp_path, job=JOB + PACED)
    wall0 = t.w.clock.wall()
    step = feed(t, wall0 - 10.0, [0.2] * 50, 0)
    t.tick()
    t.observer.live.new_points = []
    t.w.clock.advance(10.0)
    t.now += 10.0
    t.finish(0, 20.0)
    t.tick()
    feed(t, wall0 + 0.2, [0.2] * 20 + [0.4] * 5 + [0.2] * 30, step)
    t.w.clock.advance(3.0)
    t.now += 3.0
    assert t.tick() == [] and t.keeper.status().paced_until is not None  # paced: 90 s at 1 %
    cfg = t.w.setting.cfg  # `isaacd reload` with max_training_cost = 0.5: 1.0 / 0.5 - 10 < 0, nothing to wait
    t.w.setting.cfg = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"max_training_cost": 0.5})})
    assert [type(e) for e in t.tick()] == [StartEval]


def test_a_cpu_evaluation_is_not_paced_unless_asked_and_a_job_no_longer_training_waits_for_no_measure(tmp_path):
    t = Eval(tmp_path)  # [jobs.eval] on the CPU, no max_training_cost
    t.tick()
    t.finish(0, 20.0)
    t.tick()
    assert [type(e) for e in t.tick()] == [StartEval] and t.events("eval_cost") == []  # at once, nothing measured
    from test_attempt_planner import JOB
    t = Eval(tmp_path / "b", job=JOB + PACED)
    t.tick()
    t.finish(0, 20.0)
    t.tick()
    assert t.keeper.pacer.pending is not None
    # the job completed meanwhile: its remaining checkpoints are evaluated without waiting for points that won't come
    assert [type(e) for e in t.tick(JobState.COMPLETED)] == [StartEval] and t.keeper.pacer.pending is None


def test_a_measure_that_never_comes_is_given_up_after_its_limit(tmp_path):
    from test_attempt_planner import JOB
    t = Eval(tmp_path, job=JOB + PACED)
    t.tick()
    t.finish(0, 20.0)
    t.tick()
    assert t.tick() == []  # waiting for the trainer's points
    t.w.clock.advance(MEASURE_LIMIT + 1)
    t.now += MEASURE_LIMIT + 1
    assert [type(e) for e in t.tick()] == [StartEval] and t.events("eval_cost") == []
    # and the journal says why this evaluation set no pace (once)
    [why] = t.events("eval_cost_unmeasured")
    assert "0 iterations in the 120 s after its end" in why["reason"] and "not held back" in why["reason"]
    t.tick()
    assert len(t.events("eval_cost_unmeasured")) == 1


# ---- end to end: a real `isaacd run`, the built-in trainer and its real evaluation mode ---------------------------
PACED_JOB = """
[[jobs]]
name = "pc"
num_envs = 32
max_iterations = 100000
save_interval = 5
log_root = "logs"
stop_timeout = 10.0
device = "cpu"
spare = false
extra_args = ["agent.num_steps_per_env=8"]
environment = { OMP_NUM_THREADS = "1" }
[jobs.eval]
episodes = 4
num_envs = 4
seed = 7
max_training_cost = 0.05
""" + "".join(f"[jobs.watchdogs.{w}]\nenabled = false\n" for w in (
    "no_progress", "duty_cycle", "loss_stagnation", "reward_plateau", "divergence"))


@pytest.mark.slow
def test_a_real_evaluations_cost_is_measured_from_the_trainers_iterations_and_the_next_waits_for_it(
        tmp_path, supervisor_factory):
    from helpers import step_walls, wait_for, write_config
    sp = supervisor_factory(write_config(tmp_path, PACED_JOB))

    def events(kind: str) -> list[dict]:
        return [e for e in sp.events("pc") if e["event"] == kind]

    measured = wait_for(lambda: events("eval_cost"), 120, interval=0.2, what="an evaluation's cost measured")[0]
    done = [e for e in events("eval_done") if e["time"] <= measured["time"]][-1]
    # what was measured: the trainer's own iterations, as its TensorBoard files hold them (recomputed here from the
    # files and the journal's evaluation times: the net time of the intervals ending during it, against their mean
    # outside every evaluation), and the pause follows from it
    assert measured["budget"] == 0.05
    spans = [(st["time"], min(e["time"] for e in events("eval_done") + events("eval_failed")
                              if e["time"] >= st["time"])) for st in events("eval_started") if st["time"] < done["time"]]
    walls = step_walls(tmp_path / "logs", skip_dir="eval")  # the trainer's own files, not its evaluations'
    # exactly what the keeper measured, its event says: the steps whose intervals it had read (it measures at a tick,
    # having read the files as flushed by then) and its run of the evaluation (its launch and its sight of the exit:
    # not the journal's two times to the millisecond, and an interval at the edge then counts on the other side: a
    # recomputation with the journal's times once took 0.0453 s for its 0.0438, the usual of 4 intervals)
    first, last = measured["steps"]
    start, end = measured["evaluation"]
    assert start == pytest.approx(spans[-1][0], abs=0.5) and end == pytest.approx(spans[-1][1], abs=0.5)
    keeper_spans = spans[:-1] + [(start, end)]
    intervals = [(walls[s], walls[s] - walls[s - 1]) for s in range(first, last + 1)
                 if s in walls and s - 1 in walls and walls[s] > walls[s - 1]]
    assert len(intervals) == last - first + 1  # every interval in its window: none of the trainer's points missed
    outside = [d for e, d in intervals if not any(e - d < b + SETTLE and e > a for a, b in keeper_spans)]
    during = [d for e, d in intervals if start < e <= end + SETTLE]
    assert measured["usual_of"] == len(outside) >= max(3, min(len(during), 200))  # a usual of as many as beside it
    assert measured["usual_iteration_seconds"] == pytest.approx(sum(outside) / len(outside), abs=1e-4)
    assert measured["iterations"] == len(during) >= 1
    assert measured["lost_seconds"] == pytest.approx(sum(during) - sum(outside) / len(outside) * len(during), abs=2e-3)
    assert measured["pause_seconds"] == pytest.approx(
        max(0.0, measured["lost_seconds"] / 0.05 - measured["seconds"]), abs=0.2)
    # the next evaluation starts only once that pause has run from the measured one's end (the journal's times; the
    # pause runs from the keeper's sight of the exit, the tick that logs eval_done). An evaluation on this 2-core box
    # costs the trainer about nothing while the box is idle (its net measure then ~0 and no pause: the keeper tests
    # above prove the wait) and more under the suite's load, where the pause grew to a minute (this test: 10 s alone,
    # 63 s in a fresh-clone CI run). So it watches at most 10 s of a pause: nothing starts in it and the status says
    # when the next will; a pause within that is seen out.
    until = done["time"] + measured["pause_seconds"]
    horizon = min(until, measured["time"] + 10.0)
    while time.time() < horizon:
        assert not [e for e in events("eval_started") if e["time"] > measured["time"]], "started during the pause"
        if until > measured["time"] + 10.0:  # a long pause: the keeper says it
            paced = (sp.job("pc").get("evals") or {}).get("paced_until")
            assert paced is not None and paced == pytest.approx(until, abs=0.5)
        time.sleep(0.2)
    if until <= measured["time"] + 10.0:
        nxt = wait_for(lambda: [e for e in events("eval_started") if e["time"] > measured["time"]], 60,
                       interval=0.2, what="the next evaluation")[0]
        assert nxt["time"] >= until - 0.25
    assert sp.job("pc")["restarts"] == 0
