"""A job that ended: cancelled, or removed from the config by a reload, and its runner dropped by the supervisor once
no trainer of it could exist. What it was is archived (history/ended.py): its history document, journal, output
and shim events into `<state_dir>/jobs/.ended/<job>/<ended-at>/`, its run dirs, whole, beside its experiment dir as
`isaacd reset` keeps them (`<experiment>.ended-<ended-at>/`). A job of that name made afterwards is a new job: a
fresh history, a fresh timeline, nothing of the old one to resume from (docs/history.md)."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any, Protocol

from ..access.redact import secret_values
from ..daemon_log import log
from ..clock import Clock
from ..history.ended import HOW_CANCELLED, HOW_REMOVED, EndedJob, archive, archive_folders, find_ended, \
    finish_pending, list_ended
from ..history.store import job_log_path
from ..os_seam.owned_dirs import OwnershipRefused, make_owned_dir
from ..access.owner import OwnerProblem
from ..runtimes.trainer_command import shim_events_path
from .record import JobRecord
from .reset import job_run_dirs
from .setting import JobSetting


def end_job(setting: JobSetting, record: JobRecord, state_dir: Path, wall: float) -> EndedJob:
    """Archive the job (the caller has dropped its runner). Raises OSError when the archive could not be made or
    finished; what it did is finished at the next supervisor start (history/ended.py)."""
    cfg, history, model = setting.cfg, record.history, record.model
    if record.dirty:
        record.persist()  # the archive keeps the newest state
    events = record.store.events(cfg.name)
    how, by = ended_how(events)
    partial, final = archive_folders(state_dir, cfg.name, wall)
    runs_folder, runs = _plan_runs(setting, record, final.name)
    files = [(job_log_path(state_dir, cfg.name), f"{cfg.name}.log"),
             (shim_events_path(state_dir, cfg, 1).parent, "shim"),
             (record.store.journal_path(cfg.name), f"{cfg.name}.events.jsonl"),
             (record.store.doc_path(cfg.name), f"{cfg.name}.json")]  # the document last: until then the job is whole
    first = next((e.get("time") for e in events if isinstance(e.get("time"), (int, float))), None)
    job = EndedJob(
        name=cfg.name, owner=cfg.owner, submitted_at=model.submitted_at if model.submitted_at is not None else first,
        ended_at=wall, how=how, by=by, state=model.state.value, reason=model.reason, iteration=history.last_iteration,
        restarts=model.restarts, attempts=len(history.attempts), runtime=cfg.runtime, folder=str(final),
        runs_folder=str(runs_folder) if runs_folder is not None else None, runs=runs,
        files=tuple((str(p), name) for p, name in files if p.exists()),
        hidden=tuple(sorted(secret_values([*cfg.environment.values(), *cfg.container.environment.values()]))))
    archive(job, partial)
    log.info("job_ended", job=cfg.name, how=how, by=by, folder=job.folder, runs_folder=job.runs_folder)
    return job


class Dropped(Protocol):
    """A runner the supervisor dropped (runner.JobRunner): its parts, read once more."""

    setting: JobSetting
    record: JobRecord


class _Store(Protocol):
    dir: Path


class EndedJobs:
    """The supervisor's part in ending jobs (a base of supervisor.Supervisor, which keeps its runners, the jobs a
    reload removed, its state store and clock): dropping a removed job's runner ends the job, and the control socket's
    read side of ended jobs (control.Controlled `ended`, `ended_jobs`)."""

    runners: dict[str, Any]  # name -> runner.JobRunner (a Dropped)
    _removed: set[str]
    store: _Store
    clock: Clock

    def _finish_ended(self, state_lock: int) -> int:
        """With the state dir's lock held (`state_lock`, returned): the archives a killed supervisor left half made
        are finished before any job is made, so none of those jobs comes back as the old one (history/ended.py)."""
        finish_pending(self.store.dir)
        return state_lock

    def _drop(self, name: str) -> None:
        """The runner goes (no trainer of it can exist any more) and the job has ended: archived, so a job of that
        name added later is a new one (docs/history.md). A failure is logged, never raised: the next start finishes
        a half-made archive."""
        runner: Dropped = self.runners.pop(name)
        self._removed.discard(name)
        try:
            end_job(runner.setting, runner.record, self.store.dir, self.clock.wall())
        except Exception:  # noqa: BLE001 - one job's archive must not take the supervisor's tick down
            log.exception("job_end_failed", job=name)

    def ended(self, job: str, nth: int = 1) -> EndedJob | None:
        """The `nth` newest ended job of that name (1: the newest)."""
        return find_ended(self.store.dir, job, nth)

    def ended_jobs(self, job: str | None = None) -> list[EndedJob]:
        """Every ended job, or those of one name, newest first."""
        return list_ended(self.store.dir, job)


def ended_how(events: list[dict[str, Any]]) -> tuple[str, str | None]:
    """Cancelled (by whom), or removed from the config: the newest operator command in its events says which (a
    cancel is written down before it acts; a reload's removal after, if at all)."""
    last = next((e for e in reversed(events) if e.get("event") == "operator_command"), None)
    if last is not None and last.get("command") == "cancel":
        user = last.get("user")
        return HOW_CANCELLED, user if isinstance(user, str) else None
    return HOW_REMOVED, None


def _plan_runs(setting: JobSetting, record: JobRecord, label: str) -> tuple[Path | None, tuple[tuple[str, str], ...]]:
    """The run dirs' new folder beside the experiment dir (made now, the owner's, as a reset's is) and each move."""
    seen: set[Path] = set()
    runs = [r for r in job_run_dirs(setting, record.history)  # one run dir by two names (a link): moved once
            if not (r.resolve() in seen or seen.add(r.resolve()))]
    if not runs:
        return None, ()
    exp = setting.resolved.workflow.experiment_dir(setting.cfg) if setting.resolved is not None else runs[0].parent
    folder = exp.with_name(f"{exp.name}.ended-{label}")
    try:
        owner = setting.owner()
        if owner is None:
            folder.mkdir(parents=True, exist_ok=True)
        else:  # the owner's own (issue 32), made without following a link of theirs
            make_owned_dir(folder, owner.uid, owner.gid, owner.name)
    except (OwnerProblem, OwnershipRefused) as exc:
        raise OSError(errno.EPERM, f"cannot make {folder}: {exc}") from None
    moves: list[tuple[str, str]] = []
    for run in runs:
        dest = folder / run.name
        if any(d == str(dest) for _, d in moves):  # two run dirs of one name in different places
            dest = folder / f"{run.name}-{len(moves)}"
        moves.append((str(run), str(dest)))
    return folder, tuple(moves)
