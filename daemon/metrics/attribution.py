"""Which isaacd job owns a GPU process.

NVML reports host PIDs.  A process belongs to a job when

1. its PID is in the job's ``pids`` (runtime = "process": the supervisor lists the trainer's whole
   process tree) or is the job's warm spare (``spare.pid``), or
2. the job has a ``cgroup`` (container runtimes: the container's / unit's cgroup path, e.g.
   ``/system.slice/isaacd-anymal.service`` or ``libpod-<id>.scope``) and ``/proc/<pid>/cgroup``
   contains that string.

This is the attribution dcgm-exporter can only do under Kubernetes (issue #238 there).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..status.types import JobStatus


def read_cgroup(pid: int, proc_root: str = "/proc") -> str | None:
    try:
        with open(f"{proc_root}/{pid}/cgroup", "rb") as f:
            return f.read(65536).decode(errors="replace")
    except OSError:
        return None


def attribute_pids(pids: Iterable[int], jobs: Iterable[JobStatus], proc_root: str = "/proc") -> dict[int, str]:
    """Map each PID that belongs to a job to the job's name (PIDs of no job are left out).

    The rows may come from JSON (tests, an older supervisor): each value's type is checked before use."""
    by_pid: dict[int, str] = {}
    cgroup_jobs: list[tuple[str, str]] = []
    for job in jobs:
        name = job.name
        if not isinstance(name, str):
            continue
        for p in job.pids:
            if isinstance(p, int) and not isinstance(p, bool):
                by_pid.setdefault(p, name)
        pid = job.pid
        if isinstance(pid, int) and not isinstance(pid, bool):
            by_pid.setdefault(pid, name)
        # the job's warm spare holds a CUDA context of its own: the job's memory too
        spare_pid = job.spare.pid if job.spare is not None else None
        if isinstance(spare_pid, int) and not isinstance(spare_pid, bool):
            by_pid.setdefault(spare_pid, name)
        cg = job.cgroup
        if isinstance(cg, str) and cg.strip("/"):
            cgroup_jobs.append((cg, name))
    # Longest match first: "/a/b" must win over "/a" when both are jobs.
    cgroup_jobs.sort(key=lambda x: -len(_parts(x[0])))
    out: dict[int, str] = {}
    for pid in pids:
        if pid in by_pid:
            out[pid] = by_pid[pid]
        elif cgroup_jobs:
            text = read_cgroup(pid, proc_root)
            if text is None:
                continue
            paths = [_parts(line.split(":", 2)[2]) for line in text.splitlines() if line.count(":") >= 2]
            for cg, name in cgroup_jobs:
                if any(cgroup_contains(path, _parts(cg)) for path in paths):
                    out[pid] = name
                    break
    return out


def _parts(path: str) -> tuple[str, ...]:
    return tuple(p for p in path.strip().split("/") if p)


def cgroup_contains(path: tuple[str, ...], job: tuple[str, ...]) -> bool:
    """``job``'s path components appear contiguously in ``path`` (component-wise "contains": the job
    cgroup ``libpod-ab.scope`` matches ``/machine.slice/libpod-ab.scope/container`` but
    ``/system.slice/foo`` does not match ``/system.slice/foobar.service``)."""
    n = len(job)
    return n > 0 and any(path[i:i + n] == job for i in range(len(path) - n + 1))
