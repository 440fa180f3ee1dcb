"""The machine's edges for a reload's return of a job, a launch that waits for the backup's checkpoint, what a
supervisor start found (`recovered`), which jobs a shutdown stops, and a model read back from disk: each a
decision that used to be made outside jobs/ (issue 30). Named after the edges, as tests/test_job_machine.py."""

from __future__ import annotations

import pytest

from isaacd.jobs.effects import Event, Launch, Persist, Signal
from isaacd.jobs.machine import FETCH_STOPPED, LOST_WHILE_DOWN, Refused, recovered
from isaacd.jobs.messages import (Adopted, Exited, Found, LaunchUnfinished, LaunchWaited, Readded, ReasonClass,
                                  Start, Stop, Tick)
from isaacd.jobs.model import JobModel, JobState, LaunchIntent, Origin, StopIntent, Then, legacy_state, rebased
from isaacd.jobs.policy import stopped_at_shutdown

from test_job_machine import Job

S = JobState
REMOVED = Stop(Origin.CONFIG, "removed from config", final=False)


def kinds(j: Job) -> list[type]:
    return [type(e) for e in j.effects]


# ---- Readded: a reload put back a job an earlier reload removed -------------------------------------------
def test_stopping_for_a_removal_readded_turns_the_stop_into_a_restart():
    j = Job().running().send(REMOVED).send(Readded())
    assert j.m.state == S.STOPPING and j.m.stop.then == Then.RESTART and j.m.stop.reason == "back in the config"
    assert j.reply == "restarting" and j.events("stop_changed") and Persist in kinds(j)


def test_stopped_by_a_removal_readded_starts_again_as_pending():
    j = Job().running().send(REMOVED).send(Exited("exited with code 0", "exit_code", success=True))
    assert j.m.state == S.STOPPED and not j.m.final
    j.send(Readded())
    assert j.m.state == S.PENDING and j.m.launch.origin == Origin.CONFIG and j.m.restarts == 0
    assert j.reply == "starting"


def test_stopping_for_an_operator_stop_readded_stays_a_stop():
    j = Job().running().send(Stop(Origin.OPERATOR, "operator stop")).send(Readded())
    assert j.m.state == S.STOPPING and j.m.stop.then == Then.STOP and j.reply == "already stopping"


@pytest.mark.parametrize("state", [S.PENDING, S.BACKING_OFF, S.COMPLETED, S.FAILED])
def test_readded_at_rest_or_waiting_asks_for_nothing(state: JobState):
    j = Job(state)
    before = j.m
    j.send(Readded())
    assert j.m == before and j.effects == [] and j.reply is None


def test_running_readded_asks_for_nothing():
    j = Job().running()
    before = j.m
    j.send(Readded())
    assert j.m == before and j.effects == [] and not isinstance(j.reply, Refused)


# ---- LaunchWaited: a launch waiting for the backup's checkpoint ----------------------------------------
def test_starting_launch_waited_launches_again_without_a_replay_event():
    j = Job(S.STARTING, launch=LaunchIntent("rollback", Origin.WATCHDOG, before_iteration=40))
    j.send(LaunchWaited())
    assert j.effects == [Launch(LaunchIntent("rollback", Origin.WATCHDOG, before_iteration=40))]


def test_starting_launch_waited_with_a_trainer_asks_for_nothing():
    j = Job(S.STARTING)
    j.send(LaunchWaited(trainer=True))
    assert j.effects == []


def test_stopping_launch_waited_ends_the_wait_as_an_exit_and_comes_to_rest():
    j = Job().send(Tick()).send(Stop(Origin.OPERATOR, "operator stop")).send(LaunchWaited())
    assert j.m.state == S.STOPPED and j.m.final and j.m.reason == "operator stop" and j.m.restarts == 0


def test_stopping_for_a_restart_launch_waited_goes_again_at_once():
    from isaacd.jobs.messages import Restart

    j = Job().send(Tick()).send(Restart(Origin.OPERATOR, "operator restart")).send(LaunchWaited())
    assert j.m.state == S.BACKING_OFF and j.m.backoff_until == j.now and j.m.restarts == 1


def test_launch_waited_is_the_same_as_the_exit_the_runner_used_to_build():
    stop = StopIntent("operator stop", Origin.OPERATOR, Then.STOP, deadline=2000.0)
    a = Job(S.STOPPING, stop=stop).send(LaunchWaited())
    b = Job(S.STOPPING, stop=stop).send(Exited(FETCH_STOPPED, ReasonClass.OPERATOR, success=False))
    assert (a.m, a.effects) == (b.m, b.effects)


@pytest.mark.parametrize("state", [S.PENDING, S.RUNNING, S.BACKING_OFF, S.STOPPED])
def test_launch_waited_elsewhere_asks_for_nothing(state: JobState):
    j = Job(state)
    before = j.m
    j.send(LaunchWaited())
    assert j.m == before and j.effects == []


# ---- recovered: what a supervisor start's findings mean ------------------------------------------------
@pytest.mark.parametrize("state", [S.STARTING, S.RUNNING, S.STOPPING])
def test_active_with_a_live_trainer_found_is_adopted(state: JobState):
    assert recovered(JobModel(state=state), Found(trainer_alive=True, spawned=True, attempted=True)) == Adopted()


def test_starting_with_no_trainer_spawned_found_is_a_launch_unfinished():
    assert recovered(JobModel(state=S.STARTING), Found(attempted=True)) == LaunchUnfinished()
    assert recovered(JobModel(state=S.STARTING), Found()) == LaunchUnfinished()  # not even its attempt saved


@pytest.mark.parametrize("state,spawned", [(S.STARTING, True), (S.RUNNING, True), (S.RUNNING, False),
                                           (S.STOPPING, True)])
def test_active_whose_trainer_is_gone_found_is_a_lost_exit(state: JobState, spawned: bool):
    msg = recovered(JobModel(state=state), Found(spawned=spawned, attempted=True))
    assert msg == Exited(LOST_WHILE_DOWN, ReasonClass.LOST, success=False)


def test_running_lost_found_then_restarts_as_a_crash():
    j = Job().running()
    j.send(recovered(j.m, Found(spawned=True, attempted=True)))
    assert j.m.state == S.BACKING_OFF and dict(j.m.restarts_by_reason) == {"lost": 1}


def test_stopped_not_final_found_resumes():
    assert recovered(JobModel(state=S.STOPPED), Found(attempted=True)) == \
        Start(Origin.RECOVERY, "resuming after a supervisor restart")


@pytest.mark.parametrize("state", [S.STOPPED, S.COMPLETED, S.FAILED])
def test_at_rest_and_final_found_stays(state: JobState):
    assert recovered(JobModel(state=state, final=True), Found(attempted=True)) is None


def test_pending_never_started_with_autostart_off_found_is_stopped():
    assert recovered(JobModel(), Found(autostart=False)) == Stop(Origin.CONFIG, "autostart = false")


def test_pending_with_autostart_on_or_an_attempt_found_waits_for_its_tick():
    assert recovered(JobModel(), Found()) is None
    assert recovered(JobModel(), Found(autostart=False, attempted=True)) is None


def test_backing_off_found_waits_for_its_deadline():
    assert recovered(JobModel(state=S.BACKING_OFF, backoff_until=5.0), Found(attempted=True)) is None


def test_stopping_found_alive_then_decided_resends_sigint():
    j = Job().running().send(Stop(Origin.OPERATOR, "operator stop"))
    j.send(recovered(j.m, Found(trainer_alive=True, spawned=True, attempted=True)))
    assert j.effects[0] == Signal(2) and j.events("stop_resumed")


# ---- which jobs a shutdown stops -------------------------------------------------------------------------
@pytest.mark.parametrize("state", [S.STARTING, S.RUNNING, S.STOPPING])
def test_shutdown_stops_a_process_runtime_trainer(state: JobState):
    assert stopped_at_shutdown("process", state)


@pytest.mark.parametrize("runtime", ["podman", "systemd", "ray"])
def test_shutdown_leaves_a_container_or_ray_trainer_running(runtime: str):
    assert not stopped_at_shutdown(runtime, S.RUNNING)


@pytest.mark.parametrize("state", [S.PENDING, S.BACKING_OFF, S.STOPPED, S.COMPLETED, S.FAILED])
def test_shutdown_has_nothing_to_stop_without_a_trainer(state: JobState):
    assert not stopped_at_shutdown("process", state)


# ---- a model read back from disk --------------------------------------------------------------------------
def test_legacy_document_with_an_open_traced_attempt_is_running_to_adopt():
    m = legacy_state(JobModel(restarts=2), True, "stopped", "old stop")
    assert m.state == S.RUNNING and m.reason == "adopting" and m.restarts == 2


@pytest.mark.parametrize("final", ["stopped", "completed", "failed"])
def test_legacy_document_at_rest_is_at_rest_and_final(final: str):
    m = legacy_state(JobModel(), False, final, "why")
    assert m.state == JobState(final) and m.final and m.reason == "why"


def test_legacy_document_without_a_resting_state_is_pending():
    assert legacy_state(JobModel(), False, None, None) == JobModel()


def test_model_from_another_boot_waits_its_backoff_and_grace_again_in_full():
    stop = StopIntent("operator stop", Origin.OPERATOR, Then.STOP, deadline=9e9)
    m = rebased(JobModel(state=S.STOPPING, stop=stop, backoff_until=9e9, backoff_seconds=4.0,
                         restart_times=(1.0, 2.0)), now=100.0, stop_timeout=10.0)
    assert m.backoff_until == 104.0 and m.stop.deadline == 110.0 and m.restart_times == (100.0, 100.0)
    assert m.state == S.STOPPING  # the state is the saved decision's, unchanged


def test_effects_of_launch_waited_name_no_event_of_their_own():
    j = Job(S.STARTING).send(LaunchWaited())
    assert Event not in kinds(j)
