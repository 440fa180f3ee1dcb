"""`isaacd submit FILE` and `isaacd cancel JOB` (issue 31): jobs added and removed without editing the host config.

A submitted job is one file in `[supervisor] jobs_dir` (config/jobs_dir.py), written atomically, then applied as a
reload applies any change; it survives a supervisor restart because it is a file. A cancel moves the file aside and
reloads: the job stops with a save (a reload's removal) and its runner goes once the trainer is gone; its history and
logs stay in the state dir, its file in `jobs_dir/.cancelled/`. A file that does not validate is refused before it is
written, naming the file, the key and the fix; a reload that fails after it is written (a clash with another file)
takes it back out. Either way no running job is touched.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Any, Protocol

from ..access.limits import refusals
from ..access.policy import Caller, submit_refusal
from ..config.jobs_dir import DropInError, job_file, parse_drop_in, read_drop_ins, set_aside, with_paths_under, \
    write_atomically
from ..config.schema import Config, ConfigError, check_job_table

_ONE_AT_A_TIME = threading.Lock()  # two submits of one name must not both find the name free


class Journal(Protocol):
    def append_event(self, job: str, event: str, **fields: Any) -> dict[str, Any]: ...


class Submittable(Protocol):
    config: Config
    config_path: str | None
    store: Journal

    def reload(self) -> dict[str, Any]: ...

    def job_names(self) -> Collection[str]: ...


def _jobs_dir(sup: Submittable) -> Path:
    d = sup.config.supervisor.jobs_dir
    if d is None:
        raise ValueError(f"{sup.config_path or 'this supervisor'}: [supervisor] jobs_dir is not set, so there is no "
                         'place for submitted jobs; add jobs_dir = "/etc/isaacd/jobs.d" and restart the supervisor')
    return d


def _as_caller(sup: Submittable, table: dict[str, Any], source: str, caller: Caller | None) -> dict[str, Any]:
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
    jobs_dir = _jobs_dir(sup)
    try:
        drop_in = parse_drop_in(text, Path(source))
        job = check_job_table(with_paths_under(_as_caller(sup, drop_in.job, source, caller), jobs_dir), source)
    except (DropInError, ConfigError) as exc:
        raise ValueError(f"not submitted: {exc}") from None
    if caller is not None and caller.user is not None and not caller.admin:
        issues = refusals(job, caller.user, sup.config.access)  # what a user who is no admin may not ask for
        if issues:
            raise ValueError(f"not submitted: {ConfigError(source, issues)}")
    path = job_file(jobs_dir, job.name)
    with _ONE_AT_A_TIME:
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
    where = "queued until the GPUs it asks for are free" if job.placed_by_isaacd else "starting"
    return f"submitted as {path}: {where} (`isaacd queue`, `isaacd status {job.name}`)"


def cancel_job(sup: Submittable, name: str) -> str:
    jobs_dir = _jobs_dir(sup)
    with _ONE_AT_A_TIME:
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
    return (f"cancelled: it saves at its next iteration boundary and leaves the queue; its file is kept as {kept}, "
            "its history and logs in the state dir")
