"""`isaacd reset` in the job machine, edge by edge (pure, on a fake clock; tests/test_job_machine.py's helpers)."""

from __future__ import annotations

import pytest
from test_job_machine import Job, crash, persisted_before

from isaacd.jobs import machine
from isaacd.jobs.effects import Launch, Persist
from isaacd.jobs.messages import Progressed, Reset, Tick
from isaacd.jobs.model import JobModel, JobState, Origin

S = JobState
RESET = Reset(Origin.OPERATOR, "operator reset (isaacd reset): training from scratch")


@pytest.mark.parametrize("rest", [S.STOPPED, S.COMPLETED, S.FAILED])
def test_rest_to_pending_on_reset_saves_a_fresh_launch(rest):
    j = Job(rest, final=True, rollbacks=2, num_envs=128, num_envs_of=256).send(RESET)
    assert j.m.state == S.PENDING and j.m.launch.fresh and not j.m.final
    assert (j.m.rollbacks, j.m.num_envs, j.m.num_envs_of) == (0, None, None)  # a new training: its own bounds
    assert j.events("reset")[0]["from_state"] == rest.value and Persist in map(type, j.effects)
    assert j.reply.startswith("reset: training from scratch") and not isinstance(j.reply, machine.Refused)
    j.send(Tick())
    launch = next(e for e in j.effects if isinstance(e, Launch))
    assert launch.intent.fresh and persisted_before(j.effects, Launch)


@pytest.mark.parametrize("busy", [S.PENDING, S.STARTING, S.RUNNING, S.STOPPING, S.BACKING_OFF])
def test_reset_of_a_job_with_or_about_to_get_a_trainer_is_refused_and_changes_nothing(busy):
    j = Job(busy)
    before = j.m
    j.send(RESET)
    assert isinstance(j.reply, machine.Refused) and "stop it first (`isaacd stop job`)" in j.reply
    assert j.m == before and j.effects == []


def test_reset_of_a_job_with_a_backup_target_is_refused():
    d = machine.decide(JobModel(state=S.STOPPED), RESET, machine.Context("job", 0.0, Job().policy, 10.0, backup=True))
    assert isinstance(d.reply, machine.Refused) and "[jobs.backup]" in d.reply and d.effects == ()


def test_a_crash_after_the_fresh_launch_resumes_normally():
    """Only the reset's own launch is fresh: a restart after it resumes from the new training's checkpoints."""
    j = Job(S.STOPPED).send(RESET).send(Tick()).send(Progressed(3)).send(crash())
    assert j.m.state == S.BACKING_OFF and not j.m.launch.fresh


def test_the_fresh_intent_is_saved_and_read_back():
    m = Job(S.STOPPED).send(RESET).m
    assert JobModel.from_json(m.to_json()).launch.fresh
    assert not JobModel.from_json({"state": "pending", "launch": {"reason": "x"}}).launch.fresh  # older documents
