"""`isaacd submit FILE` and `isaacd cancel JOB` (issue 31): jobs added and removed without editing the host config.

A submitted job is one file in `[supervisor] jobs_dir` (config/jobs_dir.py), written atomically, then applied as a
reload applies any change; it survives a supervisor restart because it is a file. A request this host can never
hold (more GPUs than it has, more gpu_memory than its largest GPU; with GPUs in MIG mode, what the queue's room says
can never fit: whole GPUs or ranks past the GPUs not in MIG mode, more gpu_memory than any instance or such GPU) is
refused naming what the host has. The answer says what the queue's first pass after the reload made of it: placed
on which GPUs, or its place and why it waits. A cancel moves the file aside and reloads: the job stops with a save
(a reload's removal) and its runner goes once the trainer is gone; its history and logs stay in the state dir, its
file in `jobs_dir/.cancelled/`. A file that does not validate is refused before it is written, naming the file, the
key and the fix; a reload that fails after it is written (a clash with another file) takes it back out. Either way
no running job is touched.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from ..access.limits import refusals
from ..access.policy import Caller, submit_refusal
from ..config.jobs_dir import DropInError, job_file, parse_drop_in, read_drop_ins, set_aside, with_paths_under, \
    write_atomically
from ..config.schema import Config, ConfigError, ConfigIssue, JobConfig, check_job_table
from ..config.sizes import gib, written
from ..gpu.snapshot import GpuSnapshot
from ..status.types import JobStatus, Status
from ..jobs.queue_entry import Request
from .room import Room, mig_layout, place_name

ONE_AT_A_TIME = threading.Lock()  # two submits of one name must not both find the name free


class Journal(Protocol):
    def append_event(self, job: str, event: str, **fields: Any) -> dict[str, Any]: ...

    def synced_together(self, jobs: Collection[str]) -> AbstractContextManager[None]: ...  # (history/store.py)


class Submittable(Protocol):
    config: Config
    config_path: str | None
    store: Journal

    gpu_snapshot: Callable[[], GpuSnapshot] | None  # the host's GPUs (the sampler's latest view), None: no GPU layer

    def reload(self) -> dict[str, Any]: ...

    def job_names(self) -> Collection[str]: ...

    def status(self) -> Status: ...


def jobs_dir_of(sup: Submittable) -> Path:
    d = sup.config.supervisor.jobs_dir
    if d is None:
        raise ValueError(f"{sup.config_path or 'this supervisor'}: [supervisor] jobs_dir is not set, so there is no "
                         'place for submitted jobs; add jobs_dir = "/etc/isaacd/jobs.d" and restart the supervisor')
    return d


def as_caller(sup: Submittable, table: dict[str, Any], source: str, caller: Caller | None) -> dict[str, Any]:
    """The job table as `caller` submits it (issue 32): theirs (owner = their name, as their file's owner makes it
    when it is read back); a user who is no admin may not name another owner."""
    if caller is None:  # in-process (tests): the file is the supervisor's, as before
        return table
    why = submit_refusal(caller, table.get("owner"), sup.config.supervisor.admin_group)
    if why is not None:
        raise ValueError(f"not submitted: {source}: {why}")
    return table if table.get("owner") is not None else {**table, "owner": caller.name}


def submit_job(sup: Submittable, text: str, source: str, caller: Caller | None = None) -> str:
    """`caller`: who asked (the control socket's peer); the file is chowned to them, so the job is theirs."""
    jobs_dir = jobs_dir_of(sup)
    try:
        drop_in = parse_drop_in(text, Path(source))
        job = check_job_table(with_paths_under(as_caller(sup, drop_in.job, source, caller), jobs_dir), source)
    except (DropInError, ConfigError) as exc:
        raise ValueError(f"not submitted: {exc}") from None
    if caller is not None and caller.user is not None and not caller.admin:
        issues = refusals(job, caller.user, sup.config.access)  # what a user who is no admin may not ask for
        if issues:
            raise ValueError(f"not submitted: {ConfigError(source, issues)}")
    too_big = larger_than_host(job, sup.gpu_snapshot() if sup.gpu_snapshot is not None else None)
    if too_big is not None:
        raise ValueError(f"not submitted: {ConfigError(source, [too_big])}")
    path = job_file(jobs_dir, job.name)
    with ONE_AT_A_TIME:
        if path.exists():
            raise ValueError(f"not submitted: {job.name} is already submitted ({path}); `isaacd cancel {job.name}` "
                             "first, or give this job another name")
        if job.name in sup.job_names():
            raise ValueError(f"not submitted: a job named {job.name} is already supervised (in "
                             f"{sup.config_path}, or still stopping after its cancel); give this job another name")
        owner = (caller.uid, caller.user.gid) if caller is not None and caller.user is not None else None
        write_atomically(path, text, owner)
        result = sup.reload()
        if not result.get("ok"):
            path.unlink(missing_ok=True)
            raise ValueError(f"not submitted (nothing changed): {result.get('error')}")
        if caller is not None:  # who submitted it, in its events (issue 32)
            sup.store.append_event(job.name, "operator_command", command="submit", user=caller.name, uid=caller.uid)
    where = first_pass(sup, job.name, 2.0 + 2 * sup.config.supervisor.tick_interval)
    see = f"`isaacd queue`, `isaacd status {job.name}`" if job.placed_by_isaacd else f"`isaacd status {job.name}`"
    return f"submitted as {path}: {where} ({see})"


def larger_than_host(job: JobConfig, snap: GpuSnapshot | None) -> ConfigIssue | None:
    """A placed job this host can never hold, said with what the host has; None when it fits an empty host, or
    when the GPUs are not known (no inventory is never a reason to refuse: the job waits, saying why)."""
    if not job.placed_by_isaacd or snap is None or not snap.up:
        return None
    key = f'jobs[0] (name = "{job.name}")'
    if any(info.is_mig or info.mig_mode for info in snap.gpus.values()):
        return _never_on_mig_host(job, snap, key)
    gpus = sorted((info.index, k) for k, info in snap.gpus.items())
    if not gpus:
        return None
    indices = ", ".join(str(i) for i, _ in gpus)
    if job.ranks > len(gpus):
        return ConfigIssue(f"{key}.gpus", f"asks {job.ranks} GPUs; this host has {len(gpus)} (GPU {indices}): lower "
                                          f"gpus to {len(gpus)} or fewer")
    ask = job.gpu_memory_bytes
    totals = {i: t for i, k in gpus if (s := snap.samples.get(k)) is not None and (t := s.memory_total_bytes)}
    if ask is None or not totals or job.gpu_memory is None:
        return None
    large = sorted(i for i, t in totals.items() if t >= ask)
    if len(large) >= job.ranks:
        return None
    biggest = max(totals, key=lambda i: (totals[i], -i))
    has = f"the largest is GPU {biggest} with {gib(totals[biggest])} (NVML's total)"
    if job.ranks == 1:
        return ConfigIssue(f"{key}.gpu_memory", f"{written(job.gpu_memory)} is more than any GPU here holds: {has}; "
                                                "lower gpu_memory")
    return ConfigIssue(f"{key}.gpu_memory", f"asks {job.ranks} GPUs with {written(job.gpu_memory)} each; this host has "
                                            f"{len(large)} that large ({has}); lower gpu_memory or gpus")


def _never_on_mig_host(job: JobConfig, snap: GpuSnapshot, key: str) -> ConfigIssue | None:
    """On a host with GPUs in MIG mode (issue 42), the queue's own answer (room.py: Room.possible, and Room.never's
    reason): a whole GPU or a gang only on GPUs not in MIG mode, one rank of a gpu_memory job on an instance that
    holds it. None while a GPU in MIG mode has no instance yet, or a place has no memory reading: its layout is being
    made (an instance appears at isaacd's restart), so the job waits, saying why, rather than being refused."""
    where = mig_layout(snap)
    if where is None:
        return None
    room = Room.of(where, (), ())
    req = Request(job.ranks, job.gpu_memory_bytes)
    if room.possible(req):
        return None
    shape = Request(req.gpus, None if req.memory_bytes is None else 1)  # its GPUs and ranks, whatever its memory
    return ConfigIssue(f"{key}.{'gpu_memory' if room.possible(shape) else 'gpus'}", room.never(req, queued=False))


def first_pass(sup: Submittable, name: str, timeout: float) -> str:
    """What is true of a just-added job once the supervisor has ticked with it (the queue's pass ran before that
    tick's status was published): "placed on GPU 1, starting", "queued #2: needs ...", or its state."""
    deadline = time.monotonic() + timeout
    while True:
        row = next((j for j in sup.status().jobs if j.name == name), None)
        said = None if row is None else _said(row)
        if said is not None:
            return said
        if time.monotonic() >= deadline:
            return "added; the queue has not taken it up yet"
        time.sleep(0.05)


def _said(row: JobStatus) -> str | None:
    if row.state == "pending":  # not ticked yet (the reload publishes it at once): every job leaves pending at its
        return None            # first tick (jobs/machine.py _tick: queued, or launched)
    q = row.queue
    if q is None:  # a job that names its GPUs (or none): no queue
        return row.state + (f" ({row.state_reason})" if row.state_reason else "")
    if q.placement:
        if any(isinstance(p, str) for p in q.placement):  # a MIG instance (issue 42): "placed on MIG 0:1"
            return f"placed on {', '.join(place_name(p) for p in q.placement)}, {row.state}"
        return f"placed on GPU{'s' if len(q.placement) > 1 else ''} {', '.join(map(str, q.placement))}, {row.state}"
    if q.position is not None:
        return row.state_reason or f"queued #{q.position}: {q.reason}"
    return None if row.state == "queued" else row.state + (f" ({row.state_reason})" if row.state_reason else "")


def cancel_job(sup: Submittable, name: str) -> str:
    jobs_dir = jobs_dir_of(sup)
    with ONE_AT_A_TIME:
        try:
            path = next((d.path for d in read_drop_ins(jobs_dir) if d.name == name), None)
        except DropInError as exc:
            raise ValueError(f"not cancelled: {exc}") from None
        if path is None:
            if name in sup.job_names():
                raise ValueError(f"not cancelled: {name} is not a submitted job (it is in {sup.config_path}); "
                                 f"`isaacd stop {name}` stops it, removing it from that file drops it")
            raise KeyError(f"no submitted job named {name!r} in {jobs_dir}")
        kept = set_aside(path)
        result = sup.reload()
        if not result.get("ok"):
            os.replace(kept, path)
            raise ValueError(f"not cancelled (nothing changed): {result.get('error')}")
    return (f"cancelled: it saves at its next iteration boundary and leaves the queue; its file is kept as {kept}. "
            f"Once it has stopped, `isaacd events {name}`, `isaacd logs {name}` and `isaacd history` show what it "
            "was; a job submitted again under this name is a new job")
