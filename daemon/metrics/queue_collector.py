"""The host's queue in /metrics (issue 31): how many jobs wait and for how long, who was preempted, and what the queue
has given out on each GPU. Like the rest of /metrics it reads only the published status (each row's `queue`, a
`QueueStatus`) and the GPU sampler's snapshot; what it exports is defined in catalog.py.

Why one wait series per waiting job, not a longest-wait gauge per priority: the alert a person acts on is "this job
has waited too long", and only a series that names the job can say which one (a per-priority maximum loses the name
and jumps between jobs). It costs nothing in cardinality beyond what every isaacd_job_* family already has (one
series per job, and only while it waits); the `priority` label, fixed per job, lets a panel take the longest wait
per priority without a join.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..config.users import supervisor_user
from ..gpu.snapshot import GpuSnapshot
from ..gpu.types import GpuInfo
from ..jobs.model import JobState
from ..scheduling.room import Gpu, held_on, place_order, places
from ..status.types import JobStatus, QueueStatus
from .families import Families, num

QUEUED = JobState.QUEUED.value
UNKNOWN = "unknown"  # a priority a JSON row gave as no integer


def collect_queue(f: Families, jobs: Sequence[JobStatus], snap: GpuSnapshot | None, now: float,
                  me: str | None = None) -> None:
    """The queue's families from this scrape's rows and snapshot. A host whose jobs all name their GPUs has no
    queue series but the GPUs' allocated (0) and idle memory. `me`: whose a job without an owner is (the
    supervisor's user)."""
    placed = [(j, j.queue) for j in jobs if isinstance(j.queue, QueueStatus)]
    waiting: dict[str, int] = {}
    for job, q in placed:
        prio = _priority(q)
        waiting.setdefault(prio, 0)  # every priority in use from 0: a panel sees the queue drain to 0
        f.add("isaacd_job_queue_info", [job.name, prio, "true" if q.preemptible is True else "false"], 1)
        f.add("isaacd_job_preemptions_total", [job.name], num(q.preemptions))
        if job.state == QUEUED:
            waiting[prio] += 1
            since = _queued_since(job, q)
            if since is not None:
                f.add("isaacd_queue_wait_seconds", [job.name, prio], max(0.0, now - since))
            if (run := num(q.run_seconds)) is not None:
                f.add("isaacd_job_estimated_run_seconds", [job.name], run)
        elif q.placement and (ends := num(q.ends_at)) is not None:
            f.add("isaacd_job_estimated_remaining_seconds", [job.name], ends - now)
        if (err := num(q.estimate_error)) is not None:
            f.add("isaacd_job_estimate_error_ratio", [job.name], err)
    for prio, n in sorted(waiting.items(), key=lambda kv: (kv[0] == UNKNOWN, 0 if kv[0] == UNKNOWN else int(kv[0]))):
        f.add("isaacd_queue_jobs", [prio], n)
    where = {g.index: g for g in places(snap, math.inf)}  # the queue's places, as the quotas read them
    _per_user(f, placed, where, me or supervisor_user())
    if snap is not None and snap.up:
        _gpu_memory(f, [q for _, q in placed], snap)


def _per_user(f: Families, placed: Sequence[tuple[JobStatus, QueueStatus]], where: dict[int | str, Gpu],
              me: str) -> None:
    """Per owner of a job the queue places (issue 32), as the quotas count (scheduling/quota.py, room.Gpu.holds): the
    GPUs their placed jobs hold (a whole GPU 1, a gpu_memory job asked / the GPU's total, a job on a MIG instance
    the instance's share of its GPU; a place without a reading counted whole), the GPU memory (a whole GPU its
    total, an instance its memory), the jobs waiting. Every such owner from 0. Names only: a job's environment and
    credentials are in no label."""
    gpus: dict[str, float] = {}
    memory: dict[str, float] = {}
    waiting: dict[str, int] = {}
    for job, q in placed:
        user = job.owner if isinstance(job.owner, str) and job.owner else me
        gpus.setdefault(user, 0.0)
        memory.setdefault(user, 0.0)
        waiting.setdefault(user, 0)
        if job.state == QUEUED:
            waiting[user] += 1
            continue
        ask = None if q.memory_bytes is None else num(q.memory_bytes)
        for i in q.placement:
            n, b = held_on(where.get(i) if isinstance(i, (int, str)) else None,
                           int(ask) if ask is not None and math.isfinite(ask) else None)
            gpus[user] += n
            memory[user] += b
    for user in sorted(gpus):
        f.add("isaacd_user_gpus", [user], gpus[user])
        f.add("isaacd_user_gpu_memory_allocated_bytes", [user], memory[user])
        f.add("isaacd_user_queued_jobs", [user], waiting[user])


def _priority(q: QueueStatus) -> str:
    p = num(q.priority)
    return str(int(p)) if p is not None and p.is_integer() else UNKNOWN


def _queued_since(job: JobStatus, q: QueueStatus) -> float | None:
    """When the job last entered the queue (wall clock): `queued_since`, saved with the job (exact across supervisor
    restarts; a preempted job's requeue starts its wait anew, though it keeps its submission time for its place).
    A row of an older supervisor without it: from its submission, or, once preempted, its last state change."""
    since = num(q.queued_since)
    if since is not None:
        return since
    submitted, entered = num(q.submitted_at), num(job.state_since)
    if q.preemptions:
        return entered if entered is not None else submitted
    return submitted if submitted is not None else entered


def _gpu_memory(f: Families, queue: Sequence[QueueStatus], snap: GpuSnapshot) -> None:
    """Per place with a memory reading (the places the queue puts jobs on, scheduling/room.py: each physical GPU not
    in MIG mode, each MIG instance): what the placed jobs asked for on it (on an instance, all of it while a job
    holds it), and what is neither asked for nor in use. A GPU in MIG mode has no row: its instances have."""
    in_mig = {info.parent_index for info in snap.gpus.values() if info.is_mig}
    places: dict[int | str, tuple[GpuInfo, float, float | None]] = {}
    for key, info in snap.gpus.items():
        sample = snap.samples.get(key)
        total = num(sample.memory_total_bytes) if sample is not None else None
        if not total or (not info.is_mig and (info.mig_mode or info.index in in_mig)):
            continue  # no reading this pass (a lost GPU): no series, never a guess; a GPU in MIG mode: its instances
        places[key if info.is_mig else info.index] = (info, total, num(sample.memory_used_bytes) if sample else None)
    allocated = dict.fromkeys(places, 0.0)
    for q in queue:
        ask = None if q.memory_bytes is None else num(q.memory_bytes)
        if q.memory_bytes is not None and ask is None:
            continue  # an odd row from JSON: counted as nothing rather than as a whole GPU
        for i in q.placement:
            if isinstance(i, (int, str)) and i in places:
                info, total, _ = places[i]
                # a whole-GPU job holds all of it, and so does a job on an instance (isolation)
                allocated[i] += total if ask is None or info.is_mig else ask
    for i, (info, total, used) in sorted(places.items(), key=lambda kv: place_order(kv[0])):
        base = [info.key, info.uuid, info.model, info.pci_bus_id]
        f.add("isaacd_gpu_memory_allocated_bytes", base, allocated[i])
        f.add("isaacd_gpu_memory_idle_bytes", base, max(0.0, total - max(allocated[i], used or 0.0)))
