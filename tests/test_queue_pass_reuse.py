"""The queue hook reuses its last pass while nothing it reads has changed (scheduling/hook.py, scheduler.stable_until;
issue 39's scale goal: 1,000 queued jobs were scheduled five times a second at rest), and only then."""

from __future__ import annotations

import math
from dataclasses import replace

from isaacd.config.queue import QueueConfig
from isaacd.jobs.queue_entry import QueueEntry, Request
from isaacd.scheduling import hook
from isaacd.scheduling.hook import HostQueue
from isaacd.scheduling.owners import Owners
from isaacd.scheduling.scheduler import Limits, stable_until
from isaacd.status.signals import JobSignals
from test_queue_config import job, snapshot
from test_quota_hook import Lookups

GiB = 2**30


def entry(name: str, placement: tuple[int, ...] = (), placed_at: float | None = None, priority: int = 0,
          order: float = 1.0, not_before: float | None = None) -> QueueEntry:
    return QueueEntry(name, Request(1, 100 * GiB), priority=priority, submitted_at=order, preemptible=True,
                      waiting=not placement, placement=placement, placed_at=placed_at, not_before=not_before)


def sig(e: QueueEntry) -> JobSignals:
    return JobSignals(e.name, job(name=e.name, gpu_memory="100GiB"), False, 0, None, None, None, None, queue=e)


def test_stable_until_is_the_next_instant_the_time_can_change_the_answer():
    limits = Limits(min_run_seconds=60)
    assert stable_until([entry("q"), entry("old", (0,), placed_at=0.0)], 100.0, limits) == math.inf
    assert stable_until([entry("young", (0,), placed_at=90.0), entry("q")], 100.0, limits) == 150.0
    assert stable_until([entry("q", not_before=120.0)], 100.0, limits) == 100.0  # its countdown: never reused


def counted(monkeypatch) -> list[float]:  # noqa: ANN001
    calls: list[float] = []
    real = hook.schedule

    def spy(jobs, gpus, now, *a):  # noqa: ANN001, ANN002
        calls.append(now)
        return real(jobs, gpus, now, *a)

    monkeypatch.setattr(hook, "schedule", spy)
    return calls


def test_the_same_inputs_give_the_last_answer_without_a_pass_and_a_change_or_a_deadline_a_new_pass(monkeypatch):
    calls = counted(monkeypatch)
    q = HostQueue(QueueConfig(min_run_seconds=60), lambda: snapshot({0: 40}), owners=Owners(Lookups(), me="root"))
    young = entry("young", (0,), placed_at=90.0)
    urgent = entry("urgent", priority=5, order=2.0)
    signals = [sig(young), sig(urgent), sig(entry("low", order=3.0))]
    assert q.tick(100.0, signals) == []
    said = dict(q.waiting)
    assert "not preempting young (ran under min_run_seconds = 60)" in said["urgent"].reason
    assert q.tick(100.2, signals) == [] and q.tick(149.0, signals) == []
    assert calls == [100.0] and q.waiting == said  # nothing changed: one pass, the same places and reasons
    # young's minimum run time is over: the same inputs now give another answer, and it is computed
    cmds = q.tick(150.0, signals)
    assert calls == [100.0, 150.0] and [(name, type(c).__name__) for name, c in cmds] == [("young", "Preempt")]
    # an entry that changes (a job submitted, placed, stopped...) is a new pass at once
    signals = [sig(young), sig(replace(urgent, priority=0)), sig(entry("low", order=3.0))]
    q.tick(150.2, signals)
    assert calls == [100.0, 150.0, 150.2]
    # and so is a GPU that changed (here marked unhealthy; its memory in use, as NVML reads it, counts the same)
    q.gpu_snapshot = lambda: snapshot({0: 40}, {"0": "xid 79"})
    q.tick(150.4, signals)
    assert calls == [100.0, 150.0, 150.2, 150.4]


def test_a_queued_rows_place_and_reason_follow_each_new_pass(monkeypatch):
    from isaacd.status.types import JobStatus, QueueStatus

    q = HostQueue(QueueConfig(min_run_seconds=60), lambda: snapshot({0: 40}), owners=Owners(Lookups(), me="root"))
    young, low = entry("young", (0,), placed_at=90.0), entry("low", order=3.0)
    row = JobStatus(name="low", state="queued", queue=QueueStatus.of(low, 0.0))
    q.tick(100.0, [sig(young), sig(low)])
    assert q.job_status(row).state_reason.startswith("queued #1: needs 100 GiB on 1 GPU")
    assert q.job_status(row) == q.job_status(row)
    q.tick(100.2, [sig(young), sig(entry("urgent", priority=5, order=2.0)), sig(low)])  # a job ahead of it
    assert q.job_status(row).state_reason.startswith("queued #2: needs 100 GiB on 1 GPU")
    q.gpu_snapshot = lambda: None  # the GPUs unknown: the same job, another reason
    q.tick(100.4, [sig(young), sig(low)])
    assert "no GPU inventory" in q.job_status(row).state_reason
    q.gpu_snapshot = lambda: snapshot({0: 40})  # back, the inputs of the first pass again: its answer again
    q.tick(100.6, [sig(young), sig(low)])
    assert q.job_status(row).state_reason.startswith("queued #1: needs 100 GiB on 1 GPU")
