"""The launch pipeline (daemon/launch/, issue 38) without a process: one list of prepare steps for the cold start and
the spare, a refusal that stops the steps after it, and the cold start's preparation on a worker thread, so a launch
whose disk hangs waits (bounded) instead of stalling the tick."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from test_attempt_planner import JOB, World

from isaacd.attempt.planner import LaunchPlan, WaitingForPreparation
from isaacd.attempt.spare_launch import spare_context
from isaacd.jobs.messages import Awaited, LaunchRefused, Settle
from isaacd.jobs.model import LaunchIntent
from isaacd.launch.context import Role
from isaacd.launch.contributions import Env, Refusal
from isaacd.launch.pipeline import prepare
from isaacd.launch.steps import STEPS
from isaacd.os_seam.oscalls import RunAs
from isaacd_trainer.shim_protocol import SPARE_CONTROL_ENV

from os_fakes import FakeOs

CONTAINER_JOB = JOB.replace('spare = false\n', 'spare = true\nruntime = "podman"\n'
                            '[jobs.container]\nimage = "isaac-lab:3.0"\nuser = "1000:1000"\n')


def test_the_cold_start_and_the_spare_run_the_same_steps_and_differ_only_in_their_data(tmp_path: Path):
    w = World(tmp_path, CONTAINER_JOB)
    plan = w.plan()
    assert isinstance(plan, LaunchPlan)
    base = w.state_dir / "spare" / "cp"
    base.mkdir(parents=True)
    (base / "control-tok.fifo").touch()  # (the keeper makes it before the pipeline runs: spare.py _prepare)
    resolved = w.setting.resolved
    assert resolved is not None
    program = resolved.program(in_container=True)
    ctx, staging, _ = spare_context(w.cfg, w.state_dir, resolved, program, "imports", "tok", base / "control-tok.fifo",
                                    base / "events-tok.jsonl", None, w.state_dir / "shim" / "cp")
    kernel = FakeOs()
    spare = prepare(ctx, kernel)
    assert ctx.role == Role.SPARE and staging is None and not isinstance(spare, Refusal)
    cold = plan.spec
    # the job's own part of the environment is the same (one code path); each role adds only its own data
    shared = {k for k in cold.env if k not in ("ISAACD_SHIM_EVENTS", "ISAACD_LAUNCH_TOKEN", "WANDB_RUN_ID",
                                               "WANDB_RESUME")}
    assert {k: spare.env.get(k) for k in shared} == {k: cold.env[k] for k in shared}
    assert SPARE_CONTROL_ENV in spare.env and SPARE_CONTROL_ENV not in cold.env
    assert "WANDB_RUN_ID" in cold.env and "WANDB_RUN_ID" not in spare.env  # the go brings the attempt's
    assert spare.spare and not cold.spare and spare.same_path_mounts == (base, w.state_dir / "shim" / "cp")
    # a numeric container.user gets the spare's FIFO dir and the attempts' events dir, through the seam
    assert {Path(p) for p, _, _ in kernel.chowned} >= {base, base / "control-tok.fifo", w.state_dir / "shim" / "cp"}


def test_a_refusal_stops_the_steps_after_it(tmp_path: Path):
    w = World(tmp_path)
    plan = w.plan()
    assert isinstance(plan, LaunchPlan)
    ran: list[str] = []

    def refuses(ctx, oscalls):  # noqa: ANN001, ANN202
        ran.append("refuses")
        return Refusal("cannot start: owner: nobody here", settle=Settle.FAILED)

    def after(ctx, oscalls):  # noqa: ANN001, ANN202
        ran.append("after")
        return Env({"X": "1"})

    from isaacd.launch.context import LaunchContext
    ctx = LaunchContext(role=Role.ATTEMPT, cfg=w.cfg, state_dir=w.state_dir, owner=None, token="t", events=None,
                        caches=(), experiment_dir=tmp_path, workdir=tmp_path, cwd=tmp_path, log_path=tmp_path / "l",
                        argv=("python",))
    assert prepare(ctx, FakeOs(), (refuses, after)) == Refusal("cannot start: owner: nobody here", Settle.FAILED)
    assert ran == ["refuses"]
    assert prepare(ctx, FakeOs(), (after,)).env == {"X": "1"}  # type: ignore[union-attr]


def test_an_owner_on_a_runtime_that_cannot_run_as_them_is_refused_naming_the_runtime(tmp_path: Path):
    from isaacd.launch.context import LaunchContext
    w = World(tmp_path, JOB.replace('spare = false\n', 'spare = false\nruntime = "ray"\n[ray]\naddress = "auto"\n'))
    owner = RunAs(1234, 1234, (1234,), "ada", "/home/ada")
    ctx = LaunchContext(role=Role.ATTEMPT, cfg=w.cfg, state_dir=w.state_dir, owner=owner, token="t", events=None,
                        caches=(), experiment_dir=tmp_path, workdir=tmp_path, cwd=tmp_path, log_path=tmp_path / "l",
                        argv=("python",))
    kernel = FakeOs()
    refused = prepare(ctx, kernel, STEPS)
    assert isinstance(refused, Refusal) and 'runtime = "ray"' in refused.reason and "ada" in refused.reason
    assert kernel.handed == [] and kernel.opened_state_dirs == []  # nothing made before the refusal


class _Gate:
    """A GPU check that blocks until opened: the preparation's first step, standing in for a hung disk."""

    def __init__(self) -> None:
        self.opened = threading.Event()

    def __call__(self, cfg):  # noqa: ANN001, ANN204
        self.opened.wait(30)
        return None


def test_a_preparation_that_hangs_waits_on_its_worker_and_the_tick_goes_on(tmp_path: Path):
    gate = _Gate()
    w = World(tmp_path)
    w.planner.gpu_check = gate
    first = w.plan()
    # the gate is still shut (it opens below): a plan that waited for the preparation would be a LaunchPlan after
    # the gate's 30 s, so a wait of any length is told from the answer, not from a clock
    assert isinstance(first, WaitingForPreparation) and first.on == Awaited.PREPARATION
    again = w.planner.plan(LaunchIntent(), w.record.history, 1024, waited=True)
    assert isinstance(again, WaitingForPreparation)
    gate.opened.set()
    deadline = time.monotonic() + 10
    while isinstance(again, WaitingForPreparation) and time.monotonic() < deadline:
        time.sleep(0.01)
        again = w.planner.plan(LaunchIntent(), w.record.history, 1024, waited=True)
    assert isinstance(again, LaunchPlan) and again.attempt.number == 1


def test_a_preparation_past_runtime_start_timeout_is_refused_as_a_crash_and_said(tmp_path: Path):
    gate = _Gate()
    w = World(tmp_path)
    w.planner.gpu_check = gate
    assert isinstance(w.plan(), WaitingForPreparation)
    w.clock.advance(w.cfg.launch.runtime_start_timeout + 1)
    refused = w.planner.plan(LaunchIntent(), w.record.history, 1024, waited=True)
    assert isinstance(refused, LaunchRefused) and refused.settle is None  # a crash: backoff, the crash-loop window
    assert "runtime_start_timeout" in refused.reason
    assert [n for n, _ in w.said] == ["launch_timeout"] and w.said[0][1]["wait"] == "launch_preparation"
    # the next launch waits for the hung one to come back first, then prepares afresh
    again = w.plan()
    assert isinstance(again, WaitingForPreparation) and "earlier launch" in again.reason
    gate.opened.set()
    deadline = time.monotonic() + 10
    while isinstance(again, WaitingForPreparation) and time.monotonic() < deadline:
        time.sleep(0.01)
        again = w.planner.plan(LaunchIntent(), w.record.history, 1024, waited=True)
    assert isinstance(again, LaunchPlan)


def test_the_preparations_events_are_written_by_the_tick_in_order(tmp_path: Path):
    w = World(tmp_path)
    w.ran()  # an earlier attempt, no checkpoint: a rollback finds none before the trouble
    plan = w.plan(LaunchIntent(before_iteration=50))
    assert isinstance(plan, LaunchPlan)
    assert [n for n, _ in w.said] == ["rollback_without_checkpoint"]
