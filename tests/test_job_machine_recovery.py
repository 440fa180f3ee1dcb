"""The machine's recovery edges, on a fake clock: what a supervisor start found (attempt/recovery.py) reaches
the machine as a message, and the signal, kill or launch it asks for comes back as an effect for the runner's
one effect interpreter. Named after the edges, as tests/test_job_machine.py."""

from __future__ import annotations

import signal

from isaacd.jobs.effects import Event, Kill, Launch, Persist, Signal
from isaacd.jobs.messages import Adopted, LaunchUnfinished, Stop, Tick
from isaacd.jobs.model import JobState, LaunchIntent, Origin

from test_job_machine import Job

S = JobState


def kinds(j: Job) -> list[type]:
    return [type(e) for e in j.effects]


def stopping() -> Job:
    j = Job().running().send(Stop(Origin.OPERATOR, "operator stop"))
    assert j.m.state == S.STOPPING
    return j


def test_running_adopted_asks_for_nothing():
    j = Job().running().send(Adopted())
    assert j.m.state == S.RUNNING and j.effects == []


def test_starting_adopted_asks_for_nothing():
    j = Job().send(Tick()).send(Adopted())
    assert j.m.state == S.STARTING and j.effects == []


def test_stopping_adopted_sends_sigint_again_and_says_the_stop_resumed():
    j = stopping()
    before = j.m
    j.send(Adopted())
    assert j.m == before  # the stop and its deadline are the saved ones: nothing new to save
    assert j.effects[0] == Signal(int(signal.SIGINT)) and Persist not in kinds(j)
    (resumed,) = j.events("stop_resumed")
    assert resumed["reason"] == "operator stop" and resumed["then"] == "stop"


def test_stopping_adopted_after_sigkill_kills_again():
    j = stopping().at(11).send(Tick())  # past the grace: SIGKILL decided and saved
    assert j.m.stop is not None and j.m.stop.killed
    j.send(Adopted())
    assert kinds(j) == [Kill, Event] and j.events("stop_resumed")


def test_stopping_adopted_keeps_the_old_deadline():
    j = stopping().at(4).send(Adopted()).at(5).send(Tick())
    assert Kill not in kinds(j)
    j.at(1.5).send(Tick())  # 10 s after the stop began, not 10 s after the adoption
    assert Kill in kinds(j)


def test_starting_launch_unfinished_replays_the_saved_launch_and_says_so():
    j = Job().send(Tick())
    intent = j.m.launch
    j.send(LaunchUnfinished())
    assert j.m.state == S.STARTING and j.m.restarts == 0  # a launch we did not finish is no crash
    assert kinds(j) == [Event, Launch] and j.effects[1] == Launch(intent)
    assert j.events("launch_replayed")[0]["reason"] == intent.reason


def test_starting_launch_unfinished_after_a_fetch_launches_without_a_replay_event():
    j = Job(S.STARTING, launch=LaunchIntent("rollback", Origin.WATCHDOG, before_iteration=40))
    j.send(LaunchUnfinished(replayed=False))
    assert j.effects == [Launch(LaunchIntent("rollback", Origin.WATCHDOG, before_iteration=40))]


def test_launch_unfinished_outside_starting_is_ignored():
    for j in (Job(), Job().running(), stopping(), Job(S.STOPPED)):
        before = j.m
        j.send(LaunchUnfinished())
        assert j.m == before and j.effects == []


def test_stopping_with_a_start_asked_during_it_adopted_stops_then_starts():
    from isaacd.jobs.messages import Exited, Start
    from isaacd.jobs.model import JobModel

    j = stopping().send(Start(Origin.OPERATOR, "operator start"))
    j.m = JobModel.from_json(j.m.to_json())  # what a new supervisor reads back
    j.send(Adopted())
    assert j.effects[0] == Signal(int(signal.SIGINT)) and j.events("stop_resumed")[0]["then"] == "start"
    j.send(Exited("exited with code 0", "exit_code", success=True))
    assert (j.m.state, j.m.restarts) == (S.PENDING, 0)
