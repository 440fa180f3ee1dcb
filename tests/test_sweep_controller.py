"""The sweep controller (sweeps/controller.py) without a process: its trials' signals in, the commands for their
state machines out, what it saves before they are acted on, the events each trial's journal gets, and a controller
started again on the same state dir finding the sweep where it was."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from isaacd.config.schema import parse_config
from isaacd.jobs.messages import Start, Stop
from isaacd.jobs.model import JobState, Origin
from isaacd.observations.tensorboard import ScalarPoint
from isaacd.status.signals import JobSignals
from isaacd.sweeps.controller import SweepController
from isaacd.sweeps.record import SweepRecord, TrialRecord
from isaacd.sweeps.sampler import sample, trial_name
from isaacd.sweeps.spec import parse_sweep

SWEEP = '''
[sweep]
name = "lr"
trials = 3
concurrency = 3
seed = 1
[sweep.objective]
tag = "Train/mean_reward"
smooth = 2
[sweep.scheduler]
rungs = [10]
reduction_factor = 3
[sweep.space]
"agent.algorithm.learning_rate" = { loguniform = [1e-4, 1e-2] }
[job]
max_iterations = 30
gpu_memory = "1 GB"
'''
CFG = parse_config('[[jobs]]\nname = "x"\n', "t.toml", Path("/tmp")).jobs[0]


class World:
    def __init__(self, tmp_path: Path):
        self.state_dir = tmp_path / "state"
        self.said: list[tuple[str, str, dict[str, Any]]] = []
        self.ctl = self.controller()
        spec = parse_sweep(SWEEP, "lr.toml", tmp_path)
        values = sample(spec.space, spec.trials, spec.seed)
        self.rec = SweepRecord("lr", "alice", "lr.toml", SWEEP, str(tmp_path), 1.7e9,
                               [TrialRecord(n, trial_name("lr", n, 3), values[n - 1]) for n in (1, 2, 3)])
        self.ctl.submitted(self.rec)
        self.now = 100.0

    def controller(self) -> SweepController:
        return SweepController(self.state_dir, lambda job, event, **f: self.said.append((job, event, f)))

    def tick(self, *signals: JobSignals) -> list[tuple[str, Any]]:
        self.now += 1.0
        return self.ctl.tick(self.now, signals)


def sig(n: int, state: JobState, iteration: int | None = None, rewards: tuple[float, ...] = ()) -> JobSignals:
    points = tuple(ScalarPoint(step, "Train/mean_reward", r, 0.0)
                   for step, r in zip(range((iteration or 0) - len(rewards) + 1, (iteration or 0) + 1), rewards))
    return JobSignals(name=f"lr-t{n:03d}", cfg=CFG, alive=state == JobState.RUNNING, attempt=1,
                      attempt_started_at=0.0, first_step=0, iteration=iteration, last_progress_time=0.0,
                      new_points=points, state=state)


def test_pending_trials_are_launched_up_to_concurrency_and_saved_before(tmp_path: Path):
    w = World(tmp_path)
    assert w.ctl.snapshot()[0].counts()["pending"] == 3  # shown from the submit on, before any tick
    out = w.tick(*(sig(n, JobState.STOPPED) for n in (1, 2, 3)))
    assert [(job, type(c).__name__, c.origin) for job, c in out] == [
        ("lr-t001", "Start", Origin.SWEEP), ("lr-t002", "Start", Origin.SWEEP), ("lr-t003", "Start", Origin.SWEEP)]
    saved = w.controller().record("lr")
    assert saved is not None and all(t.launched for t in saved.trials)  # on disk before the Starts are acted on
    assert [e for _, e, _ in w.said] == ["trial_launched"] * 3


def test_at_a_rung_the_top_third_goes_on_the_rest_pause_with_a_save_and_a_restart_finds_it_so(tmp_path: Path):
    w = World(tmp_path)
    w.tick(*(sig(n, JobState.STOPPED) for n in (1, 2, 3)))
    out = w.tick(sig(1, JobState.RUNNING, 10, (1.0, 1.0)), sig(2, JobState.RUNNING, 10, (3.0, 3.0)),
                 sig(3, JobState.RUNNING, 10, (2.0, 2.0)))
    assert [(job, type(c)) for job, c in out] == [("lr-t001", Stop), ("lr-t003", Stop)]
    assert all(isinstance(c, Stop) and c.final and "paused at iteration 10" in c.reason for _, c in out)
    paused = {job: f for job, e, f in w.said if e == "trial_paused"}
    assert paused["lr-t001"]["rank"] == 3 and paused["lr-t001"]["of"] == 3 and paused["lr-t001"]["cut"] == 3.0
    assert [(job, e) for job, e, _ in w.said if e == "trial_continued"] == [("lr-t002", "trial_continued")]
    # a supervisor killed here: the new one's controller has the rung values, the pauses and the passed rung
    again = w.controller().record("lr")
    assert again is not None
    assert [(t.rung_values, t.paused, t.passed) for t in again.trials] == [([1.0], True, 0), ([3.0], False, 1),
                                                                           ([2.0], True, 0)]
    status = w.ctl.snapshot()[0]
    assert [t.job for t in status.trials] == ["lr-t002", "lr-t003", "lr-t001"]  # best first
    assert status.best == 2 and status.counts()["paused"] == 2


def test_the_sweep_is_done_when_nothing_runs_and_names_its_best(tmp_path: Path):
    w = World(tmp_path)
    w.tick(*(sig(n, JobState.STOPPED) for n in (1, 2, 3)))
    w.tick(sig(1, JobState.RUNNING, 10, (1.0,)), sig(2, JobState.RUNNING, 10, (3.0,)),
           sig(3, JobState.RUNNING, 10, (2.0,)))
    out = w.tick(sig(1, JobState.STOPPING, 11), sig(2, JobState.COMPLETED, 30, (5.0, 6.0)),
                 sig(3, JobState.STOPPED, 11))
    assert out == []
    rec = w.ctl.record("lr")
    assert rec is not None and rec.state == "done" and rec.best == 2 and rec.best_value == 5.5
    assert rec.events[-1]["event"] == "sweep_done" and rec.events[-1]["best_job"] == "lr-t002"
    assert w.ctl.snapshot()[0].state == "done"


def test_a_paused_trial_ranking_later_is_promoted_with_a_start(tmp_path: Path):
    w = World(tmp_path)
    w.tick(*(sig(n, JobState.STOPPED) for n in (1, 2, 3)))
    # trial 1 arrives alone: continues; trial 2 arrives worse: paused (rank 2 of 2, top 1)
    w.tick(sig(1, JobState.RUNNING, 10, (5.0,)), sig(2, JobState.RUNNING, 3), sig(3, JobState.RUNNING, 3))
    w.tick(sig(1, JobState.RUNNING, 12), sig(2, JobState.RUNNING, 10, (4.0,)), sig(3, JobState.RUNNING, 5))
    assert w.ctl.record("lr").trial(2).paused  # type: ignore[union-attr]
    # trial 3 fails before its rung (it counts the worst there): with 3 at the rung its top 1/3 is 1 trial, so
    # trial 2 (rank 2) stays paused; trial 1 completes: nothing runs and nothing is promotable, the sweep is done
    out = w.tick(sig(1, JobState.COMPLETED, 30, (6.0,)), sig(2, JobState.STOPPED, 11), sig(3, JobState.FAILED, 5))
    assert out == [] and w.ctl.record("lr").state == "done"  # type: ignore[union-attr]


def test_a_tag_the_trainer_never_writes_is_said_naming_the_tags_it_does(tmp_path: Path):
    w = World(tmp_path)
    w.tick(*(sig(n, JobState.STOPPED) for n in (1, 2, 3)))
    other = JobSignals(name="lr-t001", cfg=CFG, alive=True, attempt=1, attempt_started_at=0.0, first_step=0,
                       iteration=10, last_progress_time=0.0, new_points=(ScalarPoint(9, "Loss/value", 1.0, 0.0),),
                       state=JobState.RUNNING)
    w.tick(other, sig(2, JobState.RUNNING, 5), sig(3, JobState.RUNNING, 5))
    missing = [f for job, e, f in w.said if e == "sweep_objective_missing"]
    assert missing and missing[0]["tags"] == ["Loss/value"] and missing[0]["tag"] == "Train/mean_reward"
    assert math.isnan(w.ctl.record("lr").trial(1).rung_values[0])  # type: ignore[union-attr]


def test_cancel_stops_the_running_trials_with_a_save_at_the_next_tick(tmp_path: Path):
    w = World(tmp_path)
    w.tick(*(sig(n, JobState.STOPPED) for n in (1, 2, 3)))
    w.tick(*(sig(n, JobState.RUNNING, 3) for n in (1, 2, 3)))
    said = w.ctl.cancel("lr")
    assert "3 running trial(s) stop with a save" in said
    out = w.tick(*(sig(n, JobState.RUNNING, 4) for n in (1, 2, 3)))
    assert [(job, type(c)) for job, c in out] == [(f"lr-t00{n}", Stop) for n in (1, 2, 3)]
    assert w.tick(*(sig(n, JobState.STOPPING, 4) for n in (1, 2, 3))) == []  # nothing more, nothing launched
    assert w.controller().record("lr").state == "cancelled"  # type: ignore[union-attr]


def test_a_paused_trial_started_by_hand_goes_on_as_if_promoted(tmp_path: Path):
    w = World(tmp_path)
    w.tick(*(sig(n, JobState.STOPPED) for n in (1, 2, 3)))
    w.tick(sig(1, JobState.RUNNING, 10, (1.0,)), sig(2, JobState.RUNNING, 10, (3.0,)),
           sig(3, JobState.RUNNING, 10, (2.0,)))
    out = w.tick(sig(1, JobState.QUEUED, 11), sig(2, JobState.RUNNING, 12), sig(3, JobState.STOPPED, 11))
    assert out == []  # never paused again at its rung
    t1 = w.ctl.record("lr").trial(1)  # type: ignore[union-attr]
    assert not t1.paused and t1.passed == 1
    assert [job for job, e, _ in w.said if e == "trial_resumed"] == ["lr-t001"]


def test_a_promotion_is_a_start_of_the_paused_trial(tmp_path: Path):
    w = World(tmp_path)
    w.tick(*(sig(n, JobState.STOPPED) for n in (1, 2, 3)))
    # trial 1 arrives first and alone (continues), then trial 2 worse (paused, rank 2 of 2)
    w.tick(sig(1, JobState.RUNNING, 10, (2.0,)), sig(2, JobState.RUNNING, 3), sig(3, JobState.RUNNING, 3))
    w.tick(sig(1, JobState.RUNNING, 12), sig(2, JobState.RUNNING, 10, (1.5,)), sig(3, JobState.RUNNING, 5))
    # trial 3 arrives worst: with 3 at the rung the top is 1 (trial 1); trial 3 paused. Trial 1 then fails: the
    # top of the rung is trial 2 now (a failed trial ranks last), and a slot is free: trial 2 is promoted
    w.tick(sig(1, JobState.RUNNING, 13), sig(2, JobState.STOPPING, 11), sig(3, JobState.RUNNING, 10, (1.0,)))
    out = w.tick(sig(1, JobState.FAILED, 14), sig(2, JobState.STOPPED, 11), sig(3, JobState.STOPPING, 11))
    assert [(job, type(c), c.origin) for job, c in out] == [("lr-t002", Start, Origin.SWEEP)]
    promoted = [f for job, e, f in w.said if e == "trial_promoted"]
    assert promoted == [{"sweep": "lr", "trial": 2, "rung": 0, "milestone": 10, "rank": 1, "of": 3, "cut": 1.5}]


def test_gpu_time_counts_a_gpu_memory_trial_by_its_share_of_its_gpu():
    from types import SimpleNamespace

    from isaacd.scheduling.room import Gpu
    from isaacd.sweeps.controller import gpus_held
    gib = 2**30
    placed = SimpleNamespace(queue=SimpleNamespace(placement=(3,), request=SimpleNamespace(memory_bytes=14 * gib)))
    assert gpus_held(placed, {3: Gpu(3, 140 * gib)}) == 0.1  # type: ignore[arg-type]
    assert gpus_held(placed, {}) == 1.0  # type: ignore[arg-type]  (no reading of the GPU: counted whole)
    whole = SimpleNamespace(queue=SimpleNamespace(placement=(0, 1), request=SimpleNamespace(memory_bytes=None)))
    assert gpus_held(whole, {0: Gpu(0, 80 * gib), 1: Gpu(1, 80 * gib)}) == 2.0  # type: ignore[arg-type]
    assert gpus_held(SimpleNamespace(queue=None), {}) == 1.0  # type: ignore[arg-type]


def test_gpu_time_counts_a_trial_on_a_mig_instance_as_the_instances_share_of_its_gpu():
    from types import SimpleNamespace

    from isaacd.gpu import GpuSampler, ManualClock, ScriptedSource
    from isaacd.sweeps.controller import gpu_places, gpus_held

    # an H200 in MIG mode as NVML reads it: a 1g.18gb instance (an eighth of its memory) and a 3g.71gb (half)
    clock = ManualClock(1_700_000_000.0)
    sampler = GpuSampler(ScriptedSource({"gpus": [
        {"index": 0, "model": "NVIDIA H200"},
        {"index": 0, "mig": True, "parent": 0, "model": "NVIDIA H200 MIG 1g.18gb"},
        {"index": 1, "mig": True, "parent": 0, "model": "NVIDIA H200 MIG 3g.71gb"}],
        "defaults": {"memory_total_bytes": 143771 * 2**20}}, clock=clock), clock=clock)
    sampler.poll_fast()
    where = gpu_places(sampler.snapshot())

    def trial(place: str) -> SimpleNamespace:  # 8 GiB asked: the instance is held whole all the same
        ask = SimpleNamespace(memory_bytes=8 * 2**30)
        return SimpleNamespace(queue=SimpleNamespace(placement=(place,), request=ask))

    assert gpus_held(trial("0:0"), where) == 0.125  # type: ignore[arg-type]  (was 1: a whole GPU-second a second)
    assert gpus_held(trial("0:1"), where) == 0.5  # type: ignore[arg-type]
    assert gpus_held(trial("0:9"), where) == 1.0  # type: ignore[arg-type]  (an instance not read: counted whole)


def test_a_sweeps_concurrency_past_the_users_quota_is_refused_naming_the_concurrency_that_fits(tmp_path: Path):
    from isaacd.config.access import Limits
    from isaacd.sweeps.spec import trial_job
    from isaacd.sweeps.submit import concurrency_over_quota
    spec = parse_sweep(SWEEP, "lr.toml", tmp_path)  # trials of 1 GB each
    trial = trial_job(spec, 1, sample(spec.space, spec.trials, spec.seed)[0])
    assert concurrency_over_quota(3, trial, Limits(gpu_memory="2GB")) == (
        '3 trials at once of "1 GB" (0.9 GiB) each is more than your quota of 2GB ([access] gpu_memory): set '
        "concurrency = 2 or fewer")
    assert concurrency_over_quota(2, trial, Limits(gpu_memory="2GB")) is None
    assert concurrency_over_quota(3, trial, Limits()) is None
    whole = trial.model_copy(update={"gpu_memory": None, "gpus": 1})
    assert "set concurrency = 2 or fewer" in (concurrency_over_quota(4, whole, Limits(gpus=2)) or "")


def test_a_sweeps_concurrency_on_a_host_with_mig_counts_the_instances_its_trials_would_hold(tmp_path: Path):
    from test_scheduler_mig import sampler

    from isaacd.config.access import Limits
    from isaacd.sweeps.spec import trial_job
    from isaacd.sweeps.submit import concurrency_over_quota

    spec = parse_sweep(SWEEP.replace('"1 GB"', '"8GiB"'), "lr.toml", tmp_path)
    trial = trial_job(spec, 1, sample(spec.space, spec.trials, spec.seed)[0])
    # GPU 0 an 80 GB H100 in MIG mode (1g.10gb x2: 9.96 GiB each, 3g.40gb: 39.8 GiB) and nothing else: an 8 GiB
    # trial holds an instance whole, as the queue counts it against gpu_memory; three at once hold at least 59.7 GiB
    only_mig = sampler(gpu1=False).snapshot()
    assert concurrency_over_quota(3, trial, Limits(gpu_memory="24GiB"), only_mig) == (
        '3 trials at once of "8GiB" each is more than your quota of 24GiB ([access] gpu_memory) (on this host 3 of '
        "them would each hold a MIG instance whole: at least 59.7 GiB in all): set concurrency = 2 or fewer")
    assert concurrency_over_quota(2, trial, Limits(gpu_memory="24GiB"), only_mig) is None
    assert concurrency_over_quota(3, trial, Limits(gpu_memory="24GiB")) is None  # no inventory: the asks, as before
    # with GPU 1 not in MIG mode, the five go there at their asks (40 GiB): the queue may run them within the quota
    assert concurrency_over_quota(5, trial, Limits(gpu_memory="40GiB"), sampler().snapshot()) is None
    assert "set concurrency = 5 or fewer" in (concurrency_over_quota(6, trial, Limits(gpu_memory="40GiB"),
                                                                     sampler().snapshot()) or "")


def test_nothing_is_decided_until_every_trial_not_yet_launched_is_a_job(tmp_path: Path):
    w = World(tmp_path)  # the record saved, the submit's reload still to come: no trial's job exists yet
    assert w.tick() == [] and w.tick(sig(1, JobState.STOPPED)) == []
    assert not any(t.launched for t in w.ctl.record("lr").trials)  # type: ignore[union-attr]
    assert len(w.tick(*(sig(n, JobState.STOPPED) for n in (1, 2, 3)))) == 3  # all there: launched


def test_a_launch_saved_but_never_carried_out_is_sent_again_and_an_operators_stop_is_not(tmp_path: Path):
    w = World(tmp_path)
    w.tick(*(replace_attempt(sig(n, JobState.STOPPED), 0) for n in (1, 2, 3)))  # launched (saved; Starts returned)
    # the supervisor died before the Starts reached the jobs: a new one finds them stopped, never attempted
    w.ctl = w.controller()
    never = [replace_attempt(sig(n, JobState.STOPPED), 0) for n in (1, 2, 3)]
    out = w.tick(*never)
    assert [(job, type(c)) for job, c in out] == [(f"lr-t00{n}", Start) for n in (1, 2, 3)]
    # trial 1 trained (attempt 1) and was stopped by hand: cancelled, not started again
    out = w.tick(replace_attempt(sig(1, JobState.STOPPED), 1), *(sig(n, JobState.RUNNING, 2) for n in (2, 3)))
    assert out == [] and w.ctl.snapshot()[0].trial(1).state == "cancelled"  # type: ignore[union-attr]


def replace_attempt(s: JobSignals, attempt: int) -> JobSignals:
    from dataclasses import replace
    return replace(s, attempt=attempt)
