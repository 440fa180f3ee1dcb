"""The GPUs part of the published status (status/types.py GpusStatus, ``"gpus"`` in ``isaacd status --json``),
built from the GPU sampler's snapshot."""

from __future__ import annotations

from collections.abc import Iterable

from ..gpu.assign import assigned_keys
from ..gpu.sampler import GpuSnapshot
from ..gpu.types import xid_class
from ..status.types import GpuDeviceStatus, GpuProcessStatus, GpusStatus, JobStatus, XidStatus
from .attribution import attribute_pids


def gpu_status(snap: GpuSnapshot, jobs: Iterable[JobStatus] = (), *, proc_root: str = "/proc") -> GpusStatus:
    """The collector's state and a row per device: identity, the latest fast fields (None = not reported), the
    active clock event reasons, processes (attributed to jobs), jobs (names of isaacd jobs seen using it),
    assigned (names of jobs whose gpus/device claim it, by isaacd.gpu.assign), xids (by code: count, last_seen,
    class) and health ("ok", "lost", or "unhealthy: <reason>"); placed (jobs the host's queue placed on it) and
    asked_bytes (the GPU memory it gave them), from the jobs' rows, whatever NVML sees."""
    jobs = list(jobs)
    owner, claims, placed = _attributed(jobs, snap, proc_root)
    devices = []
    for key, info in snap.gpus.items():
        s = snap.samples.get(key)
        procs = list(s.processes or ()) if s is not None else []
        if key in snap.unhealthy:
            health = f"unhealthy: {snap.unhealthy[key]}"
        elif key in snap.failing:
            health = "lost" if snap.failing[key] == "gpu_lost" else f"error: {snap.failing[key]}"
        elif s is None:
            health = "no data yet"
        else:
            health = "ok"
        devices.append(GpuDeviceStatus(
            index=key, uuid=info.uuid, model=info.model, pci_bus_id=info.pci_bus_id, mig=info.is_mig,
            **{f: getattr(s, f) if s is not None else None for f in _FAST},
            utilization_ratio=s.utilization_gpu_ratio if s is not None else None,
            memory_utilization_ratio=s.utilization_memory_ratio if s is not None else None,
            clock_event_reasons=tuple(sorted(s.clock_event_reason_names)) if s is not None else (),
            processes=tuple(GpuProcessStatus(pid=p.pid, used_bytes=p.used_bytes, job=owner.get(p.pid)) for p in procs),
            jobs=tuple(sorted({owner[p.pid] for p in procs if p.pid in owner})),
            assigned=tuple(sorted(name for name, keys in claims.items() if key in keys)),
            placed=tuple(sorted({name for name, _ in placed.get(key, ())})),
            asked_bytes=_asked(placed.get(key), s.memory_total_bytes if s is not None else None),
            xids={str(x): XidStatus(count=c.count, last_seen=c.last_seen, xid_class=xid_class(x))
                  for (g, x), c in sorted(snap.xids.items()) if g == key},
            health=health))
    return GpusStatus(up=snap.up, reason=snap.reason, source=snap.source, driver_version=snap.driver.driver_version,
                      xid_watch=snap.xid_watch, devices=tuple(devices))


Attributed = tuple[dict[int, str], dict[str, set[str]], dict[str, list[tuple[str, int | None]]]]
# the last answer of `_attributed` and what it was worked out from (the same row objects, GPUs and processes)
_LAST: list[tuple[list[JobStatus], object, frozenset[int], str, Attributed]] = []


def _attributed(jobs: list[JobStatus], snap: GpuSnapshot, proc_root: str) -> Attributed:
    """Whose each GPU process is, the GPUs each job claims and those the queue placed it on: the last publish's
    answer again while the rows are the same objects (issue 39: 1,000 unchanged rows at rest), the GPUs and their
    processes the same, and no row has a cgroup (a container's processes are found by reading /proc each time)."""
    pids = frozenset(p.pid for p in snap.processes)
    if _COUNTED and _COUNTED[0][0] == jobs:  # the same rows as the last publish (compared by identity first, in C)
        jobs = _COUNTED[0][1]
    else:
        global _COUNTS
        seen, _COUNTS = _COUNTS, {}  # this publish's rows only
        counted = [j for j in jobs if _counts(j, seen)]  # a row with none of those facts adds nothing to the three
        _COUNTED[:] = [(list(jobs), counted)]
        jobs = counted
    last = _LAST[0] if _LAST else None
    if last is not None and last[2] == pids and last[3] == proc_root and last[1] == snap.gpus \
            and len(last[0]) == len(jobs) and all(a is b for a, b in zip(last[0], jobs)):
        return last[4]
    out = (attribute_pids(pids, jobs, proc_root) if jobs else {}, _claims(jobs, snap), placements(jobs))
    _LAST[:] = [(jobs, dict(snap.gpus), pids, proc_root, out)] if not any(j.cgroup for j in jobs) else []
    return out


# the last publish's rows and those of them that count (`_counts`): the same rows, the same answer, no row asked
_COUNTED: list[tuple[list[JobStatus], list[JobStatus]]] = []
# id(row) -> (the row, whether it has a process, cgroup, GPU claim or placement): asked once per row made
_COUNTS: dict[int, tuple[JobStatus, bool]] = {}


def _counts(j: JobStatus, seen: dict[int, tuple[JobStatus, bool]]) -> bool:
    """The row has something the GPU table reads (pids, a pid, a spare's pid, a cgroup, a GPU claim, a placement):
    a queued job's row has none (issue 39: 1,000 of them looked at for nothing at every publish)."""
    hit = seen.get(id(j))
    if hit is None or hit[0] is not j:
        spare = j.spare
        hit = (j, bool(j.pids or j.pid is not None or (spare is not None and spare.pid is not None) or j.cgroup
                       or j.gpus or (j.queue is not None and j.queue.placement)))
    _COUNTS[id(j)] = hit
    return hit[1]


def _claims(jobs: list[JobStatus], snap: GpuSnapshot) -> dict[str, set[str]]:
    """Job name -> the GPU keys its gpus/device claim, for the jobs that claim one: worked out once per distinct claim
    (issue 39: 1,000 queued jobs, most claiming nothing until the queue places them)."""
    memo: dict[object, set[str]] = {}
    out = {}
    for j in jobs:
        claim = j.gpus if isinstance(j.gpus, str) else tuple(j.gpus)
        keys = memo.get(claim)
        if keys is None:
            keys = memo[claim] = set(assigned_keys(j.gpus, snap))
        if keys:
            out[str(j.name)] = keys
    return out


def placements(jobs: Iterable[JobStatus]) -> dict[str, list[tuple[str, int | None]]]:
    """GPU key -> (job, GPU memory it was given there; None: the whole GPU) of every job the host's queue placed: the
    queue's own record (a job's queue.placement), so a placed job shows on its GPUs before (or without) NVML seeing
    a process of it (a scripted host, a trainer on the CPU, one still starting)."""
    out: dict[str, list[tuple[str, int | None]]] = {}
    for j in jobs:
        q = j.queue
        if q is None:
            continue
        for index in q.placement:
            out.setdefault(str(index), []).append((str(j.name), q.memory_bytes))
    return out


def _asked(placed: list[tuple[str, int | None]] | None, total: int | None) -> int | None:
    """The memory the queue gave the jobs placed on one GPU (a whole-GPU job: its total; unknown: not counted)."""
    if not placed:
        return None
    return sum(b if b is not None else (total or 0) for _, b in placed)


# the sample's fields a device row shows under the same name
_FAST = ("temperature_celsius", "memory_temperature_celsius", "thermal_margin_celsius", "power_watts",
         "power_limit_watts", "sm_clock_hertz", "memory_clock_hertz", "memory_used_bytes", "memory_total_bytes")
