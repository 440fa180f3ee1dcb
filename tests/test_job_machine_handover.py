"""Issue 42: a stop that hands the GPUs over ends at the shim's save, not at the trainer's own exit (pure, on a fake
clock; tests/test_job_machine.py's helpers). The edge: stopping (a preemption, a sweep's stop) + StopSaved -> Kill,
saved first; the exit that follows is the stop's, never a crash or a restart."""

from __future__ import annotations

import pytest
from test_attempt_observer import World
from test_job_machine import Job, crash, persisted_before, queued, trip

from isaacd.jobs.effects import Kill, Signal
from isaacd.jobs.messages import Exited, Placed, Preempt, Progressed, Start, Stop, StopSaved, Tick
from isaacd.jobs.model import JobModel, JobState, Origin, Then
from isaacd.runtimes.base import ExitStatus

S = JobState
SAVED = StopSaved(48, "/logs/a/model_48.pt", "the logger wandb.sdk.WandbSummaryWriter finishes in the script's cleanup")
KILLED = Exited("killed by signal 9 (SIGKILL)", "signal", success=False, ran_seconds=30.0)


def preempting() -> Job:
    return queued().send(Placed((0,), "fits")).send(Progressed(5)).send(Preempt("urgent", "preempted by urgent"))


def test_stopping_for_a_preemption_to_the_kill_once_the_shim_confirms_the_save():
    j = preempting()
    j.at(0.3).send(SAVED)
    assert j.m.state == S.STOPPING and j.m.stop.killed and persisted_before(j.effects, Kill)
    assert j.events("stop_saved_kill")[0]["checkpoint"] == "/logs/a/model_48.pt"
    assert j.events("stop_saved_kill")[0]["cleanup"].startswith("the logger wandb")
    assert JobModel.from_json(j.m.to_json()).stop.killed  # a new supervisor finishes it with a SIGKILL, not a SIGINT
    # the kill's exit is the preemption's: back in the queue at its old place, its GPU given back, nothing counted
    submitted = j.m.submitted_at
    j.at(0.05).send(KILLED)
    assert (j.m.state, j.m.placement, j.m.submitted_at) == (S.QUEUED, (), submitted)
    assert j.m.restarts == 0 and not j.m.restarts_by_reason and j.m.preemptions == 1 and j.events("requeued")


def test_stopping_for_a_preemption_the_save_said_again_kills_once():
    j = preempting().send(SAVED)
    j.send(SAVED)  # a new supervisor's adopted trainer reports it again
    assert j.effects == [] and j.m.stop.killed
    j.at(20).send(Tick())  # its stop_timeout passes before the exit is seen: no second SIGKILL, no stop_timeout
    assert j.effects == []


@pytest.mark.parametrize("then", ["stop", "start"])
def test_stopping_for_a_sweeps_pause_to_the_kill_once_saved_then_rests_stopped_or_starts_again(then):
    j = Job().running().send(Stop(Origin.SWEEP, "sweep lr: paused at iteration 4 (rank 3 of 4)"))
    if then == "start":  # ASHA promoted it while its pause saved: it starts again from that save
        j.send(Start(Origin.SWEEP, "sweep lr: promoted past iteration 4"))
    j.send(SAVED)
    assert Kill() in j.effects and persisted_before(j.effects, Kill)
    j.send(KILLED)
    if then == "stop":
        assert j.m.state == S.STOPPED and j.m.final and j.m.restarts == 0
    else:
        assert j.m.state in (S.PENDING, S.STARTING) and j.m.launch.origin == Origin.SWEEP and j.m.restarts == 0


@pytest.mark.parametrize("stop", [Stop(Origin.OPERATOR, "operator stop (isaacd stop)"),
                                  Stop(Origin.SHUTDOWN, "supervisor shutdown", final=False),
                                  Stop(Origin.CONFIG, "removed from the config", final=False)])
def test_stopping_for_an_operator_shutdown_or_removal_keeps_the_scripts_cleanup_no_kill(stop):
    j = Job().running().send(stop).send(SAVED)
    assert j.effects == [] and not j.m.stop.killed
    j.send(Exited("exited with code 0", "exit_code", success=True))
    assert j.m.state == S.STOPPED


def test_stopping_an_operator_stop_during_a_preemption_keeps_the_cleanup():
    j = preempting().send(Stop(Origin.OPERATOR, "operator stop"))
    assert j.m.stop.then == Then.STOP and j.m.stop.origin == Origin.OPERATOR
    assert j.send(SAVED).effects == []


def test_stopping_for_a_watchdog_restart_keeps_the_cleanup_until_it_turns_into_a_preemption():
    j = queued().send(Placed((0,), "fits")).send(Progressed(5)).send(trip("restart"))
    assert j.send(SAVED).effects == []  # a watchdog's restart: not a hand-over
    j.send(Preempt("urgent", "preempted by urgent")).send(SAVED)
    assert Kill() in j.effects
    assert j.send(crash()).m.state == S.QUEUED and j.m.restarts == 0


def test_running_or_already_killed_stop_the_save_changes_nothing():
    assert queued().send(Placed((0,), "fits")).send(Progressed(5)).send(SAVED).effects == []  # no stop asked
    j = preempting().at(11).send(Tick())  # past its stop_timeout before any save: SIGKILLed already
    assert Kill() in j.effects and j.events("stop_timeout")
    assert j.send(SAVED).effects == []


def test_stopping_for_a_preemption_the_sigint_comes_first_then_the_kill():
    j = queued().send(Placed((0,), "fits")).send(Progressed(5))
    j.send(Preempt("urgent", "preempted by urgent"))
    assert any(isinstance(e, Signal) for e in j.effects) and Kill() not in j.effects  # the save is asked for first


# ---- where the StopSaved comes from: the observer, from the shim's `stopped` (attempt/observer.py) ----------------
def test_the_observer_says_a_stops_save_once_while_the_trainer_lives_and_runs_its_cleanup(tmp_path):
    w = World(tmp_path)
    w.trainer()
    ckpt = str(w.run_dir / "model_7.pt")
    w.shim_says({"event": "stop_requested", "signal": "SIGINT"},
                {"event": "stopped", "iteration": 7, "checkpoint": ckpt, "exit_now": False,
                 "cleanup": "ISAACD_SHIM_FAST_EXIT=0"})
    assert w.observe() == [StopSaved(7, ckpt, "ISAACD_SHIM_FAST_EXIT=0")]
    assert w.observe() == []  # said once


@pytest.mark.parametrize("said", [{"exit_now": True}, {"before_first_iteration": True, "checkpoint": None},
                                  {"exit_now": False, "checkpoint": None}])
def test_the_observer_says_no_stop_save_for_a_trainer_that_exits_by_itself_or_saved_nothing(tmp_path, said):
    w = World(tmp_path)
    w.trainer()
    w.shim_says({"event": "stopped", "iteration": 7, "checkpoint": str(w.run_dir / "model_7.pt"), **said})
    assert w.observe() == []


def test_the_observer_says_no_stop_save_for_a_trainer_already_gone_only_its_exit(tmp_path):
    w = World(tmp_path)
    _, t = w.trainer()
    w.shim_says({"event": "stopped", "iteration": 7, "checkpoint": str(w.run_dir / "model_7.pt"), "exit_now": False,
                 "cleanup": "ISAACD_SHIM_FAST_EXIT=0"})
    t.exit = ExitStatus(code=0)  # its cleanup was over before the supervisor looked: nothing to kill
    assert [type(m) for m in w.observe()] == [Exited]
