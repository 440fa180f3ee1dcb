"""`isaacd sweep submit FILE` (issue 39): a sweep's trials added in one step, as `isaacd submit` adds one job.

The file is validated first (sweeps/spec.py: each error names the file, the key and the fix; nothing is written). The
trials' configurations are sampled (seeded: the same file gives the same trials), each trial checked as a submitted
job would be (the caller's own, within what a user who is no admin may ask for, a size this host can hold), the
sweep's record saved, every trial's job file written into jobs_dir with `autostart = false` (the sweep starts a trial
when ASHA launches it) and the config reloaded once. A reload that fails takes every file and the record back out:
nothing is left half-submitted, and no running job is touched."""

from __future__ import annotations

import time
from pathlib import Path

from ..access.limits import effective_limits, refusals
from ..access.policy import Caller
from ..config.jobs_dir import job_file, write_all_atomically
from ..config.access import Limits
from ..config.schema import ConfigError, ConfigIssue, JobConfig
from ..config.sizes import gib, size_bytes, written
from ..gpu.snapshot import GpuSnapshot
from ..scheduling.room import mig_layout
from ..scheduling.submit import ONE_AT_A_TIME, Submittable, as_caller, jobs_dir_of, larger_than_host
from .controller import SweepController
from .record import SweepRecord, TrialRecord
from .sampler import sample, trial_name
from .spec import SweepSpec, parse_sweep
from .trial_file import toml_job_file, trial_table


def submit_sweep(sup: Submittable, sweeps: SweepController, text: str, source: str,
                 caller: Caller | None = None) -> str:
    jobs_dir = jobs_dir_of(sup)
    try:
        spec = parse_sweep(text, source, jobs_dir)
    except ConfigError as exc:
        raise ValueError(f"not submitted: {exc}") from None
    values = sample(spec.space, spec.trials, spec.seed)
    tables = [as_caller(sup, trial_table(text, jobs_dir, spec, n, values[n - 1]), source, caller)
              for n in range(1, spec.trials + 1)]
    jobs = [JobConfig.model_validate(t) for t in tables]
    _check(sup, spec, jobs, source, caller)
    owner = (caller.uid, caller.user.gid) if caller is not None and caller.user is not None else None
    with ONE_AT_A_TIME:
        _check_names(sup, sweeps, spec, jobs_dir)
        rec = SweepRecord(name=spec.name, owner=jobs[0].owner, source=source, text=text, base_dir=str(jobs_dir),
                          submitted_at=time.time(),
                          trials=[TrialRecord(n, trial_name(spec.name, n, spec.trials), values[n - 1])
                                  for n in range(1, spec.trials + 1)])
        sweeps.submitted(rec)  # saved first: a supervisor killed now finds the sweep and the files it names
        files = [(job_file(jobs_dir, table["name"]), toml_job_file(table)) for table in tables]
        try:
            write_all_atomically(files, owner)  # every one synced, in one wait for the disk, before any is read
            result = sup.reload()  # once for every trial
        except OSError as exc:  # (none of the files is left)
            result = {"ok": False, "error": f"cannot write a trial's job file into {jobs_dir}: {exc.strerror}"}
        if not result.get("ok"):
            for path, _ in files:
                path.unlink(missing_ok=True)
            sweeps.forget(spec.name)
            raise ValueError(f"not submitted (nothing changed): {result.get('error')}")
    if caller is not None:
        with sup.store.synced_together([job.name for job in jobs]):  # 100 journals, one wait for the disk
            for job in jobs:
                sup.store.append_event(job.name, "operator_command", command="sweep submit", sweep=spec.name,
                                       user=caller.name, uid=caller.uid)
    return (f"sweep {spec.name}: {spec.trials} trials submitted ({jobs[0].name} .. {jobs[-1].name}), at most "
            f"{spec.concurrency} at once, scheduler {spec.scheduler.kind}; `isaacd sweep status {spec.name}`")


def _check(sup: Submittable, spec: SweepSpec, jobs: list[JobConfig], source: str, caller: Caller | None) -> None:
    """Each trial as a submitted job is checked: what a user who is no admin may ask for, a size this host holds; and
    the sweep's concurrency against the user's own quota (trials past it would only wait in the queue)."""
    snap = sup.gpu_snapshot() if sup.gpu_snapshot is not None else None
    if caller is not None and caller.user is not None and not caller.admin:
        for job in jobs:
            issues = refusals(job, caller.user, sup.config.access)
            if issues:
                raise ValueError(f"not submitted: {ConfigError(source, issues)}")
        why = concurrency_over_quota(spec.concurrency, jobs[0], effective_limits(caller.user, sup.config.access),
                                     snap)
        if why is not None:
            raise ValueError(f"not submitted: {ConfigError(source, [ConfigIssue('sweep.concurrency', why)])}")
    too_big = larger_than_host(jobs[0], snap)
    if too_big is not None:
        raise ValueError(f"not submitted: {ConfigError(source, [too_big])}")
    if spec.scheduler.kind == "pbt":  # a population trains all at once: it must fit this host, empty
        fits = members_that_fit(jobs[0], snap)
        if fits is not None and spec.trials > fits:
            why = (f"a population of {spec.trials} trains all at once; this host holds {fits} members of "
                   f"{_size(jobs[0])} each (empty): set trials = {fits} or fewer, or ask less per member")
            raise ValueError(f"not submitted: {ConfigError(source, [ConfigIssue('sweep.trials', why)])}")


def members_that_fit(member: JobConfig, snap: GpuSnapshot | None) -> int | None:
    """How many members of this size an empty host holds at once (whole GPUs: the GPUs over its ranks; gpu_memory:
    each GPU's total over the ask, summed); None when the GPUs or their totals are not known. On a host with GPUs in
    MIG mode (issue 42) the places are the queue's (room.py): a GPU in MIG mode holds no member itself, each of its
    instances that holds the ask holds one member of one rank (held whole), a GPU not in MIG mode as above; None
    while the layout is being made (a GPU in MIG mode with no instance yet, a place with no memory reading)."""
    if snap is None or not snap.up or not member.placed_by_isaacd:
        return None
    if any(info.is_mig or info.mig_mode for info in snap.gpus.values()):
        return _members_on_mig_host(member, snap)
    gpus = [key for key, info in snap.gpus.items() if not info.is_mig]
    if not gpus:
        return None
    ask = member.gpu_memory_bytes
    if ask is None:
        return len(gpus) // max(1, member.ranks)
    totals = [t for k in gpus if (x := snap.samples.get(k)) is not None and (t := x.memory_total_bytes)]
    if not totals:
        return None
    return sum(int(t // ask) for t in totals) // max(1, member.ranks)


def _members_on_mig_host(member: JobConfig, snap: GpuSnapshot) -> int | None:
    where = mig_layout(snap)
    if where is None:
        return None
    ask, ranks = member.gpu_memory_bytes, max(1, member.ranks)
    whole = [g for g in where if not g.mig]
    if ask is None:
        return len(whole) // ranks
    shared = sum(int(g.total_bytes // ask) for g in whole) // ranks
    return shared + (sum(1 for g in where if g.mig and g.total_bytes >= ask) if ranks == 1 else 0)


def _size(member: JobConfig) -> str:
    return written(member.gpu_memory) if member.gpu_memory is not None else f"{member.ranks} GPU(s)"


def concurrency_over_quota(concurrency: int, trial: JobConfig, limits: Limits,
                           snap: GpuSnapshot | None = None) -> str | None:
    """Why `concurrency` trials at once are more than the user's quota lets them hold, with the fix; None when they
    fit (or no quota of that kind is set). A trial asking whole GPUs counts them; one asking gpu_memory counts its
    memory (its share of a GPU against a `gpus` quota depends on the GPU it lands on: the queue holds it to that).
    On a host with GPUs in MIG mode (`snap`, issue 42) a trial of one rank on an instance holds the instance's memory,
    as the queue counts it (room.Gpu.holds): the trials count the least they could hold at once there (the asks on
    GPUs not in MIG mode first, then the smallest instances that hold one), never more than the queue would count,
    so nothing the queue would run within the quota is refused. Where the trials land is the queue's at each start:
    without the layout (no inventory, a layout being made) they count their asks."""
    if limits.gpus is not None and trial.gpu_memory is None and trial.ranks * concurrency > limits.gpus:
        fits = limits.gpus // max(1, trial.ranks)
        return (f"{concurrency} trials at once of {trial.ranks} GPU(s) each is more than your quota of {limits.gpus} "
                f"GPU(s) ([access] gpus): set concurrency = {max(1, fits)} or fewer")
    ask = trial.gpu_memory_bytes
    if limits.gpu_memory is not None and ask is not None:
        quota = size_bytes(limits.gpu_memory)
        held, on_mig = _least_held(trial, ask, concurrency, snap)
        if sum(held) > quota:
            fits = sum(1 for k in range(1, concurrency + 1) if sum(held[:k]) <= quota)
            mig = (f" (on this host {on_mig} of them would each hold a MIG instance whole: at least "
                   f"{gib(sum(held))} in all)" if on_mig else "")
            return (f"{concurrency} trials at once of {written(trial.gpu_memory)} each is more than your quota of "
                    f"{limits.gpu_memory} ([access] gpu_memory){mig}: set concurrency = {max(1, fits)} or fewer")
    return None


def _least_held(trial: JobConfig, ask: int, concurrency: int, snap: GpuSnapshot | None) -> tuple[list[int], int]:
    """The least memory each of `concurrency` trials at once could hold on this host, cheapest first, and how many
    of them on a MIG instance: a rank holds its ask on a GPU not in MIG mode (as many as its memory holds) and an
    instance's memory on an instance (one trial each, of one rank: room.py). Past the host's room, and without a
    layout, a trial counts its ask (the least it holds anywhere), as every trial does on a host without MIG."""
    own = ask * max(1, trial.ranks)
    on_instances = snap is not None and snap.up and trial.placed_by_isaacd and trial.ranks == 1 and any(
        info.is_mig for info in snap.gpus.values())  # (a gang never goes on an instance)
    where = mig_layout(snap) if on_instances and snap is not None else None
    if where is None:
        return [own] * concurrency, 0
    shared = min(concurrency, sum(int(g.total_bytes // ask) for g in where if not g.mig))  # (a tiny ask: millions)
    slots = sorted([ask] * shared + [g.total_bytes for g in where if g.mig and g.total_bytes >= ask])[:concurrency]
    if not slots:
        return [own] * concurrency, 0
    on_mig = sum(1 for b in slots if b > ask)  # (an instance of exactly the ask counts as its ask either way)
    return slots + [ask] * (concurrency - len(slots)), on_mig  # past the room: its ask, as on a host without MIG


def _check_names(sup: Submittable, sweeps: SweepController, spec: SweepSpec, jobs_dir: Path) -> None:
    if spec.name in sweeps.names() or sweeps.store.exists(spec.name):
        raise ValueError(f"not submitted: a sweep named {spec.name} exists already (`isaacd sweep status "
                         f"{spec.name}`); give this one another [sweep] name")
    names = {trial_name(spec.name, n, spec.trials) for n in range(1, spec.trials + 1)}
    taken = sorted(n for n in names if n in sup.job_names() or job_file(jobs_dir, n).exists())
    if taken:
        raise ValueError(f"not submitted: {taken[0]} is a job already ({len(taken)} of the trials' names are taken); "
                         "give the sweep another [sweep] name")
