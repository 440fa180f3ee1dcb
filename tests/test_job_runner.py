"""The runner and its recovery, on a fake clock and a fake runtime: crash consistency, a full state disk,
clock jumps. Each "supervisor crash" is a new JobRunner on the same state dir, as a restarted supervisor
builds one; the trainers (fake) live on in between, as real ones do.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from isaacd.config.schema import parse_config
from isaacd.jobs.messages import Start, Stop, WatchdogTrip
from isaacd.jobs.model import Origin
from isaacd.runner import JobRunner
from isaacd.runtimes.base import ExitStatus
from isaacd.history.store import StateStore

from job_fakes import FakeClock, FakeRuntime, FullDiskStore, SupervisorCrash

JOB = """
[[jobs]]
name = "cp"
command = ["sleep", "600"]
max_iterations = 100
stop_timeout = 10.0
[jobs.restart]
max_restarts = 3
window = 600.0
backoff_initial = 5.0
backoff_max = 60.0
first_restart_immediate = false
"""


@pytest.fixture()
def world(tmp_path):  # noqa: ANN001, ANN201
    cfg = parse_config(JOB, "t.toml", tmp_path).jobs[0]
    return {"cfg": cfg, "dir": tmp_path / "state", "clock": FakeClock(), "rt": FakeRuntime()}


def runner(world, store_cls=StateStore) -> JobRunner:  # noqa: ANN001
    r = JobRunner(world["cfg"], world["rt"], store_cls(world["dir"]), world["dir"], world["clock"])
    r.recover()
    return r


def tick(r: JobRunner, world, seconds: float = 0.1) -> None:  # noqa: ANN001
    world["clock"].advance(seconds)
    r.tick(world["clock"].monotonic())


def events(r: JobRunner, name: str) -> list[dict]:
    return [e for e in r.store.events("cp") if e["event"] == name]


def test_fresh_job_launches_one_trainer_with_its_token_saved_first(world):
    r = runner(world)
    tick(r, world)
    (t,) = world["rt"].live()
    saved = StateStore(world["dir"]).load("cp").current
    assert saved is not None and saved.token == t.token and saved.handle == {"pid": t.pid}


def test_crash_after_the_spawn_before_the_handle_was_saved_adopts_by_token_never_a_duplicate(world, monkeypatch):
    r = runner(world)
    real_save = r.store.save
    # every save up to the spawn reaches the disk; the one that would record the handle never does
    monkeypatch.setattr(r.store, "save", lambda h: None if h.current and h.current.handle else real_save(h))
    tick(r, world)  # saved the intent (token), spawned, then "crashed" before the handle reached the disk
    assert StateStore(world["dir"]).load("cp").current.handle == {}
    r2 = runner(world)
    tick(r2, world)
    assert len(world["rt"].live()) == 1 and r2.handle is not None and r2.handle.pid == world["rt"].live()[0].pid
    assert events(r2, "adopted")


def test_crash_after_the_intent_before_the_spawn_launches_once_on_recovery(world):
    r = runner(world)
    world["rt"].crash_in_start = True  # the supervisor dies as it calls the runtime: nothing spawned
    with pytest.raises(SupervisorCrash):
        tick(r, world)
    world["rt"].crash_in_start = False
    assert StateStore(world["dir"]).load("cp").current.token  # the intent is on disk
    r2 = runner(world)  # the saved model says starting; no trainer carries the token
    assert len(world["rt"].live()) == 1 and r2.state.value == "starting"
    assert events(r2, "launch_replayed") and r2.record.model.restarts == 0


def test_operator_stop_in_flight_is_honoured_by_the_next_supervisor(world):
    r = runner(world)
    tick(r, world)
    (t,) = world["rt"].live()
    t.exits_on_sigint = False
    r.handle_message(Stop(Origin.OPERATOR, "operator stop (isaacd stop)"))
    # the supervisor dies here; the trainer finishes its stop meanwhile
    t.exit = ExitStatus(code=0)
    r2 = runner(world)
    assert r2.state.value == "stopped" and r2.record.model.final and world["rt"].live() == []
    tick(r2, world, 30)
    assert r2.state.value == "stopped" and len(world["rt"].trainers) == 1  # not restarted


def test_stop_in_flight_with_a_live_trainer_is_finished_with_the_old_deadline(world):
    r = runner(world)
    tick(r, world)
    (t,) = world["rt"].live()
    t.exits_on_sigint = False
    r.handle_message(Stop(Origin.OPERATOR, "operator stop (isaacd stop)"))
    tick(r, world, 4)
    r2 = runner(world)  # adopts, and re-sends SIGINT since the trainer never said it saw it
    assert r2.state.value == "stopping" and t.signals == [signal.SIGINT, signal.SIGINT]
    tick(r2, world, 5)
    assert t.exit is None
    tick(r2, world, 1.5)  # 10 s after the stop began, not 10 s after the new supervisor started
    assert t.signals[-1] == signal.SIGKILL
    tick(r2, world)
    assert r2.state.value == "stopped"


def test_backoff_survives_a_supervisor_crash_and_the_restart_stays_counted(world):
    r = runner(world)
    tick(r, world)
    world["rt"].live()[0].exit = ExitStatus(signal=9)
    tick(r, world)
    assert r.state.value == "backing-off" and r.record.model.restarts == 1
    tick(r, world, 2)
    r2 = runner(world)
    tick(r2, world, 2)
    assert r2.state.value == "backing-off" and len(world["rt"].trainers) == 1  # the wait is not skipped
    tick(r2, world, 1.1)
    assert r2.state.value == "starting" and r2.record.model.restarts == 1 and len(world["rt"].live()) == 1


def test_a_supervisor_that_keeps_dying_cannot_let_a_crash_loop_past_max_restarts(world):
    for _ in range(6):
        r = runner(world)
        tick(r, world, 61)
        for t in world["rt"].live():
            t.exit = ExitStatus(code=1)
        tick(r, world)
        if r.state.value == "failed":
            break
    assert r.state.value == "failed" and "restart limit reached: 3 restarts" in (r.record.model.reason or "")


def test_after_a_reboot_the_backoff_is_waited_again_in_full(world):
    r = runner(world)
    tick(r, world)
    world["rt"].live()[0].exit = ExitStatus(signal=9)
    tick(r, world)
    world["clock"] = FakeClock(mono=3.0, boot_id="boot-2")  # monotonic restarted from zero
    r2 = runner(world)
    tick(r2, world, 4.9)
    assert r2.state.value == "backing-off"
    tick(r2, world, 0.2)
    assert r2.state.value == "starting"


@pytest.mark.parametrize("jump", [3 * 3600.0, -2 * 3600.0])
def test_wall_clock_jumps_change_no_deadline(world, jump):
    r = runner(world)
    tick(r, world)
    world["rt"].live()[0].exit = ExitStatus(signal=9)
    tick(r, world)
    world["clock"].wall_time += jump
    tick(r, world, 1)
    assert r.state.value == "backing-off"  # +3 h did not end the 5 s backoff early
    tick(r, world, 4.1)
    assert r.state.value == "starting"  # -2 h did not park it for two hours


def test_full_state_disk_never_starts_an_untracked_trainer_and_recovers_when_space_returns(world):
    r = runner(world, FullDiskStore)
    FullDiskStore.full = True
    try:
        for _ in range(5):
            tick(r, world, 61)
        assert world["rt"].trainers == {}  # nothing a crash could orphan
        assert r.state.value == "backing-off" and "No space left on device" in (r.record.model.reason or "")
        assert r.snapshot().persist_error and "No space left" in r.snapshot().persist_error
    finally:
        FullDiskStore.full = False
    tick(r, world, 61)
    assert r.state.value == "starting" and len(world["rt"].live()) == 1 and r.record.persist_error is None
    assert StateStore(world["dir"]).load("cp").current.handle  # on disk again


def test_full_disk_while_training_keeps_the_trainer_and_saves_when_space_returns(world):
    r = runner(world, FullDiskStore)
    tick(r, world)
    (t,) = world["rt"].live()
    FullDiskStore.full = True
    try:
        r.handle_message(WatchdogTrip("loss_stagnation", "log", "log", "loss flat", {}))  # a decision to save
        for _ in range(3):
            tick(r, world)
        assert r.record.persist_error is not None and "No space left" in r.record.persist_error
        assert world["rt"].live() == [t] and r.state.value == "starting"  # training goes on, no assertion loop
    finally:
        FullDiskStore.full = False
    tick(r, world)
    assert r.record.persist_error is None and events(r, "state_saved")
    assert StateStore(world["dir"]).load("cp").machine["watchdog_trips"] == {"loss_stagnation/log": 1}


def test_operator_start_after_stop_is_not_a_restart(world):
    r = runner(world)
    tick(r, world)
    r.handle_message(Stop(Origin.OPERATOR, "operator stop"))
    tick(r, world)
    assert r.state.value == "stopped"
    assert r.handle_message(Start(Origin.OPERATOR, "operator start")) == "starting"
    tick(r, world)
    assert r.state.value == "starting" and r.record.model.restarts == 0 and len(world["rt"].live()) == 1


def test_history_from_before_the_state_machine_keeps_its_resting_state(world):
    import json

    (world["dir"] / "jobs").mkdir(parents=True)
    (world["dir"] / "jobs" / "cp.json").write_text(json.dumps(
        {"name": "cp", "restarts": 4, "final_state": "stopped", "final_reason": "operator stop", "attempts": []}))
    r = runner(world)
    tick(r, world)
    assert r.state.value == "stopped" and r.record.model.restarts == 4 and world["rt"].trainers == {}


def test_state_dir_file_is_what_a_new_runner_reads(world):
    r = runner(world)
    tick(r, world)
    doc = Path(world["dir"] / "jobs" / "cp.json").read_text()
    assert '"machine"' in doc and '"state": "starting"' in doc


def test_gpu_check_and_gpu_memory_are_given_at_construction_or_set_later(world):
    r = JobRunner(world["cfg"], world["rt"], StateStore(world["dir"]), world["dir"], world["clock"],
                  gpu_check=lambda cfg: "GPU 3 is not on this host", gpu_memory=None)
    r.recover()
    tick(r, world)
    assert r.state.value == "failed" and r.record.model.reason == "cannot start: GPU 3 is not on this host"
    assert world["rt"].trainers == {}
    r.planner.gpu_check = None  # the planner owns the check (the runner handed it over at construction)
    assert r.planner.gpu_check is None
    r.handle_message(Start(Origin.OPERATOR, "operator start"))
    tick(r, world)
    assert r.state.value == "starting" and len(world["rt"].live()) == 1


def test_a_reload_reaches_every_part_of_the_runner(world):
    r = runner(world)
    new = world["cfg"].model_copy(update={"stop_timeout": 3.0})
    r.reconfigure(new)  # what supervisor.py does on a reload
    assert r.setting.cfg is new and r.observer.setting.cfg is new and r.planner.setting.cfg is new
    assert r.spares.cfg is new  # the next spare is started with the new config (e.g. spare = "off")


def test_a_reload_that_changes_the_runtime_while_a_trainer_runs_keeps_the_one_that_started_it(world):
    r = runner(world)
    tick(r, world)
    assert len(world["rt"].live()) == 1
    other = FakeRuntime()
    other.name = "podman"
    new = world["cfg"].model_copy(update={"stop_timeout": 3.0})
    r.reconfigure(new, lambda: other)
    assert r.setting.cfg is new and r.runtime is world["rt"] and r.observer.runtime is world["rt"]


def test_a_reload_that_changes_the_runtime_launches_the_next_attempt_with_the_new_one(world):
    """supervisor.reload hands `runner.reconfigure` the new runtime, taken when no trainer runs: the next start must
    go through it, not through the runtime the runner was built with (the parts used to keep the old one)."""
    r = runner(world)
    tick(r, world)
    (first,) = world["rt"].live()
    r.handle_message(Stop(Origin.OPERATOR, "test"))
    first.exit = ExitStatus(code=0)
    for _ in range(5):
        tick(r, world)
    other = FakeRuntime()
    other.name = "podman"
    r.reconfigure(r.setting.cfg, lambda: other)  # what supervisor.py does on a reload that changes `runtime`
    r.handle_message(Start(Origin.OPERATOR, "test"))
    tick(r, world)
    assert len(other.live()) == 1 and world["rt"].live() == []
    assert r.record.history.attempts[-1].runtime == "podman" and r.runtime is other
