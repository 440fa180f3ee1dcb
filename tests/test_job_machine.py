"""The job state machine, edge by edge, on a fake clock: pure decisions, no processes, no disk.

Each test is named after the edge (or the policy) it proves; the last test checks that together they
walk every row of the transition table.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

import pytest

from isaacd.jobs import machine
from isaacd.jobs.effects import Event, HoldSpare, Kill, Launch, Persist, Signal
from isaacd.jobs.messages import (DropSpare, Exited, LaunchRefused, Placed, Preempt, Progressed, Restart, Start, Stop,
                                  Tick, TrainerConfigError, WatchdogTrip)
from isaacd.jobs.model import (TRANSITIONS, InvalidTransition, JobModel, JobState, LaunchIntent, Origin, Then,
                               check_transition)
from isaacd.jobs import policy

S = JobState
SEEN: set[tuple[JobState, JobState]] = set()


@dataclass(frozen=True)
class Policy:
    max_restarts: int = 3
    window: float = 100.0
    backoff_initial: float = 1.0
    backoff_max: float = 8.0
    backoff_factor: float = 2.0
    reset_after: float = 60.0
    first_restart_immediate: bool = False


class Job:
    """A model driven through decide() on a fake monotonic clock, recording the edges it walks."""

    def __init__(self, state: JobState = S.PENDING, policy_: Policy = Policy(), **model):
        self.m = JobModel(state=state, **model)
        self.now = 1000.0
        self.policy = policy_
        self.effects: list = []
        self.reply: str | None = None
        self.placed = False  # the job asks for GPUs (issue 31): the host's queue places it

    def context(self) -> machine.Context:
        return machine.Context("job", self.now, self.policy, stop_timeout=10.0, placed_by_isaacd=self.placed,
                               wall=1.7e9 + self.now)

    def send(self, msg):  # noqa: ANN001, ANN201
        old = self.m.state
        d = machine.decide(self.m, msg, self.context())
        self.m, self.effects, self.reply = d.model, list(d.effects), d.reply
        if d.model.state != old:
            SEEN.add((old, d.model.state))
        return self

    def at(self, seconds: float) -> "Job":
        self.now += seconds
        return self

    def events(self, name: str) -> list[dict]:
        return [e.fields for e in self.effects if isinstance(e, Event) and e.name == name]

    def running(self) -> "Job":
        return self.send(Tick()).send(Progressed(1))


def crash(ran: float = 1.0, moved: bool = False, **kw) -> Exited:  # noqa: ANN003
    return Exited("killed by signal 9 (SIGKILL)", "signal", success=False, ran_seconds=ran, moved_forward=moved, **kw)


CLEAN_AT_MAX = Exited("exited with code 0", "exit_code", success=True, reached_max=True, ran_seconds=5)


def persisted_before(effects: list, kind: type) -> bool:
    """The decision was saved before the effect that acts on it."""
    kinds = [type(e) for e in effects]
    return Persist in kinds and kind in kinds and kinds.index(Persist) < kinds.index(kind)


# ---- pending ----------------------------------------------------------------------------------
def test_pending_tick_launches_with_the_intent_saved_first():
    j = Job().send(Tick())
    assert j.m.state == S.STARTING
    assert persisted_before(j.effects, Launch)
    assert [e for e in j.effects if isinstance(e, Launch)][0].intent == LaunchIntent()


def test_pending_stop_rests_stopped_without_a_trainer():
    j = Job().send(Stop(Origin.OPERATOR, "operator stop"))
    assert (j.m.state, j.m.final, j.reply) == (S.STOPPED, True, "stopped")
    assert not [e for e in j.effects if isinstance(e, (Signal, Kill))]


# ---- starting ---------------------------------------------------------------------------------
def test_starting_first_iteration_is_running():
    j = Job().send(Tick()).send(Progressed(0))
    assert j.m.state == S.RUNNING and j.m.reason == "training at iteration 0"


def test_starting_refused_complete_is_completed_and_remembered():
    j = Job().send(Tick()).send(LaunchRefused("max_iterations reached", settle="completed"))
    assert (j.m.state, j.m.final) == (S.COMPLETED, True)


def test_starting_refused_for_good_is_failed_with_the_reason():
    j = Job().send(Tick()).send(LaunchRefused("cannot start: train_script: missing", settle="failed"))
    assert (j.m.state, j.m.reason) == (S.FAILED, "cannot start: train_script: missing")
    assert j.events("failed") == [{"reason": "cannot start: train_script: missing"}]


def test_starting_spawn_failure_backs_off_and_counts():
    j = Job().send(Tick()).send(LaunchRefused("failed to start: podman not found"))
    assert j.m.state == S.BACKING_OFF and j.m.restarts == 1 and dict(j.m.restarts_by_reason) == {"lost": 1}


def test_starting_state_disk_full_retries_without_counting_toward_the_crash_loop():
    j = Job(policy_=Policy(max_restarts=1))
    for _ in range(5):
        j.send(Tick()).send(LaunchRefused("not starting: cannot save the job's state", crash_loop=False))
        assert j.m.state == S.BACKING_OFF
        j.at(j.m.backoff_seconds or 0)
    assert j.m.restart_times == ()  # it recovers when space returns, whenever that is


def test_starting_exit_backs_off():
    j = Job().send(Tick()).send(crash())
    assert j.m.state == S.BACKING_OFF and j.m.backoff_until == j.now + 1.0


def test_starting_stop_signals_sigint_after_saving_the_intent():
    j = Job().send(Tick()).send(Stop(Origin.OPERATOR, "operator stop"))
    assert j.m.state == S.STOPPING and j.m.stop is not None and j.m.stop.deadline == j.now + 10.0
    assert persisted_before(j.effects, Signal)
    assert [e.signum for e in j.effects if isinstance(e, Signal)] == [signal.SIGINT]


def test_starting_stopped_outside_isaacd_is_stopped():
    j = Job().send(Tick()).send(Exited("stopped outside isaacd", "operator", False, external_stop=True))
    assert (j.m.state, j.m.final) == (S.STOPPED, True)


# ---- running ----------------------------------------------------------------------------------
def test_running_exit_signal_schedules_backoff():
    j = Job().running().send(crash())
    assert j.m.state == S.BACKING_OFF
    assert j.events("restart_scheduled") == [{"reason": "killed by signal 9 (SIGKILL)", "delay_seconds": 1.0}]
    assert j.m.restarts == 1 and j.m.launch.origin == Origin.CRASH
    assert Persist in [type(e) for e in j.effects]  # the count and the deadline survive a supervisor crash


def test_running_clean_exit_at_max_iterations_completes():
    j = Job().running().send(CLEAN_AT_MAX)
    assert (j.m.state, j.m.final) == (S.COMPLETED, True)


def test_running_clean_exit_before_max_iterations_restarts():
    j = Job().running().send(Exited("exited with code 0", "exit_code", success=True, reached_max=False))
    assert j.m.state == S.BACKING_OFF and "before max_iterations" in (j.m.last_restart_reason or "")


def test_running_clean_exit_by_the_trainers_own_stop_rule_completes_with_its_reason():
    why = "score_to_win reached: mean reward 512 > 500 (rl_games stops there)"
    j = Job().running().send(Exited("exited with code 0", "exit_code", success=True, finished_early=why))
    assert (j.m.state, j.m.final, j.m.reason) == (S.COMPLETED, True, why)
    assert j.m.restarts == 0


def test_running_stopped_outside_isaacd_is_stopped():
    j = Job().running().send(Exited("stopped outside isaacd (systemctl stop)", "operator", False,
                                    external_stop=True))
    assert j.m.state == S.STOPPED and "outside isaacd" in (j.m.reason or "")


def test_running_stop_is_stopping():
    j = Job().running().send(Stop(Origin.OPERATOR, "operator stop"))
    assert (j.m.state, j.reply) == (S.STOPPING, "stopping")


def test_backoff_window_exceeded_fails():
    j = Job(policy_=Policy(max_restarts=2))
    for _ in range(2):
        j.running().send(crash()).at(10)
    assert j.m.state == S.BACKING_OFF
    j.running().send(crash())
    assert j.m.state == S.FAILED and "restart limit reached: 2 restarts within 100 s" in (j.m.reason or "")


def test_restarts_outside_the_window_do_not_count_toward_the_limit():
    j = Job(policy_=Policy(max_restarts=2, window=100.0))
    for _ in range(6):
        j.running().send(crash()).at(60)
    assert j.m.state == S.BACKING_OFF and j.m.restarts == 6


# ---- backing-off ------------------------------------------------------------------------------
def test_backing_off_waits_until_the_deadline_then_launches():
    j = Job().running().send(crash())
    j.at(0.5).send(Tick())
    assert j.m.state == S.BACKING_OFF
    j.at(0.5).send(Tick())
    assert j.m.state == S.STARTING and [e for e in j.effects if isinstance(e, Launch)]


def test_backing_off_stop_rests_stopped():
    j = Job().running().send(crash()).send(Stop(Origin.OPERATOR, "operator stop"))
    assert (j.m.state, j.m.backoff_until) == (S.STOPPED, None)


def test_backing_off_start_launches_now_without_counting_again():
    j = Job().running().send(crash())
    j.send(Start(Origin.OPERATOR, "operator start"))
    assert j.m.state == S.STARTING and j.m.restarts == 1


def test_backoff_ladder_doubles_for_quick_failures_and_caps():
    j = Job(policy_=Policy(max_restarts=100, window=1.0))
    delays = []
    for _ in range(6):
        j.running().send(crash(ran=1.0))
        delays.append(j.m.backoff_seconds)
        j.at(j.m.backoff_seconds or 0)
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_first_restart_after_a_crash_is_immediate_then_the_ladder_starts():
    j = Job(policy_=Policy(max_restarts=100, window=1.0, first_restart_immediate=True))
    delays = []
    for _ in range(5):
        j.running().send(crash(ran=1.0))
        delays.append(j.m.backoff_seconds)
        j.at(j.m.backoff_seconds or 0)
    assert delays == [0.0, 1.0, 2.0, 4.0, 8.0]
    j.running().send(crash(ran=61.0))  # a long run: the next crash is a first one again
    assert j.m.backoff_seconds == 0.0 and j.m.state == S.BACKING_OFF
    j.send(Tick())
    assert j.m.state == S.STARTING  # in the same tick


def test_backoff_ladder_resets_after_a_long_run_or_a_newer_checkpoint():
    j = Job(policy_=Policy(max_restarts=100, window=1.0))
    for _ in range(3):
        j.running().send(crash(ran=1.0)).at(10)
    j.running().send(crash(ran=61.0))
    assert j.m.backoff_seconds == 1.0
    j.at(10).running().send(crash(ran=1.0)).at(10).running().send(crash(ran=1.0, moved=True))
    assert j.m.backoff_seconds == 1.0


# ---- stopping ---------------------------------------------------------------------------------
def test_stopping_exit_rests_stopped():
    j = Job().running().send(Stop(Origin.OPERATOR, "operator stop")).send(crash())
    assert (j.m.state, j.m.final, j.m.stop) == (S.STOPPED, True, None)


def test_stopping_past_the_grace_sends_sigkill_once():
    j = Job().running().send(Stop(Origin.OPERATOR, "operator stop"))
    j.at(9.9).send(Tick())
    assert not [e for e in j.effects if isinstance(e, Kill)]
    j.at(0.2).send(Tick())
    assert persisted_before(j.effects, Kill) and j.m.stop is not None and j.m.stop.killed
    j.at(5).send(Tick())
    assert not [e for e in j.effects if isinstance(e, Kill)]


def test_stopping_for_restart_backs_off_for_no_time_and_counts_as_operator():
    j = Job().running().send(Restart(Origin.OPERATOR, "operator restart")).send(crash())
    assert j.m.state == S.BACKING_OFF and j.m.backoff_until == j.now
    assert dict(j.m.restarts_by_reason) == {"operator": 1} and j.m.restart_times == ()  # no crash loop
    j.send(Tick())
    assert j.m.state == S.STARTING


def test_stopping_operator_stop_outranks_a_restart_in_flight():
    j = Job().running().send(Restart(Origin.WATCHDOG, "watchdog no_progress"))
    j.send(Stop(Origin.OPERATOR, "operator stop"))
    assert j.reply == "already stopping; the restart under way is called off"
    assert j.m.stop is not None and j.m.stop.then == Then.STOP
    j.send(crash())
    assert j.m.state == S.STOPPED and j.m.reason == "operator stop"


def test_stopping_operator_stop_outranks_a_shutdown_and_is_remembered():
    j = Job().running().send(Stop(Origin.SHUTDOWN, "supervisor shutdown", final=False))
    j.send(Stop(Origin.OPERATOR, "operator stop")).send(crash())
    assert (j.m.state, j.m.final) == (S.STOPPED, True)


def test_stopping_for_shutdown_is_not_remembered():
    j = Job().running().send(Stop(Origin.SHUTDOWN, "supervisor shutdown", final=False)).send(crash())
    assert (j.m.state, j.m.final) == (S.STOPPED, False)


def test_stopping_operator_start_is_saved_then_the_job_stops_and_starts_uncounted():
    j = Job().running().send(Stop(Origin.OPERATOR, "operator stop")).send(Start(Origin.OPERATOR, "operator start"))
    assert j.reply == "starting once stopped (the stop under way finishes first)"
    assert j.m.stop is not None and j.m.stop.then == Then.START and Persist in [type(e) for e in j.effects]
    assert JobModel.from_json(j.m.to_json()) == j.m  # a new supervisor carries the start on
    j.send(Start(Origin.OPERATOR, "operator start"))
    assert j.reply == "already starting once stopped" and j.effects == []
    j.send(crash())
    assert [(e["old"], e["new"]) for e in j.events("state")] == [("stopping", "stopped"), ("stopped", "pending")]
    assert (j.m.state, j.m.final, j.m.restarts, j.m.stop) == (S.PENDING, False, 0, None)


def test_stopping_operator_stop_calls_off_a_start_asked_during_it():
    j = Job().running().send(Stop(Origin.OPERATOR, "operator stop")).send(Start(Origin.OPERATOR, "operator start"))
    j.send(Stop(Origin.OPERATOR, "operator stop"))
    assert j.reply == "already stopping; the start asked during the stop is called off"
    j.send(crash())
    assert (j.m.state, j.m.final) == (S.STOPPED, True)


def test_stopping_shutdown_after_a_start_asked_during_the_stop_rests_for_the_next_supervisor():
    j = Job().running().send(Stop(Origin.OPERATOR, "operator stop")).send(Start(Origin.OPERATOR, "operator start"))
    j.send(Stop(Origin.SHUTDOWN, "supervisor shutdown", final=False)).send(crash())
    assert (j.m.state, j.m.final) == (S.STOPPED, False)  # not final: the next supervisor starts it


def test_stopping_for_shutdown_refuses_an_operator_start_or_restart_with_the_reason():
    for cmd in (Start(Origin.OPERATOR, "operator start"), Restart(Origin.OPERATOR, "operator restart")):
        j = Job().running().send(Stop(Origin.SHUTDOWN, "supervisor shutdown", final=False)).send(cmd)
        assert isinstance(j.reply, machine.Refused) and "the supervisor is shutting down" in j.reply
        assert j.m.stop is not None and j.m.stop.then == Then.STOP and j.effects == []


def test_stopping_operator_restart_is_saved_then_relaunched_and_counted_as_operator():
    j = Job().running().send(trip("stop", "no_progress"))
    j.send(Restart(Origin.OPERATOR, "operator restart"))
    assert j.reply == "restarting once stopped (the stop under way finishes first)"
    j.send(crash())
    assert j.m.state == S.BACKING_OFF and dict(j.m.restarts_by_reason) == {"operator": 1}


def test_stopping_removed_job_back_in_the_config_restarts():
    j = Job().running().send(Stop(Origin.CONFIG, "removed from config", final=False))
    j.send(Restart(Origin.CONFIG, "back in the config")).send(crash())
    assert j.m.state == S.BACKING_OFF and j.m.backoff_until == j.now


# ---- at rest ----------------------------------------------------------------------------------
@pytest.mark.parametrize("rest", [S.STOPPED, S.COMPLETED, S.FAILED])
def test_at_rest_start_is_pending_and_not_a_restart(rest):
    j = Job(state=rest, final=True).send(Start(Origin.OPERATOR, "operator start"))
    assert (j.m.state, j.m.final, j.m.restarts, j.reply) == (S.PENDING, False, 0, "starting")


def test_completed_restart_is_a_start_and_not_counted():
    j = Job(state=S.COMPLETED, final=True).send(Restart(Origin.OPERATOR, "operator restart"))
    assert (j.m.state, j.m.restarts, j.m.restarts_by_reason, j.reply) == (S.PENDING, 0, (), "starting")


def test_running_restart_answers_restarting():
    j = Job().running().send(Restart(Origin.OPERATOR, "operator restart"))
    assert (j.m.state, j.reply) == (S.STOPPING, "restarting")


def test_stopped_restart_is_pending_and_counted_as_operator():
    j = Job(state=S.STOPPED, final=True).send(Restart(Origin.OPERATOR, "operator restart"))
    assert j.m.state == S.PENDING and dict(j.m.restarts_by_reason) == {"operator": 1}


def test_active_start_is_refused_politely():
    j = Job().running().send(Start(Origin.OPERATOR, "operator start"))
    assert j.reply == "already running" and j.effects == []


def test_stopped_stop_says_not_running():
    j = Job(state=S.STOPPED).send(Stop(Origin.OPERATOR, "operator stop"))
    assert j.reply == "not running (stopped)" and j.effects == []


# ---- watchdogs --------------------------------------------------------------------------------
def trip(action: str, watchdog: str = "divergence", **kw) -> WatchdogTrip:  # noqa: ANN003
    return WatchdogTrip(watchdog=watchdog, action=action, configured_action=action, detail="loss is NaN",
                        values={}, **kw)


def test_watchdog_restart_is_counted_as_watchdog_and_within_the_crash_window():
    j = Job().running().send(trip("restart", "no_progress")).send(crash())
    assert dict(j.m.restarts_by_reason) == {"watchdog": 1} and len(j.m.restart_times) == 1
    assert dict(j.m.watchdog_trips) == {"no_progress/restart": 1}


def test_watchdog_rollback_resumes_before_the_trouble_with_a_new_seed():
    j = Job().running().send(trip("rollback", trouble_iteration=40, new_seed=True, max_rollbacks=2)).send(crash())
    assert j.m.rollbacks == 1 and j.m.launch.before_iteration == 40 and j.m.launch.new_seed


def test_watchdog_rollback_bound_stops():
    j = Job(rollbacks=2).running().send(trip("rollback", trouble_iteration=40, max_rollbacks=2))
    assert j.m.state == S.STOPPING and j.m.stop is not None and j.m.stop.then == Then.STOP
    assert "still diverging after 2 rollbacks (max_rollbacks = 2)" in j.m.stop.reason
    assert dict(j.m.watchdog_trips) == {"divergence/stop": 1} and j.m.rollbacks == 2


def test_watchdog_log_is_recorded_and_nothing_else():
    j = Job().running().send(trip("log"))
    assert j.m.state == S.RUNNING and j.events("watchdog_trip")[0]["action"] == "log"


def test_thermal_park_then_cool_resume_counts_one_watchdog_restart():
    j = Job().running().send(trip("stop", "gpu_temperature")).send(crash())
    assert (j.m.state, j.m.parked_by, j.m.final) == (S.STOPPED, "gpu_temperature", False)
    j.send(Start(Origin.THERMAL, "GPUs back under 75 C"))
    assert j.m.state == S.PENDING and j.m.restarts == 1 and j.m.parked_by is None


def test_thermal_resume_never_undoes_an_operator_stop():
    j = Job().running().send(Stop(Origin.OPERATOR, "operator stop")).send(crash())
    j.send(Start(Origin.THERMAL, "GPUs back under 75 C"))
    assert j.m.state == S.STOPPED and j.reply == "not parked"


# ---- the host's queue (issue 31) ----------------------------------------------------------------
def queued() -> Job:
    j = Job()
    j.placed = True
    return j.send(Tick())


def test_pending_to_queued_a_job_that_asks_for_gpus_waits_for_the_queue_not_launching():
    j = queued()
    assert j.m.state == S.QUEUED and not [e for e in j.effects if isinstance(e, Launch)]
    assert j.m.submitted_at == 1.7e9 + 1000 and j.events("queued")


def test_queued_to_starting_on_placed_with_the_gpus_it_was_given():
    j = queued().at(30).send(Placed((2, 3), "fits"))
    assert j.m.state == S.STARTING and j.m.placement == (2, 3) and j.m.placed_at == 1030
    assert j.effects.index(Persist()) < next(i for i, e in enumerate(j.effects) if isinstance(e, Launch))
    assert j.events("placed")[0]["waited_seconds"] == 30


def test_preempt_running_stops_with_a_save_then_exit_goes_back_to_the_queue_in_its_old_place():
    j = queued().send(Placed((0,), "fits")).send(Progressed(5))
    submitted = j.m.submitted_at
    j.send(Preempt("urgent", "preempted by urgent"))
    assert j.m.state == S.STOPPING and j.m.stop.then == Then.QUEUE and Signal(int(signal.SIGINT)) in j.effects
    assert j.events("preempted")[0]["by"] == "urgent" and j.m.preemptions == 1
    j.at(50).send(Exited("exited with code 0", "exit_code", success=True))
    assert j.m.state == S.QUEUED and j.m.placement == () and j.m.submitted_at == submitted
    assert j.m.queued_at == 1.7e9 + 1050  # its wait starts anew at the requeue; its place is its submission
    assert j.m.restarts == 0 and j.events("requeued")  # a preemption is no restart, no crash


def test_backing_off_to_queued_when_preempted_without_a_trainer():
    j = Job(policy_=Policy(first_restart_immediate=True))
    j.placed = True
    j.send(Tick()).send(Placed((0,), "fits")).send(crash())
    assert j.m.state == S.BACKING_OFF and j.m.placement == (0,)  # a restart at once keeps its GPU
    j.send(Preempt("urgent", "preempted by urgent"))
    assert j.m.state == S.QUEUED and j.m.placement == ()


# ---- issue 37: a job backing off gives its GPUs back; a start no retry fixes fails at once ---------------------
def test_running_to_backing_off_a_placed_job_gives_its_gpus_back_for_the_backoff():
    j = queued().send(Placed((0, 1), "fits")).send(Progressed(3)).at(20).send(crash())
    assert j.m.state == S.BACKING_OFF and j.m.placement == () and j.m.placed_at is None
    assert j.events("gpus_released")[0]["gpus"] == [0, 1]
    assert "back in the queue in 1.0 s (its GPUs given back meanwhile)" in j.m.reason
    assert HoldSpare("the job gave its GPUs back for its backoff", j.now) in j.effects  # its spare sat on them
    assert j.effects.index(Persist()) < j.effects.index(HoldSpare("the job gave its GPUs back for its backoff", j.now))


def test_backing_off_to_queued_once_the_backoff_passed_at_its_old_place_then_placed_again():
    j = queued()
    submitted = j.m.submitted_at
    j.at(5).send(Placed((0,), "fits")).send(crash())
    j.at(0.5).send(Tick())
    assert j.m.state == S.BACKING_OFF  # not before its backoff has passed: not in line for placement yet
    j.at(0.6).send(Tick())
    assert (j.m.state, j.m.submitted_at) == (S.QUEUED, submitted)  # its old place, not the back of the queue
    assert not [e for e in j.effects if isinstance(e, Launch)]  # launched only once placed
    j.send(Placed((1,), "fits"))
    assert j.m.state == S.STARTING and j.m.placement == (1,) and j.m.launch.origin == Origin.CRASH


def test_backing_off_start_of_a_job_that_gave_its_gpus_back_queues_it_instead_of_launching_without_gpus():
    j = queued().send(Placed((0,), "fits")).send(crash())
    j.send(Start(Origin.OPERATOR, "operator start"))
    assert j.m.state == S.QUEUED and not [e for e in j.effects if isinstance(e, Launch)]
    assert j.reply.startswith("queued: it gave its GPUs back")


def test_backing_off_preempt_of_a_job_that_gave_its_gpus_back_changes_nothing():
    j = queued().send(Placed((0,), "fits")).send(crash())
    before = j.m
    j.send(Preempt("urgent", "preempted by urgent"))
    assert j.m == before and j.effects == []


def test_backing_off_a_pinned_job_keeps_its_gpus_and_relaunches_itself():
    j = Job().running().send(crash())  # names its GPUs in the config: not the queue's to give back
    assert j.m.state == S.BACKING_OFF and not j.events("gpus_released")
    assert j.at(1).send(Tick()).m.state == S.STARTING


def test_starting_to_failed_a_start_no_retry_fixes_fails_at_once_with_the_program_named():
    err = TrainerConfigError("not_executable", "the job's program cannot be executed",
                             "/opt/venv/bin/python: permission denied for alice, who runs the job", "launcher",
                             "make `/opt/venv/bin/python` ... executable for the job's user")
    j = queued().send(Placed((0, 1), "fits"))
    j.send(LaunchRefused("failed to start: /opt/venv/bin/python: permission denied for alice", config_error=err))
    assert (j.m.state, j.m.final, j.m.placement) == (S.FAILED, True, ())  # its GPUs back at once, no retry
    assert j.m.restarts == 0 and "permission denied for alice" in j.m.reason and "/opt/venv/bin/python" in j.m.reason
    assert "a restart cannot fix this" in j.m.reason


def test_starting_to_backing_off_a_transient_start_failure_is_still_retried():
    j = Job().send(Tick()).send(LaunchRefused("failed to start: [Errno 11] Resource temporarily unavailable"))
    assert j.m.state == S.BACKING_OFF and j.m.restarts == 1


def test_queued_to_stopped_an_operator_stop_leaves_the_queue_and_gives_nothing_back_twice():
    j = queued().send(Stop(Origin.OPERATOR, "operator stop"))
    assert j.m.state == S.STOPPED and j.m.final and j.m.submitted_at is None
    j.send(Placed((0,), "fits"))  # a placement decided before the stop: ignored
    assert j.m.state == S.STOPPED


def test_an_operator_stop_during_a_preemption_wins_the_job_rests_stopped():
    j = queued().send(Placed((0,), "fits")).send(Progressed(5)).send(Preempt("urgent", "preempted"))
    j.send(Stop(Origin.OPERATOR, "operator stop")).send(crash())
    assert j.m.state == S.STOPPED and j.m.placement == ()


def test_a_watchdog_restart_under_way_turns_into_the_preemption():
    j = queued().send(Placed((0,), "fits")).send(Progressed(5)).send(trip("restart"))
    j.send(Preempt("urgent", "preempted")).send(crash())
    assert j.m.state == S.QUEUED


def test_start_and_restart_of_a_queued_job_say_it_already_waits():
    j = queued().send(Start(Origin.OPERATOR, "start"))
    assert j.reply == "already queued"
    assert j.send(Restart(Origin.OPERATOR, "restart")).reply == "already queued"


def test_a_reload_that_pins_the_gpus_launches_a_queued_job():
    j = queued()
    j.placed = False
    assert j.send(Tick()).m.state == S.STARTING


def test_completion_gives_the_gpus_back():
    j = queued().send(Placed((1,), "fits")).send(Progressed(1))
    j.send(Exited("exited with code 0", "exit_code", success=True, reached_max=True))
    assert j.m.state == S.COMPLETED and j.m.placement == () and j.m.submitted_at is None


def test_a_supervisor_shutdown_keeps_the_queue_place_of_a_placed_job():
    j = queued().send(Placed((1,), "fits")).send(Progressed(1))
    submitted = j.m.submitted_at
    j.send(Stop(Origin.SHUTDOWN, "supervisor shutdown", final=False)).send(crash())
    assert (j.m.state, j.m.placement, j.m.submitted_at) == (S.STOPPED, (), submitted)
    j.send(Start(Origin.RECOVERY, "resuming after a supervisor restart")).at(99).send(Tick())
    assert j.m.state == S.QUEUED and j.m.submitted_at == submitted  # its old place, not the back of the queue


def test_drop_spare_asks_the_interpreter_to_hold_the_spare_back():
    j = queued().send(Placed((1,), "fits")).send(DropSpare("urgent", "room for urgent", until=1060))
    assert j.effects == [HoldSpare("room for urgent", 1060)] and j.m.state == S.STARTING


def test_a_placed_model_round_trips_through_json():
    j = queued().send(Placed((1, 2), "fits", backfill=True))
    assert JobModel.from_json(j.m.to_json()) == j.m


# ---- the table itself -------------------------------------------------------------------------
def test_a_transition_outside_the_table_raises():
    with pytest.raises(InvalidTransition, match="completed -> running"):
        check_transition("job", S.COMPLETED, S.RUNNING)


def test_model_round_trips_through_json():
    j = Job().running().send(trip("rollback", trouble_iteration=7)).at(3)
    assert JobModel.from_json(j.m.to_json()) == j.m


def test_policy_rollback_allowed_until_the_bound():
    assert policy.rollback_allowed(2, 3) and not policy.rollback_allowed(3, 3)


def test_every_table_row_is_covered():
    # runs last in this file: the edges the tests above walked are every edge of the table
    table = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert table - SEEN == set(), f"edges no test walks: {sorted((a.value, b.value) for a, b in table - SEEN)}"


def test_a_sweeps_promotion_while_its_pause_still_saves_starts_the_trial_once_stopped():
    """ASHA may promote a trial in the tick after it paused it: the start is kept in the stop, not dropped (the
    trainer saves, stops, then starts again from that save), and it says it was the sweep's."""
    j = Job().running().send(Stop(Origin.SWEEP, "sweep lr: paused at iteration 4"))
    j.send(Start(Origin.SWEEP, "sweep lr: promoted past iteration 4"))
    assert j.m.state == S.STOPPING and j.m.stop.start_by == "sweep lr: promoted past iteration 4"
    assert j.events("stop_changed")[0]["detail"].startswith("sweep start during the stop")
    assert JobModel.from_json(j.m.to_json()).stop.start_by == j.m.stop.start_by  # a new supervisor keeps it
    j.send(Exited("exited with code 0", "exit_code", success=True))
    assert j.m.state in (S.PENDING, S.QUEUED, S.STARTING) and j.m.launch.origin == Origin.SWEEP
    assert j.m.launch.reason == "sweep lr: promoted past iteration 4"
