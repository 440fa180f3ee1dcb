"""The launch planner (attempt/planner.py) and the starter (attempt/starter.py) without a process: a fake runtime,
a fake clock and files in tmp_path. The planner answers with a value (a plan, a refusal for the machine, a wait)
and writes nothing; the starter saves the attempt with its token before the runtime is asked to start it."""

from __future__ import annotations

from pathlib import Path

import pytest

from backup_fakes import fake_checkpoint
from job_fakes import FakeClock, FakeRuntime, SupervisorCrash

from isaacd.attempt.observer import AttemptObserver
from isaacd.attempt.planner import LaunchPlan, LaunchPlanner
from isaacd.attempt.record import JobRecord
from isaacd.attempt.setting import JobSetting
from isaacd.attempt.starter import AttemptStarter
from isaacd.runner import apply_spare
from isaacd.config.schema import parse_config
from isaacd.jobs.messages import LaunchRefused
from isaacd.jobs.model import LaunchIntent, Origin
from isaacd.attempt.spare import SpareKeeper
from isaacd.history.store import Attempt, StateStore

JOB = '[[jobs]]\nname = "cp"\nmax_iterations = 100\nnum_envs = 1024\nlog_root = "logs"\nspare = false\n'
RUN = "2026-01-01_00-00-00_cp"


class World:
    def __init__(self, tmp_path: Path, job: str = JOB, gpu_problem: str | None = None):
        self.cfg = parse_config(job, "t.toml", tmp_path).jobs[0]
        self.state_dir, self.clock, self.rt = tmp_path / "state", FakeClock(), FakeRuntime()
        self.setting = JobSetting.of(self.cfg)
        self.store = StateStore(self.state_dir)
        self.record = JobRecord(self.setting, self.store, self.state_dir, self.clock)
        self.said: list[tuple[str, dict]] = []
        self.planner = LaunchPlanner(self.setting, self.rt.name, self.state_dir, self.clock,
                                     lambda name, **f: self.said.append((name, f)), lambda program: None,
                                     lambda: None, gpu_check=lambda cfg: gpu_problem)
        self.run_dir = tmp_path / "logs" / "rsl_rl" / "cp" / RUN

    def ran(self) -> None:
        """An earlier attempt trained in run_dir (the timeline the resume choice walks)."""
        self.record.history.attempts.append(Attempt(number=1, started_at=1.0, reason="initial",
                                                    run_dir=str(self.run_dir), ended_at=2.0, exit={"code": 1}))

    def plan(self, intent: LaunchIntent = LaunchIntent(), num_envs: int = 1024):  # noqa: ANN201
        return self.planner.plan(intent, self.record.history, num_envs)

    def starter(self) -> AttemptStarter:
        observer = AttemptObserver(self.setting, self.rt, self.clock, self.record)
        spares = SpareKeeper(self.cfg, self.rt, self.state_dir, lambda *a, **k: None)
        # the runner's interpreter hands in its acts (runner.py: _spawn, apply_spare)
        return AttemptStarter(self.setting, self.rt, self.record, observer, spares, spawn=self.rt.start,
                              apply_spare=lambda effects: apply_spare(spares, effects))


def test_a_fresh_job_is_planned_as_attempt_1_from_scratch_and_nothing_is_written(tmp_path):
    w = World(tmp_path)
    plan = w.plan()
    assert isinstance(plan, LaunchPlan)
    a = plan.attempt
    assert (a.number, a.resume_from, a.runtime, a.reason) == (1, None, "process", "initial")
    assert a.token and plan.spec.token == a.token and plan.spec.attempt == 1
    assert plan.shim_events == w.state_dir / "shim" / "cp" / "attempt-1.jsonl" and a.shim_events == str(plan.shim_events)
    assert "--resume" not in plan.args and plan.spec.argv[-len(plan.args):] == plan.args
    # no attempt saved and nothing said; the launch pipeline (issue 38: launch/steps.py side_channel, once the
    # starter's) has made the attempt's events dir ready, with no old events file in it to replay
    assert w.record.history.attempts == [] and w.said == []
    assert plan.shim_events.parent.is_dir() and not plan.shim_events.exists()


def test_the_newest_complete_checkpoint_is_resumed_from(tmp_path):
    w = World(tmp_path)
    for i in (2, 4):
        fake_checkpoint(w.run_dir / f"model_{i}.pt", i)
    w.ran()
    (w.run_dir / "model_6.pt").write_bytes(b"torn")  # half-written: never chosen
    plan = w.plan()
    assert isinstance(plan, LaunchPlan) and plan.attempt.resume_from["iteration"] == 4
    assert plan.attempt.number == 2 and RUN in plan.run_dirs_before
    assert plan.args[plan.args.index("--checkpoint") + 1] == "^model_4[.]pt$"


def test_a_rollback_resumes_strictly_before_the_trouble(tmp_path):
    w = World(tmp_path)
    for i in (2, 4, 6):
        fake_checkpoint(w.run_dir / f"model_{i}.pt", i)
    w.ran()
    plan = w.plan(LaunchIntent("rollback", Origin.WATCHDOG, before_iteration=6, new_seed=True))
    assert isinstance(plan, LaunchPlan) and plan.attempt.resume_from["iteration"] == 4
    assert plan.seed is not None and plan.attempt.reason == "rollback"


def test_a_rollback_without_an_earlier_checkpoint_starts_from_scratch_and_says_so(tmp_path):
    w = World(tmp_path)
    plan = w.plan(LaunchIntent("rollback", Origin.WATCHDOG, before_iteration=6))
    assert isinstance(plan, LaunchPlan) and plan.attempt.resume_from is None
    assert [name for name, _ in w.said] == ["rollback_without_checkpoint"]


def test_a_missing_gpu_is_a_refusal_for_good_not_a_settle(tmp_path):
    w = World(tmp_path, gpu_problem="GPU 3 is not on this host")
    plan = w.plan()
    assert plan == LaunchRefused("cannot start: GPU 3 is not on this host", settle="failed")
    assert w.record.model.state.value == "pending"  # the machine decides what the refusal means


def test_a_checkpoint_at_max_iterations_is_a_refusal_that_completes(tmp_path):
    w = World(tmp_path)
    fake_checkpoint(w.run_dir / "model_99.pt", 99)
    w.ran()
    plan = w.plan()
    assert isinstance(plan, LaunchRefused) and plan.settle == "completed" and "max_iterations reached" in plan.reason


def test_a_stepped_down_num_envs_reaches_the_trainers_arguments(tmp_path):
    w = World(tmp_path)
    plan = w.plan(num_envs=512)
    assert isinstance(plan, LaunchPlan) and plan.num_envs == 512
    assert plan.args[plan.args.index("--num_envs") + 1] == "512"


def test_attempt_numbers_follow_the_history(tmp_path):
    w = World(tmp_path)
    first = w.plan()
    assert isinstance(first, LaunchPlan)
    w.record.history.attempts.append(first.attempt)
    second = w.plan()
    assert isinstance(second, LaunchPlan) and second.attempt.number == 2 and second.attempt.token != first.attempt.token


def test_the_starter_saves_the_token_before_the_spawn_and_the_handle_after(tmp_path):
    w = World(tmp_path)
    plan = w.plan()
    assert isinstance(plan, LaunchPlan)
    w.rt.crash_in_start = True  # the supervisor dies inside the runtime's start
    with pytest.raises(SupervisorCrash):
        w.starter().start(plan)
    saved = StateStore(w.state_dir).load("cp").current
    assert saved is not None and saved.token == plan.attempt.token and saved.handle == {}
    assert plan.shim_events is not None and plan.shim_events.parent.is_dir()
    w.rt.crash_in_start = False
    w2 = World(tmp_path)
    plan2 = w2.plan()
    assert isinstance(plan2, LaunchPlan) and w2.starter().start(plan2) is None
    (t,) = w2.rt.live()
    saved = StateStore(w2.state_dir).load("cp").current
    assert saved.handle == {"pid": t.pid} and saved.token == t.token
    assert [name for name, _ in w2.said] == [] and w2.store.events("cp")[-1]["event"] == "started"


def test_a_runtime_that_fails_to_start_is_a_refusal_that_counts(tmp_path):
    w = World(tmp_path)
    plan = w.plan()
    assert isinstance(plan, LaunchPlan)
    w.rt.fail_start = "podman: no such image"
    refused = w.starter().start(plan)
    assert refused == LaunchRefused("failed to start: podman: no such image")
    assert w.record.history.current.exit is not None  # no open attempt left for recovery to adopt


def test_a_resets_launch_resumes_from_nothing_and_starts_the_timeline_and_a_new_wandb_run(tmp_path):
    """`isaacd reset`: even a checkpoint left on the timeline (a run dir its runner could not see) is not resumed, and
    a restart after the fresh attempt counts only what came since."""
    w = World(tmp_path)
    fake_checkpoint(w.run_dir / "model_4.pt", 4)
    w.ran()
    before = w.plan()
    w.clock.advance(3600.0)
    fresh = w.plan(LaunchIntent("operator reset", Origin.OPERATOR, fresh=True))
    assert isinstance(fresh, LaunchPlan) and fresh.attempt.resume_from is None and fresh.attempt.fresh
    assert "--checkpoint" not in fresh.args
    assert fresh.spec.env["WANDB_RUN_ID"] != before.spec.env["WANDB_RUN_ID"]
    w.record.history.attempts.append(fresh.attempt)
    after = w.plan(LaunchIntent("killed by signal 9", Origin.CRASH))
    assert isinstance(after, LaunchPlan) and after.attempt.resume_from is None and not after.attempt.fresh
    assert after.spec.env["WANDB_RUN_ID"] == fresh.spec.env["WANDB_RUN_ID"]
