"""An error no restart can fix (daemon/attempt/config_fault.py) in the job state machine, edge by edge, on a fake clock.

An unknown task, a rejected Hydra override or flag, a missing module or file: the job fails at once with the
trainer's own line and the key to change, no restart is counted, and `isaacd start` launches again after a fix.
"""

from __future__ import annotations

from test_job_machine import Job, crash

from isaacd.jobs.effects import Launch
from isaacd.jobs.messages import Exited, Start, Stop, Tick, TrainerConfigError
from isaacd.jobs.model import JobState, Origin

S = JobState
LINE = "gymnasium.error.NameNotFound: Environment `Isaac-Cartpol-Direct` doesn't exist. Did you mean: " \
       "`Isaac-Cartpole-Direct`?"
FIX = "set `task` in the [[jobs]] table of job to a task this trainer registers"


def config_exit(kind: str = "unknown_task", line: str = LINE, key: str = "task", ran: float = 4.5) -> Exited:
    err = TrainerConfigError(kind, "the trainer does not know the task", line, key, FIX)
    return Exited(f"exited with code 1: {line}", "config_error", success=False, ran_seconds=ran, config_error=err)


def launches(j: Job) -> int:
    return len([e for e in j.effects if isinstance(e, Launch)])


def test_starting_exit_with_an_unknown_task_fails_at_once_spending_no_restart():
    j = Job().send(Tick()).send(config_exit())
    assert (j.m.state, j.m.final) == (S.FAILED, True)
    assert j.m.restarts == 0 and j.m.restart_times == () and dict(j.m.restarts_by_reason) == {}
    assert launches(j) == 0
    line = j.m.reason
    assert "\n" not in line and line.startswith("the trainer does not know the task (gymnasium.error.NameNotFound")
    assert f"Fix: {FIX}; then `isaacd reload` and `isaacd start job`" in line
    assert j.events("trainer_config_error") == [{"kind": "unknown_task", "line": LINE, "key": "task", "fix": FIX}]
    assert j.events("failed") == [{"reason": line}]


def test_running_exit_with_a_missing_module_fails_too():
    """A module imported late (a logger, a callback) is no more there on the next attempt."""
    j = Job().running().send(config_exit("missing_module", "ModuleNotFoundError: No module named 'x'", "launcher",
                                         ran=600))
    assert j.m.state == S.FAILED and j.m.restarts == 0


def test_config_error_failure_is_not_relaunched_by_time_passing():
    j = Job().send(Tick()).send(config_exit())
    j.at(3600).send(Tick())
    assert j.m.state == S.FAILED and launches(j) == 0


def test_failed_by_a_config_error_start_launches_again():
    j = Job().send(Tick()).send(config_exit()).send(Start(Origin.OPERATOR, "operator start"))
    assert j.m.state == S.PENDING and j.m.final is False
    j.send(Tick())
    assert j.m.state == S.STARTING and launches(j) == 1


def test_config_error_exit_during_an_operator_stop_rests_stopped():
    """The stop someone asked for decides: the job is stopped, not failed."""
    j = Job().send(Tick()).send(Stop(Origin.OPERATOR, "operator stop")).send(config_exit())
    assert j.m.state == S.STOPPED


def test_an_exit_without_a_config_error_still_restarts():
    j = Job().send(Tick()).send(crash())
    assert j.m.state == S.BACKING_OFF and j.m.restarts == 1
