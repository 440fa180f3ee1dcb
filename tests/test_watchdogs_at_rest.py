"""Issue 39 at rest with the default watchdogs (the xid and gpu_temperature watchdogs on): a job with no trainer, no
process and no GPU (queued, stopped, done) has nothing to watch, so after one step its watchdogs are not stepped again
at each tick (engine.py `_gpuless`); the moment its trainer starts on a GPU they are, and an XID on that GPU trips it
in that very tick; a queued job whose claim names a GPU still watches it."""

from __future__ import annotations

from pathlib import Path

from helpers import write_config

from isaacd.config.schema import load_config
from isaacd.jobs.messages import WatchdogAction, WatchdogTrip
from isaacd.jobs.model import JobState
from isaacd.status.signals import JobSignals
from isaacd.status.types import JobStatus, WatchdogState
from isaacd.watchdogs.base import GpuReading, XidEvent
from isaacd.watchdogs.engine import WatchdogEngine
from isaacd.watchdogs.gpufeed import FeedTick


class TwoGpus:
    """Two GPUs; `xids` are the next poll's new XIDs, `procs` the PIDs seen on each GPU."""

    def __init__(self) -> None:
        self.xids: list[XidEvent] = []
        self.procs: dict[int, set[int]] = {}
        self.unhealthy: list[int] = []

    def poll(self) -> FeedTick:
        xids, self.xids = self.xids, []
        return FeedTick(readings=[GpuReading(index=i, uuid=f"GPU-{i}", temperature_celsius=40.0) for i in (0, 1)],
                        processes=dict(self.procs), new_xids=xids)

    def set_power_limit(self, gpu: int, watts: float) -> None:
        raise PermissionError

    def mark_unhealthy(self, gpu: int, reason: str) -> None:
        self.unhealthy.append(gpu)


def sig(cfg, name: str, state: JobState, pids: tuple[int, ...] = ()) -> JobSignals:  # noqa: ANN001
    alive = state in (JobState.STARTING, JobState.RUNNING)
    return JobSignals(name=name, cfg=cfg, alive=alive, attempt=1 if alive else 0,
                      attempt_started_at=0.0 if alive else None, first_step=None, iteration=None,
                      last_progress_time=None, pids=pids, state=state)


def count_steps(engine: WatchdogEngine, job: str) -> list[int]:
    calls = [0]
    for wd in engine.sets[job][1].values():
        real = wd.step

        def step(view, real=real):  # noqa: ANN001, ANN202
            calls[0] += 1
            return real(view)
        wd.step = step  # type: ignore[method-assign]
    return calls


def test_a_queued_jobs_watchdogs_rest_and_a_started_jobs_xid_trips_at_once(tmp_path: Path):
    cfgs = load_config(write_config(tmp_path, '[[jobs]]\nname = "q"\ngpu_memory = "80GiB"\n'
                                              '[[jobs]]\nname = "p"\ngpus = [1]\n')).jobs
    q, pinned = cfgs
    feed = TwoGpus()
    engine = WatchdogEngine(feed)
    queued, other = sig(q, "q", JobState.QUEUED), sig(pinned, "p", JobState.QUEUED)
    assert engine.tick(1.0, [queued, other]) == []
    before = engine.job_status(JobStatus(name="q", state="queued"))
    assert before.watchdogs["xid"].state == WatchdogState.OK
    assert before.watchdogs["no_progress"].state == WatchdogState.IDLE
    steps, pinned_steps = count_steps(engine, "q"), count_steps(engine, "p")
    for t in (2.0, 3.0):
        assert engine.tick(t, [queued, other]) == []
    assert steps[0] == 0  # nothing to watch: not stepped
    assert pinned_steps[0] > 0  # its claim names GPU 1: its xid watchdog watches it
    assert engine.job_status(JobStatus(name="q", state="queued")) is before  # the row reads as before
    # a reset-class XID on GPU 1 (the pinned job's): the queued one on no GPU does not see it; the pinned one trips
    feed.xids = [XidEvent(gpu=1, xid=79, time=4.0)]
    said = engine.tick(4.0, [queued, other])
    assert [(n, c.watchdog) for n, c in said] == [("p", "xid")] and steps[0] == 0
    # q's trainer starts on GPU 0 and, in the same tick, GPU 0 reports a reset-class XID: the job is stopped at once
    feed.procs = {0: {4242}}
    feed.xids = [XidEvent(gpu=0, xid=79, time=5.0)]
    said = engine.tick(5.0, [sig(q, "q", JobState.RUNNING, (4242,)), other])
    trips = [c for n, c in said if n == "q"]
    assert len(trips) == 1 and isinstance(trips[0], WatchdogTrip) and trips[0].watchdog == "xid"
    assert trips[0].action == WatchdogAction.STOP and feed.unhealthy == [1, 0]
    row = engine.job_status(JobStatus(name="q", state="running"))
    assert row.watchdogs["xid"].state == WatchdogState.TRIPPED and "XID 79 on GPU 0" in row.watchdogs["xid"].detail
    assert row.watchdogs["no_progress"].state == WatchdogState.WARMUP  # the trainer's watchdogs watch it now


def test_a_job_back_in_the_queue_rests_again_with_its_status_unchanged(tmp_path: Path):
    cfg = load_config(write_config(tmp_path, '[[jobs]]\nname = "q"\ngpu_memory = "80GiB"\n')).jobs[0]
    feed = TwoGpus()
    engine = WatchdogEngine(feed)
    feed.procs = {0: {4242}}
    feed.xids = [XidEvent(gpu=0, xid=13, time=1.0)]  # application class: restart
    said = engine.tick(1.0, [sig(cfg, "q", JobState.RUNNING, (4242,))])
    assert [c.action for _, c in said] == [WatchdogAction.RESTART]
    feed.procs = {}
    stopped = sig(cfg, "q", JobState.QUEUED)
    engine.tick(2.0, [stopped])  # tripped, cooldown 0: ok again, then it rests
    steps = count_steps(engine, "q")
    engine.tick(3.0, [stopped])
    assert steps[0] == 0
    row = engine.job_status(JobStatus(name="q", state="queued"))
    assert row.watchdogs["xid"].state == WatchdogState.OK and row.watchdogs["divergence"].state == WatchdogState.IDLE
