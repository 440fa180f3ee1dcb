"""Run-time estimates (issue 42, daemon/scheduling/estimates.py and estimate_store.py): from a job's own TensorBoard
iteration times across a resume, from the history of earlier runs, and what `isaacd status`, `isaacd queue` and
/metrics show of them."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from isaacd.cli.render_queue import estimate_note, format_queue, queue_note
from isaacd.jobs.model import JobState
from isaacd.jobs.queue_entry import QueueEntry, Request
from isaacd.observations.tensorboard import ScalarPoint
from isaacd.scheduling.estimate_store import EstimateStore
from isaacd.scheduling.estimates import SKIP, Estimates, IterationClock, Past, history_key
from isaacd.status.types import JobStatus, QueueStatus, Status

WALL = 1_700_000_000.0  # the wall clock at monotonic 0 in these tests
KEY = history_key("rsl_rl", "Isaac-Cartpole-Direct-v0", 4096)


def points(steps: range, t0: float, every: float, slow_first: float = 0.0) -> list[ScalarPoint]:
    """rsl_rl's points for these steps: two tags per step, the first iteration `slow_first` s slower."""
    out, t = [], t0
    for k, step in enumerate(steps):
        t += every + (slow_first if k == 0 else 0.0)
        out += [ScalarPoint(step, "Loss/value", 1.0, t), ScalarPoint(step, "Train/mean_reward", 2.0, t + 0.001)]
    return out


def sig(state: JobState, attempt: int, new_points: list[ScalarPoint] = (), iteration: int | None = None,
        placement: tuple[int, ...] = (0,), started: float | None = 0.0, checkpoint: int | None = None,
        name: str = "cp", max_iterations: int = 1000) -> SimpleNamespace:
    entry = QueueEntry(name, Request(1, 4 << 30), placement=placement if state != JobState.QUEUED else (),
                       waiting=state == JobState.QUEUED)
    cfg = SimpleNamespace(workflow="rsl_rl", task="Isaac-Cartpole-Direct-v0", num_envs=4096,
                          max_iterations=max_iterations)
    return SimpleNamespace(name=name, cfg=cfg, state=state, attempt=attempt, attempt_started_at=started,
                           new_points=tuple(new_points), iteration=iteration, queue=entry,
                           checkpoint_iteration=checkpoint)


def test_the_rate_leaves_out_the_first_iterations_of_an_attempt():
    clock = IterationClock()
    for p in points(range(0, 30), WALL, 0.5, slow_first=20.0):  # a 20 s first iteration (CUDA graphs, warm-up)
        clock.add(p.step, p.wall_time)
    assert clock.seconds_per_iteration == pytest.approx(0.5)
    early = IterationClock()
    for p in points(range(0, SKIP + 2), WALL, 0.5):
        early.add(p.step, p.wall_time)
    assert early.seconds_per_iteration is None  # too few intervals past the warm-up: no rate yet


def test_a_running_jobs_end_is_its_iterations_left_at_its_recent_rate_across_a_resume():
    est = Estimates()
    # attempt 1: steps 0..99 at 1 s each, then preempted (saved at 99)
    est.observe(200.0, WALL, [sig(JobState.RUNNING, 1, points(range(0, 100), WALL + 10, 1.0), iteration=99)], {})
    end = est.end_and_run("cp")[0]
    assert end == pytest.approx(110 + 900 * 1.0, abs=1)  # its last step at 110 (monotonic), 900 iterations left
    assert est.source("cp") == "rate"
    # queued again: no history yet, so no run estimate; then attempt 2 resumes at 99 twice as fast, with a slow
    # first iteration that must not count
    est.observe(300.0, WALL, [sig(JobState.QUEUED, 1, checkpoint=99)], {})
    assert est.end_and_run("cp")[0] is None and est.end_and_run("cp")[1] is None
    resumed = points(range(99, 140), WALL + 400, 0.5, slow_first=30.0)
    est.observe(500.0, WALL, [sig(JobState.RUNNING, 2, resumed, iteration=139, started=390.0)], {})
    last = resumed[-1].wall_time - WALL
    assert est.end_and_run("cp")[0] == pytest.approx(last + 860 * 0.5, abs=1)


def test_a_job_that_has_not_run_is_estimated_from_the_last_run_of_its_task_library_and_size():
    est = Estimates()
    history = {KEY: Past(seconds_per_iteration=0.5, startup_seconds=30.0)}
    est.observe(0.0, WALL, [sig(JobState.QUEUED, 0, max_iterations=1000)], history)
    assert est.end_and_run("cp")[1] == pytest.approx(30 + 1000 * 0.5)
    est.observe(0.0, WALL, [sig(JobState.QUEUED, 0, name="other")], {})
    assert est.end_and_run("other")[1] is None  # nothing of its kind ran here: not known


def test_a_completed_run_goes_into_the_history_with_its_estimates_error(tmp_path):
    est = Estimates()
    history = {KEY: Past(seconds_per_iteration=0.25, startup_seconds=10.0)}
    est.observe(0.0, WALL, [sig(JobState.STARTING, 1, started=0.0, max_iterations=50)], history)
    said = est.end_and_run("cp")[0]
    assert said == pytest.approx(10 + 50 * 0.25)  # the history's: start-up, then 50 iterations
    run = points(range(0, 50), WALL + 20, 0.5)  # it boots in 20 s and runs at 0.5 s per iteration
    est.observe(50.0, WALL, [sig(JobState.RUNNING, 1, run, iteration=49)], history)
    ended = est.observe(46.0, WALL, [sig(JobState.COMPLETED, 1, placement=())], history)
    assert len(ended) == 1 and ended[0].key == KEY
    assert ended[0].seconds_per_iteration == pytest.approx(0.5)
    assert ended[0].startup_seconds == pytest.approx(20.5)
    errors = {source: took / said for source, said, took in ended[0].errors}
    assert errors["history"] == pytest.approx(46.0 / 22.5)  # it took twice as long as the history said
    store = EstimateStore(tmp_path)
    store.record(KEY, Past(0.5, 20.5))
    assert json.loads((tmp_path / "estimates.json").read_text())["runs"][KEY] == \
        {"seconds_per_iteration": 0.5, "startup_seconds": 20.5}
    assert EstimateStore(tmp_path).runs[KEY] == Past(0.5, 20.5)  # read back by the next supervisor
    assert not list(tmp_path.glob(".estimates.json.*"))  # no temporary file left behind


def test_the_history_keeps_its_newest_entries_across_supervisors(tmp_path, monkeypatch):
    """A host that runs sweeps names thousands of jobs: the document rewritten at each job's end stays bounded, and
    what goes is the oldest (a task run again moves to the newest), in this supervisor and the next."""
    monkeypatch.setattr("isaacd.scheduling.estimate_store.MAX_KEPT", 3)
    store = EstimateStore(tmp_path)
    for n in range(4):
        store.record(f"rsl_rl:task{n}:64", Past(0.1 * (n + 1), 10.0))
    store.record("rsl_rl:task1:64", Past(0.9, 10.0))  # run again: now the newest
    store.record("rsl_rl:task4:64", Past(0.5, 10.0))
    assert list(store.runs) == ["rsl_rl:task3:64", "rsl_rl:task1:64", "rsl_rl:task4:64"]
    for n in range(5):
        store.overran[f"job{n}"] = 100.0 - n  # job4 overran first
        store.errors[f"job{n}"] = {"rate": 1.0}
    store.save()
    again = EstimateStore(tmp_path)
    assert list(again.runs) == ["rsl_rl:task3:64", "rsl_rl:task1:64", "rsl_rl:task4:64"]
    assert again.runs["rsl_rl:task1:64"] == Past(0.9, 10.0)
    assert sorted(again.overran) == ["job0", "job1", "job2"]  # the three latest to overrun
    assert list(again.errors) == ["job2", "job3", "job4"]


def test_an_unreadable_history_is_set_aside_and_the_queue_starts_without_one(tmp_path):
    (tmp_path / "estimates.json").write_text("{torn")
    store = EstimateStore(tmp_path)
    assert store.runs == {} and list(tmp_path.glob("estimates.json.bad-*"))


def row(state: str, **queue) -> JobStatus:  # noqa: ANN003
    return JobStatus("g1", state=state, queue=QueueStatus(request="12 GiB on 1 GPU", **queue))


def test_status_and_queue_say_when_a_job_ends_and_how_long_a_waiting_one_runs():
    now = WALL
    running = row("running", placement=(1,), ends_at=now + 42 * 60)
    assert estimate_note(running, now) == "ends in about 42 min"
    assert queue_note(running, now).endswith("; ends in about 42 min")
    waiting = row("queued", position=1, reason="needs 12 GiB on 1 GPU; 0 with room", starts_at=now + 600,
                  run_seconds=2 * 3600 + 600)
    assert "(starts in about 10 min by the estimates; runs about 2h10m by earlier runs)" in queue_note(waiting, now)
    text = format_queue(Status(jobs=[running, waiting]), now)
    assert "ends in about 42 min" in text and "runs about 2h10m by earlier runs" in text
    assert estimate_note(row("running", placement=(1,)), now) == ""  # not known: nothing said


def test_metrics_export_the_estimates_and_the_last_error():
    from test_metrics import full_setup, one, samples

    from isaacd.metrics import build_registry
    sampler, status = full_setup()
    smp, _ = samples(build_registry(lambda: status, sampler, process_metrics=False))
    assert one(smp, "isaacd_job_estimated_remaining_seconds", job="placed") == pytest.approx(600, abs=30)
    assert one(smp, "isaacd_job_estimated_run_seconds", job="waiter") == 1800
    assert one(smp, "isaacd_job_estimate_error_ratio", job="waiter") == 1.25


# ---- the queue's hook: estimates in, reservations as deadlines, an estimate proved wrong ---------------------------
def test_the_hook_reserves_by_a_running_jobs_own_rate_reuses_its_pass_until_then_and_remembers_an_overrun(
        monkeypatch, tmp_path):
    from test_queue_config import job, snapshot
    from test_queue_pass_reuse import counted
    from test_quota_hook import Lookups

    from isaacd.config.queue import QueueConfig
    from isaacd.scheduling.hook import HostQueue
    from isaacd.scheduling.owners import Owners
    from isaacd.status.signals import JobSignals

    G = 2**30
    calls = counted(monkeypatch)
    q = HostQueue(QueueConfig(min_run_seconds=60), lambda: snapshot({0: 40}), owners=Owners(Lookups(), me="root"))
    q.store = EstimateStore(tmp_path)
    events: list[tuple[str, str, dict]] = []
    q._event = lambda job_, event, **f: events.append((job_, event, f))
    cfg = dict(task="Isaac-Cartpole-Direct-v0", num_envs=64)
    q.store.runs[history_key("builtin", "Isaac-Cartpole-Direct-v0", 64)] = Past(1.0, 10.0)

    def signals(quick_state: JobState, now: float, new: list[ScalarPoint] = ()) -> list[JobSignals]:
        long_ = QueueEntry("long", Request(1, 90 * G), priority=9, submitted_at=0.0, preemptible=False,
                           placement=(0,), placed_at=0.0)
        head = QueueEntry("head", Request(1, 100 * G), submitted_at=1.0, waiting=True)
        running = quick_state != JobState.QUEUED
        quick = QueueEntry("quick", Request(1, 45 * G), submitted_at=2.0, preemptible=False, waiting=not running,
                           placement=(0,) if running else (), placed_at=201.0 if running else None, backfill=running)
        return [JobSignals("long", job(name="long", gpu_memory="90GiB", max_iterations=1000, **cfg), True, 1, 0.0,
                           0, 99, now, tuple(new), state=JobState.RUNNING, queue=long_),
                JobSignals("head", job(name="head", gpu_memory="100GiB", **cfg), False, 0, None, None, None, None,
                           state=JobState.QUEUED, queue=head),
                JobSignals("quick", job(name="quick", gpu_memory="45GiB", max_iterations=100, **cfg), running, 1,
                           201.0 if running else None, None, None, None, state=quick_state, queue=quick)]

    # long's own rate: 1 s per iteration, at iteration 99 of 1000 at t = 110: it ends at about t = 1010
    wall = time.time() - time.monotonic()  # the hook reads the points' wall times on this clock
    cmds = q.tick(200.0, signals(JobState.QUEUED, 200.0, points(range(0, 100), wall + 10, 1.0)))
    end = q.estimates.end_and_run("long")[0]
    assert end == pytest.approx(110 + 900, abs=2)
    assert q.waiting["head"].starts_at == end
    # GPU 0: long's 90 GiB, 50 free; head needs 100, quick 45. Quick, not preemptible, may not run beside head's
    # reservation (40 left then), but it runs 10 + 100 s by the last run of its task here: it ends before it
    assert [(n, type(c).__name__, c.backfill) for n, c in cmds] == [("quick", "Placed", True)]
    assert q.deadlines == {"quick": end}
    # placed and running: the same answer until the next deadline (long's expected end, head's reservation)
    before = len(calls)
    q.tick(201.0, signals(JobState.RUNNING, 201.0))
    q.tick(202.0, signals(JobState.RUNNING, 202.0))
    assert len(calls) == before + 1  # the first of these saw quick placed: a new input; the second reused it
    q.tick(end + 1.0, signals(JobState.RUNNING, end + 1.0))
    assert len(calls) == before + 2  # past the reservation: a new pass
    # quick still runs past the reservation it started ahead of: its estimate proved wrong, and it is remembered
    assert ("quick", "estimate_overran") in [(j, e) for j, e, _ in events]
    assert "quick" in EstimateStore(tmp_path).overran
    assert q._estimated(signals(JobState.QUEUED, end + 2)[2].queue, end + 2).overran


def test_the_jobs_whose_end_or_run_time_changed_are_named_once_for_their_rows():
    # status/publishing.py makes again only the rows a hook names: a changed estimate must be named, once
    est = Estimates()
    history = {KEY: Past(seconds_per_iteration=0.5, startup_seconds=30.0)}
    est.observe(0.0, WALL, [sig(JobState.QUEUED, 0, name="known"), sig(JobState.QUEUED, 0, name="new")], {})
    assert est.take_changed() == set()  # no estimate of either: nothing shown changed
    est.observe(0.2, WALL, [sig(JobState.QUEUED, 0, name="known"), sig(JobState.QUEUED, 0, name="new")], history)
    assert est.take_changed() == set()  # the same inputs (the history's version unchanged): not looked at again
    est.history_changed()  # a run of their kind ended: every waiting job's estimate is made again
    est.observe(0.4, WALL, [sig(JobState.QUEUED, 0, name="known"), sig(JobState.QUEUED, 0, name="new")], history)
    assert est.take_changed() == {"known", "new"} and est.take_changed() == set()
    est.observe(0.6, WALL, [sig(JobState.QUEUED, 0, name="known")], history)  # "new" was cancelled
    assert est.take_changed() == {"new"}
