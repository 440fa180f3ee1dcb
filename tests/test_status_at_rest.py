"""Issue 39, the supervisor at rest: a job that nothing moves (no trainer, spare, launch or backup) keeps its last
status row, signals and watchdog statuses instead of making them again at every tick, and the serialised status
keeps each row's text. What a user must still see: any change in the very next status, never a stale row."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from helpers import NoGpus, wait_for, write_config
from job_fakes import FakeClock, FakeRuntime

from isaacd.caches.sizes import SizeSampler
from isaacd.config.queue import QueueConfig
from isaacd.scheduling.hook import HostQueue
from isaacd.scheduling.owners import Owners
from test_queue_config import snapshot
from test_queue_pass_reuse import entry as queue_entry, sig as queue_sig
from test_quota_hook import Lookups
from isaacd.gpu import GpuSampler, ManualClock, ScriptedSource
from isaacd.metrics.status import gpu_status
from isaacd.config.schema import load_config, parse_config
from isaacd.jobs import machine
from isaacd.jobs.messages import Start, Stop, Tick
from isaacd.jobs.model import JobModel, JobState, Origin
from isaacd.history.store import StateStore
from isaacd.runner import TICK_IDLE, JobRunner, tick_moves
from isaacd.status.signals import JobSignals
from isaacd.status.sweeps import SweepStatus
from isaacd.status.types import GpusStatus, JobStatus, QueueStatus, Status, SupervisorInfo, WatchdogState
from isaacd.watchdogs.engine import WatchdogEngine

JOB = '[[jobs]]\nname = "cp"\ncommand = ["sleep", "600"]\nmax_iterations = 100\nstop_timeout = 10.0\n'


@pytest.fixture()
def stopped(tmp_path: Path) -> tuple[JobRunner, FakeClock]:
    """A job stopped before its first launch: no trainer, nothing moving."""
    clock = FakeClock()
    r = JobRunner(parse_config(JOB, "t.toml", tmp_path).jobs[0], FakeRuntime(), StateStore(tmp_path / "s"),
                  tmp_path / "s", clock)
    r.recover()
    r.handle_message(Stop(Origin.OPERATOR, "operator stop (isaacd stop)"))
    clock.advance(0.2)
    r.tick(clock.monotonic())
    assert r.state == JobState.STOPPED and r.handle is None
    # its first row asked for its compile caches' sizes, walked on a thread of the sampler's: the row after the walk
    wait_for(lambda: r.snapshot() is r.snapshot(), 10, what="the compile caches' sizes measured")
    return r, clock


def test_a_still_jobs_row_and_signals_are_the_last_ones_until_something_changes(stopped, tmp_path: Path):
    r, clock = stopped
    row, sig = r.snapshot(), r.signals()
    clock.advance(0.2)
    assert r.tick(clock.monotonic()) is True  # settled: the supervisor looks for no trainer of it
    assert r.snapshot() is row and r.signals() is sig  # nothing changed: not made again
    r.handle_message(Start(Origin.OPERATOR, "operator start"))  # the next status shows it, no tick needed
    assert r.snapshot().state == "pending" and r.signals().state == JobState.PENDING
    r.handle_message(Stop(Origin.OPERATOR, "operator stop (isaacd stop)"))
    assert r.snapshot().state == "stopped"
    r.reconfigure(parse_config(JOB.replace("max_iterations = 100", "max_iterations = 7"), "t.toml", tmp_path).jobs[0])
    assert r.snapshot().max_iterations == 7 and r.signals().cfg.max_iterations == 7
    assert r.snapshot() is r.snapshot()
    r.handle_message(Start(Origin.OPERATOR, "operator start"))
    clock.advance(0.2)
    assert r.tick(clock.monotonic()) is False  # a settled job wakes at a message: its next tick launches the trainer
    row = r.snapshot()
    assert row.state == "starting" and row.pid is not None and r.signals().alive


def test_a_settled_jobs_tick_leaves_the_machine_alone_and_its_row_follows_the_next_message(stopped, monkeypatch):
    r, clock = stopped
    decided: list[object] = []
    real = machine.decide
    monkeypatch.setattr(machine, "decide", lambda m, msg, ctx: decided.append(msg) or real(m, msg, ctx))
    for _ in range(3):
        clock.advance(0.2)
        r.tick(clock.monotonic())
    assert decided == []  # settled: no Tick asked of the machine
    r.handle_message(Start(Origin.OPERATOR, "operator start"))
    assert r.snapshot().state == "pending"


def test_a_row_is_made_again_when_the_wall_clock_steps(stopped):
    r, clock = stopped
    row = r.snapshot()
    assert r.snapshot() is row
    clock.wall_time += 3600.0  # NTP stepped the wall clock an hour: the row's wall-clock times move with it
    assert r.snapshot() is not row


def test_the_machine_decides_nothing_on_a_tick_where_the_runner_skips_it():
    """The runner skips the Tick (runner.tick_moves) only where jobs/machine.py `_tick` returns the model as it is."""
    ctx = machine.Context("a", 1e6, parse_config(JOB, "t.toml", Path("/")).jobs[0].restart, 10.0,
                          placed_by_isaacd=True)
    for state in [*TICK_IDLE, JobState.QUEUED]:
        m = JobModel(state=state)
        assert not tick_moves(m, placed_by_isaacd=True)
        d = machine.decide(m, Tick(), ctx)
        assert d.model is m and d.effects == (), state
    assert tick_moves(JobModel(state=JobState.QUEUED), placed_by_isaacd=False)
    assert tick_moves(JobModel(state=JobState.PENDING), placed_by_isaacd=True)


def test_a_queued_jobs_watchdogs_sleep_and_wake_with_its_trainer(tmp_path: Path):
    text = '[[jobs]]\nname = "a"\n[jobs.watchdogs.xid]\nenabled = false\n[jobs.watchdogs.gpu_temperature]\nenabled = false\n'
    cfg = load_config(write_config(tmp_path, text)).jobs[0]
    engine = WatchdogEngine(NoGpus())

    def sig(alive: bool, attempt: int) -> JobSignals:
        return JobSignals(name="a", cfg=cfg, alive=alive, attempt=attempt, attempt_started_at=0.0 if alive else None,
                          first_step=None, iteration=None, last_progress_time=None,
                          state=JobState.RUNNING if alive else JobState.QUEUED)

    engine.tick(100.0, [sig(False, 0)])
    row = JobStatus(name="a", state="queued")
    shown = engine.job_status(row)
    assert shown.watchdogs["no_progress"].state == WatchdogState.IDLE
    wd = engine.sets["a"][1]["no_progress"]
    wd.state = WatchdogState.PENDING  # were it stepped, a job without a trainer would read ok again
    engine.tick(100.2, [sig(False, 0)])
    assert wd.state == WatchdogState.PENDING  # asleep: not stepped
    assert engine.job_status(row) is shown  # the same row, no watchdog stepped: the last answer
    engine.tick(100.4, [sig(True, 1)])  # its trainer started: watched at once
    running = engine.job_status(JobStatus(name="a", state="running"))
    assert running.watchdogs["no_progress"].state in (WatchdogState.OK, WatchdogState.WARMUP)


def test_the_size_samplers_version_moves_only_when_a_walk_finds_another_size():
    now, walks, sizes = [0.0], [], {Path("/c"): 10}
    s = SizeSampler(every=60.0, clock=lambda: now[0], walk=lambda p: sizes[p], spawn=lambda fn: walks.append(fn))
    assert s.due()
    assert s.size(Path("/c")) is None and not s.due()  # the walk asked for is under way
    walks.pop()()
    assert s.version == 1 and s.size(Path("/c")) == 10 and not s.due()
    now[0] = 61.0
    assert s.due()
    s.size(Path("/c"))
    walks.pop()()
    assert s.version == 1  # the same size: rows made before are still right
    now[0], sizes[Path("/c")] = 122.0, 11
    s.size(Path("/c"))
    walks.pop()()
    assert s.version == 2


def test_the_status_text_is_the_json_of_the_status_and_follows_a_changed_row():
    a, b = JobStatus(name="a", state="queued", scalars={"x": 1.5}), JobStatus(name="b", state="stopped")
    st = Status(jobs=(a, b), supervisor=SupervisorInfo(version="1"), gpus=GpusStatus(),
                sweeps=(SweepStatus(name="s"),))
    assert st.to_json_text() == json.dumps(st.to_json(), default=str)
    st2 = replace(st, jobs=(a, replace(b, state="pending")))
    assert json.loads(st2.to_json_text())["jobs"][1]["state"] == "pending"
    assert Status().to_json_text() == json.dumps(Status().to_json(), default=str)


def test_the_gpu_table_follows_a_job_the_queue_placed_while_the_other_rows_stay():
    """metrics/status.py keeps whose each GPU is while the rows are the same objects: a changed row is seen at once."""
    clock = ManualClock(1_700_000_000.0)
    sampler = GpuSampler(ScriptedSource({"gpus": 2, "defaults": {"memory_used_bytes": 0}}, clock=clock), clock=clock)
    sampler.poll_fast()
    snap = sampler.snapshot()
    waiting = [JobStatus(name=f"q{i}", state="queued") for i in range(3)]
    before = gpu_status(snap, waiting)
    assert [d.placed for d in before.devices] == [(), ()] and gpu_status(snap, waiting).devices == before.devices
    placed = JobStatus.from_json({"name": "q1", "state": "starting", "queue": {"placement": [1], "memory_bytes": 2**30}})
    after = gpu_status(snap, [waiting[0], placed, waiting[2]])
    assert [d.placed for d in after.devices] == [(), ("q1",)]


def test_a_queued_jobs_row_is_kept_across_a_new_queue_pass_only_while_its_place_and_reason_are_the_same():
    q = HostQueue(QueueConfig(min_run_seconds=60), lambda: snapshot({0: 40}), owners=Owners(Lookups(), me="root"))
    first, second = queue_entry("first", order=1.0), queue_entry("second", order=2.0)  # first is placed, second waits
    q.tick(100.0, [queue_sig(first), queue_sig(second)])
    row = JobStatus(name="second", state="queued", queue=QueueStatus(request="100 GiB on 1 GPU"))
    shown = q.job_status(row)
    assert shown.queue.position == 1
    q.tick(100.2, [queue_sig(first), queue_sig(second), queue_sig(queue_entry("third", order=3.0))])  # a new pass
    assert q.job_status(row) is shown  # its place and reason the same: the row kept (and its serialised text)
    urgent = queue_entry("urgent", priority=5, order=4.0)
    q.tick(100.4, [queue_sig(first), queue_sig(second), queue_sig(urgent)])  # one goes ahead of it: seen at once
    assert q.job_status(row).queue.position == 2 and q.job_status(row).state_reason.startswith("queued #2")
