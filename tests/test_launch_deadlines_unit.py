"""Issue 28 part 1, the pure parts: which wait a starting attempt is on and its bound (attempt/deadlines.py), what
the machine decides when one runs past it or the spare dies in the hand-over, and how status words the wait."""

from __future__ import annotations

from isaacd.attempt.deadlines import (RUNTIME_START, SPARE_ACK, SPARE_FIRST_STEP, Handover, LaunchWait,
                                      current_wait, first_step_bound, iteration_seconds, overdue_reason)
from isaacd.config.schema import LaunchDeadlines
from isaacd.jobs import machine
from isaacd.jobs.effects import Event, Kill, Launch, Persist
from isaacd.jobs.messages import Exited, LaunchOverdue, ReasonClass, Tick
from isaacd.jobs.model import JobModel, JobState, LaunchIntent, Origin
from isaacd.cli.render import launch_wait_text
from isaacd.status.types import JobStatus, LaunchWaitStatus
from test_job_machine import Policy

D = LaunchDeadlines()  # the defaults: ack 2 s, first step max(60 s, 10 iterations)
S = JobState


def test_the_defaults_are_the_documented_ones() -> None:
    assert (D.spare_ack_timeout, D.spare_first_step_min, D.spare_first_step_iterations) == (2.0, 60.0, 10.0)
    assert (D.runtime_start_timeout, D.spare_boot_timeout) == (300.0, 1800.0)


def test_a_booted_spares_first_step_is_a_few_iterations_never_under_the_floor() -> None:
    assert first_step_bound(D, "booted", 0.5, None) == 60.0  # 10 x 0.5 s is under the floor
    assert first_step_bound(D, "booted", 9.0, None) == 90.0
    assert first_step_bound(D, "booted", None, None) == 60.0  # not measured yet (a supervisor restart)


def test_an_imports_only_spare_gets_the_jobs_cold_start_up_on_top_or_no_deadline() -> None:
    assert first_step_bound(D, "imports", 1.0, 40.0) == 60.0 + 2 * 40.0
    assert first_step_bound(D, "imports", 1.0, None) is None  # the no_progress watchdog's business then


def test_the_waits_come_in_order_runtime_then_ack_then_first_step() -> None:
    assert current_wait(D, 10.0, has_pid=False, placing=False, handover=None, stepped=False) == \
        LaunchWait(RUNTIME_START, 10.0, 300.0)
    assert current_wait(D, 10.0, has_pid=True, placing=False, handover=None, stepped=False) is None  # a cold boot
    assert current_wait(D, 10.0, has_pid=False, placing=True, handover=None, stepped=False) is None  # ray: a queue
    h = Handover("booted", go_mono=20.0, go_wall=1e9, first_step_bound=75.0)
    assert current_wait(D, 10.0, True, False, h, False) == LaunchWait(SPARE_ACK, 20.0, 2.0)
    h.acked_mono = 20.01
    assert current_wait(D, 10.0, True, False, h, False) == LaunchWait(SPARE_FIRST_STEP, 20.01, 75.0)
    assert current_wait(D, 10.0, True, False, h, stepped=True) is None


def test_a_wait_is_overdue_only_past_its_bound_and_never_without_one() -> None:
    w = LaunchWait(SPARE_ACK, 100.0, 2.0)
    assert not w.overdue(102.0) and w.overdue(102.01) and w.waited(99.0) == 0.0
    assert not LaunchWait(SPARE_FIRST_STEP, 100.0, None).overdue(1e9)
    assert overdue_reason(w, 102.5) == ("spare hand-over timed out: no ack of the go in 2.5 s (bound 2 s, "
                                        "[jobs.launch] spare_ack_timeout); killed, starting cold")


def test_iteration_time_is_measured_between_two_steps() -> None:
    assert iteration_seconds((10, 100.0), 14, 106.0) == 1.5
    assert iteration_seconds(None, 14, 106.0) is None
    assert iteration_seconds((14, 106.0), 14, 107.0) is None  # the same step again says nothing


# one restart in a long window (the crash before the hand-over used it), a backoff long enough to see
POLICY = Policy(max_restarts=1, window=1000.0, backoff_initial=30.0, backoff_max=60.0, reset_after=600.0)


def ctx(now: float) -> machine.Context:
    return machine.Context("job", now, POLICY, stop_timeout=30.0)


def starting() -> JobModel:
    return JobModel(state=S.STARTING, launch=LaunchIntent("killed by signal 9 (SIGKILL)", Origin.CRASH),
                    restart_times=(900.0,), restarts=1)


def test_an_overdue_wait_kills_at_once_saved_first_and_its_exit_starts_cold_with_no_backoff() -> None:
    d = machine.decide(starting(), LaunchOverdue("spare hand-over timed out", "spare_handover_timeout",
                                                 {"deadline": "ack", "waited_seconds": 2.1}), ctx(1000.0))
    assert d.model.state == S.STOPPING and d.model.stop is not None and d.model.stop.killed
    kinds = [type(e) for e in d.effects]
    assert kinds.index(Persist) < kinds.index(Kill)  # a supervisor killed in between finds the intent
    assert Event("spare_handover_timeout", {"deadline": "ack", "waited_seconds": 2.1}) in d.effects
    # SIGKILL, not SIGINT and stop_timeout: nothing of the trainer runs that could save anything
    gone = machine.decide(d.model, Exited("killed by signal 9 (SIGKILL)", ReasonClass.SIGNAL, False), ctx(1000.2))
    assert gone.model.state == S.BACKING_OFF and gone.model.backoff_until == 1000.2
    # outside the crash-loop window (max_restarts = 1 already used by the crash), counted as a lost launch
    assert gone.model.restart_times == (900.0,) and dict(gone.model.restarts_by_reason) == {"lost": 1}
    again = machine.decide(gone.model, Tick(), ctx(1000.2))
    assert again.model.state == S.STARTING and any(isinstance(e, Launch) for e in again.effects)


def test_a_cold_launch_the_runtime_never_started_is_killed_and_its_exit_is_a_crash_like_any_other() -> None:
    """runtime_start: the next launch would hang the same way, so no cold start at once outside the window."""
    d = machine.decide(starting(), LaunchOverdue("the runtime did not start the trainer within 300 s",
                                                 "launch_timeout", {"wait": "runtime_start"}, cold_now=False),
                       ctx(1000.0))
    assert d.model.state == S.STARTING and d.model.stop is None
    assert [type(e) for e in d.effects] == [Event, Persist, Kill]
    gone = machine.decide(d.model, Exited("stopped before container cp was created", ReasonClass.LOST, False),
                          ctx(1001.0))
    assert gone.model.state == S.FAILED  # max_restarts = 1 was used by the crash: counted in the window


def test_a_podman_start_is_bounded_a_ray_start_is_not(tmp_path) -> None:
    """Ray reports the remote pid only after its node pulled and started the container: no fixed bound there."""
    from pathlib import Path

    from isaacd.attempt.launch_watch import LaunchWatch
    from isaacd.attempt.setting import JobSetting
    from isaacd.config.schema import parse_config

    def watch(runtime: str, extra: str = "") -> LaunchWatch:
        cfg = parse_config(f'{extra}[[jobs]]\nname = "p"\nruntime = "{runtime}"\n', "t.toml", Path(tmp_path)).jobs[0]
        w = LaunchWatch(JobSetting.of(cfg), None)  # type: ignore[arg-type] - no hand-over: nothing is recorded
        w.begin(0.0, None, measure_startup=True)
        return w

    late = watch("podman").observe(300.5, 1, None, False, None)
    assert late is not None and late.event == "launch_timeout" and not late.cold_now
    assert watch("podman").observe(299.0, 1, None, False, None) is None
    assert watch("ray", '[ray]\naddress = "auto"\n').observe(1e6, 1, None, False, None) is None


def test_an_overdue_wait_after_the_job_moved_on_changes_nothing() -> None:
    running = JobModel(state=S.RUNNING)
    d = machine.decide(running, LaunchOverdue("late", "spare_handover_timeout"), ctx(1000.0))
    assert d.model == running and d.effects == ()


def test_a_spare_that_dies_in_the_hand_over_is_followed_by_a_cold_start_at_once() -> None:
    msg = Exited("killed by signal 9 (SIGKILL)", ReasonClass.SIGNAL, False,
                 handover_failed="the spare ended before it acknowledged the go")
    d = machine.decide(starting(), msg, ctx(1000.0))
    assert d.model.state == S.BACKING_OFF and d.model.backoff_until == 1000.0  # no backoff (30 s here)
    assert d.model.restart_times == (900.0,)  # not in the window: max_restarts = 1 does not fail the job
    assert Event("restart_scheduled", {"reason": "the spare ended before it acknowledged the go (killed by signal 9 "
                                                 "(SIGKILL))", "delay_seconds": 0.0}) in d.effects
    # the same exit of a trainer that was training is a crash like any other
    crash = machine.decide(JobModel(state=S.RUNNING, restart_times=(900.0,)), msg, ctx(1000.0))
    assert crash.model.state == S.FAILED


def test_a_spare_handed_the_attempt_that_runs_out_of_gpu_memory_steps_num_envs_down_not_a_cold_relaunch() -> None:
    """The OOM is the trainer's (its num_envs), not the spare's: a cold launch at the same size would fail the same
    way (CI at 600373a: a restart onto a spare counted one start too many before the step-down)."""
    from isaacd.jobs.messages import CudaOom
    from test_job_machine_oom import GPU, STEP, TORCH, starting as oom_starting

    j = oom_starting(num_envs=1024, oom=STEP)
    j.send(Exited(f"exited with code 1: {TORCH}", "cuda_oom", False,
                  cuda_oom=CudaOom("torch", TORCH, "lower num_envs", gpu=GPU, facts={"gpus": [{"gpu": "0"}]}),
                  handover_failed="the spare ended after the go, before its first step"))
    assert dict(j.m.cuda_ooms) == {"startup": 1} and j.in_use() == 512
    assert not [r for r in j.events("restart_scheduled") if "spare" in r["reason"]]


def test_status_says_which_wait_and_how_long() -> None:
    w = LaunchWaitStatus(SPARE_ACK, "the spare's ack of the go", 1.2, 2.0)
    assert launch_wait_text(w) == "waiting for the spare's ack of the go: 1.2 s of 2 s"
    assert launch_wait_text(LaunchWaitStatus(SPARE_FIRST_STEP, "the spare's first step", 3.0, None)) == \
        "waiting for the spare's first step: 3.0 s (no deadline)"
    row = JobStatus(name="cp", state="starting", launch_wait=w).to_json()
    assert row["launch_wait"] == {"what": "spare_ack", "label": "the spare's ack of the go", "waited_seconds": 1.2,
                                  "bound_seconds": 2.0}
    assert JobStatus.from_json(row).launch_wait == w


def test_a_spare_stuck_in_its_boot_is_killed_at_spare_boot_timeout_and_tried_again_later(tmp_path) -> None:
    """The spare keeper on a fake kernel (tests/os_fakes.py): a spare that never says spare_ready."""
    import signal as _signal

    from os_fakes import FakeOs
    from test_spare_unit import PROGRAM, acted

    from isaacd.config.schema import parse_config
    from isaacd.runtimes.process import ProcessRuntime
    from isaacd.attempt.spare import SpareKeeper

    cfg = parse_config(f'[[jobs]]\nname = "p"\nlog_root = "{tmp_path}/logs"\n[jobs.launch]\nspare_boot_timeout = 100\n',
                       "t.toml", tmp_path).jobs[0]
    kernel = FakeOs()
    kernel.add(1, pid=100)
    said: list[tuple[str, dict]] = []
    keeper = SpareKeeper(cfg, ProcessRuntime(kernel), tmp_path / "state", lambda name, **kw: said.append((name, kw)),
                         oscalls=kernel)
    acted(keeper, keeper.tick(S.RUNNING, PROGRAM, 10.0))
    sp = keeper.spare
    assert sp is not None
    acted(keeper, keeper.tick(S.RUNNING, PROGRAM, 110.0))  # 100 s: not yet
    assert keeper.spare is sp and kernel.group_signals == []
    acted(keeper, keeper.tick(S.RUNNING, PROGRAM, 110.5))
    assert keeper.spare is None and kernel.group_signals == [(sp.handle.pid, _signal.SIGKILL)]
    assert said[-1] == ("spare_stopped", {"pid": sp.handle.pid, "reason": "not ready 100 s after its start "
                                                                          "([jobs.launch] spare_boot_timeout = 100 s)"})
    acted(keeper, keeper.tick(S.RUNNING, PROGRAM, 111.0))
    assert keeper.spare is None  # tried again after the retry delay, not at once


def test_a_hand_over_found_after_a_supervisor_restart_is_held_to_its_deadlines_from_the_adoption(tmp_path) -> None:
    """The attempt keeps its spare's token, so the spare's events file names it: frozen with the go (no spare_go),
    the adopted attempt misses the ack deadline; one that had acked is held to its first step, with no made-up
    ack latency."""
    import json
    from pathlib import Path

    from isaacd.attempt.launch_watch import LaunchWatch
    from isaacd.attempt.setting import JobSetting
    from isaacd.config.schema import parse_config
    from isaacd.runtimes.process import ProcessRuntime
    from isaacd.attempt.spare import SpareKeeper

    cfg = parse_config('[[jobs]]\nname = "p"\n', "t.toml", Path(tmp_path)).jobs[0]
    keeper = SpareKeeper(cfg, ProcessRuntime(), tmp_path / "state", lambda name, **kw: None)
    spare_dir = tmp_path / "state" / "spare" / "p"
    spare_dir.mkdir(parents=True)
    ready = {"event": "spare_ready", "time": 5.0, "mode": "booted"}
    (spare_dir / "events-frozen.jsonl").write_text(json.dumps(ready) + "\n")
    (spare_dir / "events-acked.jsonl").write_text(json.dumps(ready) + "\n" + json.dumps({"event": "spare_go",
                                                                                         "time": 9.0}) + "\n")
    assert keeper.handed_to("gone") is None and keeper.handed_to(None) is None

    said: list[str] = []
    record = type("Record", (), {"event": lambda self, name, **kw: said.append(name)})()
    frozen = LaunchWatch(JobSetting.of(cfg), record)  # type: ignore[arg-type]
    frozen.begin(100.0, keeper.handed_to("frozen"), measure_startup=False)
    assert frozen.observe(102.0, 3, 4242, False, None) is None
    late = frozen.observe(102.5, 3, 4242, False, None)
    assert late is not None and late.fields["deadline"] == "ack" and late.fields["mode"] == "booted" and late.cold_now

    acked = LaunchWatch(JobSetting.of(cfg), record)  # type: ignore[arg-type]
    acked.begin(100.0, keeper.handed_to("acked"), measure_startup=False)
    assert acked.observe(150.0, 3, 4242, False, None) is None and said == []  # no spare_took_over without the go's time
    assert acked.wait == LaunchWait(SPARE_FIRST_STEP, 150.0, 60.0)
    assert acked.handover_failed() == "the spare ended after the go, before its first step"
