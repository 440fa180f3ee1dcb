"""A job's entry in the host's queue (issue 31): what it asks for and where it stands, as one record.

A job that asks for GPUs (a count, or `gpu_memory`) rather than naming them has one `QueueEntry`, made in one place
(`queue_entry`, from its config as written and its saved model) and read by each part as its own view:
  * the scheduler (scheduling/scheduler.py) takes the entries as its input, as they are; the queue's hook
    (scheduling/hook.py) adds only the owner's quota groups of the pass;
  * the status (status/types.py `QueueStatus.of`) shows it on the wall clock, its request in words;
  * /metrics reads that status, as it reads every other part.
A new kind of request (MIG slices, a sweep's trials) is a field here, read where it matters.

Pure and stdlib only, like the rest of jobs/: it reads the config through `Asks`, the few properties it needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from .model import JobModel, JobState, Then

GiB = 2**30


@dataclass(frozen=True)
class Request:
    """What a job asks for: `gpus` distinct GPUs (one rank each), `memory_bytes` on each (None: the whole GPU)."""

    gpus: int = 1
    memory_bytes: int | None = None

    def describe(self) -> str:
        each = "a whole GPU" if self.memory_bytes is None else f"{round(self.memory_bytes / GiB, 1):g} GiB"
        if self.gpus == 1:
            return f"1 GPU ({each})" if self.memory_bytes is None else f"{each} on 1 GPU"
        return f"{self.gpus} GPUs ({'whole' if self.memory_bytes is None else each + ' each'})"


@dataclass(frozen=True)
class QueueEntry:
    """A job the queue places: its request, its order, and its place. Times: `submitted_at` and `queued_at` wall
    clock (saved with the job: the order survives a reboot), `placed_at` and `not_before` monotonic."""

    name: str
    request: Request
    priority: int = 0  # higher first
    submitted_at: float | None = None  # the order within a priority: earlier first (None: after every known one)
    preemptible: bool = True
    waiting: bool = False  # queued: it wants GPUs now
    placement: tuple[int | str, ...] = ()  # its places (placed, starting, running, stopping): GPU indices, MIG "p:j"
    placed_at: float | None = None  # when it got them (the minimum run time counts from here)
    backfill: bool = False  # placed ahead of a blocked job: gives its GPUs back the moment that job could run
    preempting: bool = False  # a preemption's stop is under way: its GPUs come free once it has saved
    spare_bytes: int = 0  # GPU memory its warm spare holds on each of its GPUs (counted as its job's)
    owner: str | None = None  # whose job: its owner's quota counts it (None: no quota, the supervisor's own)
    groups: tuple[str, ...] = ()  # the owner's groups with a quota, which count it too (the hook's, each pass)
    # backing off after a failed attempt, until then: it gave its GPUs back and keeps its place in line, but is
    # placed only once the machine has queued it again; it blocks nobody and preempts nobody meanwhile
    not_before: float | None = None
    queued_at: float | None = None  # while it waits: when it last entered the queue (a requeue starts anew)
    preemptions: int = 0
    # run-time estimates (issue 42, scheduling/estimates.py; the queue's hook adds them each pass): a placed job's
    # expected end (monotonic) from its own recent iteration times, a waiting job's expected run (start-up
    # included) from earlier runs of its task, library and num_envs on this host; None: not known
    ends_at: float | None = None
    run_seconds: float | None = None
    overran: bool = False  # it started ahead of a blocked job and ran past its reservation: its estimate is not
    # trusted for that again until one has held

    @property
    def order(self) -> float:
        """Its submission time as the queue sorts it: one not known goes after every known one."""
        return self.submitted_at if self.submitted_at is not None else math.inf


class Asks(Protocol):
    """What the queue reads of a job's config as written (config/schema.py JobConfig)."""

    @property
    def name(self) -> str: ...

    @property
    def placed_by_isaacd(self) -> bool: ...

    @property
    def ranks(self) -> int: ...

    @property
    def gpu_memory_bytes(self) -> int | None: ...

    @property
    def priority(self) -> int: ...

    @property
    def preemptible(self) -> bool: ...

    @property
    def owner(self) -> str | None: ...


def queue_entry(written: Asks, m: JobModel, spare_bytes: int = 0) -> QueueEntry | None:
    """The job's entry, or None for one that names its GPUs (or runs on Ray). `written`: its config as written (the
    placed copy a launch uses names its GPUs); `spare_bytes`: what its live spare holds on each GPU (status/signals.py
    looks, for the scheduler; the status does not show it)."""
    if not written.placed_by_isaacd:
        return None
    waiting = m.state == JobState.QUEUED
    return QueueEntry(
        name=written.name, request=Request(written.ranks, written.gpu_memory_bytes), priority=written.priority,
        submitted_at=m.submitted_at, preemptible=written.preemptible, waiting=waiting, placement=m.placement,
        placed_at=m.placed_at, backfill=m.backfill,
        preempting=m.stop is not None and m.stop.then == Then.QUEUE and m.state == JobState.STOPPING,
        spare_bytes=spare_bytes, owner=written.owner,
        not_before=m.backoff_until if m.state == JobState.BACKING_OFF and not m.placement else None,
        queued_at=m.queued_at if waiting else None, preemptions=m.preemptions)
