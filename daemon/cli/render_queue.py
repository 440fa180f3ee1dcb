"""The host's queue as a person reads it (issue 31): `isaacd queue`, and each placed job's line in `isaacd status`.
Pure functions over the status the control socket answers."""

from __future__ import annotations

from .columns import aligned
from .durations import age
from ..status.types import JobStatus, Status

GiB = 2**30


def _gpus(j: JobStatus) -> str:
    q = j.queue
    if q is None or not q.placement:
        return "-"
    return ",".join(str(i) for i in q.placement)


def _backfill(preemptible: object) -> str:
    return ("backfill: gives its GPUs back when the blocked job could run" if preemptible is not False else
            "backfill: beside the blocked job's reservation, or on an estimate that ends before it")


def about(seconds: float) -> str:
    """A duration as a person says it of an estimate: "about 42 min", "about 3h10m"."""
    m = max(round(seconds / 60), 1)
    return f"about {m} min" if m < 60 else f"about {m // 60}h{m % 60:02d}m"


def estimate_note(j: JobStatus, now: float) -> str:
    """Its run-time estimate in words (issue 42): when a placed job ends, how long a waiting one runs and when its
    reservation starts it; "" when none is known."""
    q = j.queue
    if q is None:
        return ""
    if j.state != "queued" and q.placement and isinstance(q.ends_at, (int, float)):
        left = q.ends_at - now
        return f"ends in {about(left)}" if left > 0 else "past its estimated end"
    out = []
    if j.state == "queued" and isinstance(q.starts_at, (int, float)):
        out.append(f"starts in {about(max(q.starts_at - now, 0))} by the estimates")
    if j.state == "queued" and isinstance(q.run_seconds, (int, float)):
        out.append(f"runs {about(q.run_seconds)} by earlier runs")
    return "; ".join(out)


def queue_note(j: JobStatus, now: float) -> str | None:
    """`isaacd status`'s line for a job the queue places: its place and why it waits, or its GPUs and memory."""
    q = j.queue
    if q is None:
        return None
    prio = f"priority {q.priority}{'' if q.preemptible else ', not preemptible'}"
    if j.state == "queued":
        since = q.queued_since or q.submitted_at
        waited = f", waiting {age(since, now)}" if since else ""
        place = f"#{q.position} " if q.position else ""
        est = estimate_note(j, now)
        return (f"  {j.name} queue: {place}asks {q.request} ({prio}{waited}): {q.reason or 'waiting for GPUs'}"
                + (f" ({est})" if est else ""))
    if q.placement:
        mem = "whole" if q.memory_bytes is None else f"{round(q.memory_bytes / GiB, 1):g} GiB asked on each"
        where = "GPU"
        if any(isinstance(i, str) for i in q.placement):  # a MIG instance "p:j" (issue 42): held whole, alone
            where, mem = "MIG", f"{round((q.memory_bytes or 0) / GiB, 1):g} GiB asked, the instance held whole"
        extra = f"; started ahead of a blocked job ({_backfill(q.preemptible)})" if q.backfill else ""
        pre = f"; preempted {q.preemptions}x so far" if q.preemptions else ""
        est = estimate_note(j, now)
        return f"  {j.name} queue: {where} {_gpus(j)} ({mem}; {prio}){extra}{pre}" + (f"; {est}" if est else "")
    return None


def format_queue(st: Status, now: float) -> str:
    """`isaacd queue`: the waiting jobs in the order they will start, then the placed ones, with their GPUs."""
    placed_by_queue = [j for j in st.jobs if j.queue is not None]
    waiting = sorted((j for j in placed_by_queue if j.state == "queued"),
                     key=lambda j: (j.queue.position or 10**9, j.name))  # type: ignore[union-attr]
    holding = sorted((j for j in placed_by_queue if j.state != "queued" and j.queue and j.queue.placement),
                     key=lambda j: (-j.queue.priority, j.name))  # type: ignore[union-attr]
    if not placed_by_queue:
        return "no job asks the queue for GPUs (gpus = N or gpu_memory in a job; see docs/queue.md)"
    header = ["#", "JOB", "STATE", "PRIORITY", "ASKS", "GPUS", "WAITED", "WHY"]
    rows = []
    for j in waiting + holding:
        q = j.queue
        assert q is not None
        waited = age(q.queued_since or q.submitted_at, now) if j.state == "queued" else "-"
        why = (q.reason or "waiting for GPUs") if j.state == "queued" else (
            _backfill(q.preemptible) if q.backfill else "")
        est = estimate_note(j, now)
        why = f"{why}; {est}" if why and est else (why or est)
        rows.append([str(q.position) if j.state == "queued" and q.position else "-", j.name, j.state,
                     f"{q.priority}{'' if q.preemptible else '!'}", q.request, _gpus(j), waited, why])
    lines = aligned([header, *rows])
    lines.append(f"{len(waiting)} waiting, {len(holding)} placed; a priority marked ! is not preemptible")
    return "\n".join(lines)
