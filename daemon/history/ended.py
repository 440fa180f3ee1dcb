"""Ended jobs: a job cancelled (`isaacd cancel`) or removed from the config by a reload, whose runner the supervisor
dropped once no trainer of it could exist. Its history leaves the live jobs' place, whole, for an archive of its
own, so a new job of that name starts a fresh timeline while the old one stays readable (`isaacd events JOB`,
`isaacd logs JOB`, `isaacd history`; docs/history.md):

    <state_dir>/jobs/.ended/<job>/<ended-at>/   ended.json (what ended, when, how, and every move)
                                                <job>.json, <job>.events.jsonl, <job>.log, shim/

and its run dirs beside its experiment dir, as `isaacd reset` keeps them (`<experiment>.ended-<ended-at>/`).

Crash consistency: an archive is made in a hidden folder beside where it will be (`.<ended-at>.partial`). First the
plan, `ended.json`, written atomically: the record and every move (from where, to where), worked out before any
move; then each move, a rename (whole or not at all); last the folder renamed to its name. A supervisor killed at any
step finds the partial folder at its next start (`finish_pending`, before any job is made) and completes the moves
its plan names: the history is never lost, and the old job's document is out of `jobs/` before a job of that name
can be made again, so it is never revived. A partial folder without a plan was killed before its first move: it is
removed, and the job's files are where they were.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..daemon_log import log
from .log_source import AttemptOutput, LogSource
from .store import JobHistory, atomic_write_json, read_journal

PLAN = "ended.json"
PARTIAL = ".partial"
HOW_CANCELLED = "cancelled"
HOW_REMOVED = "removed from the config"


def ended_root(state_dir: Path) -> Path:
    return Path(state_dir) / "jobs" / ".ended"


@dataclass(frozen=True)
class EndedJob:
    """One ended job, as its archive's `ended.json` says (times: wall clock)."""

    name: str
    owner: str | None  # None: the supervisor's user's job, as for a live job
    submitted_at: float | None
    ended_at: float
    how: str  # HOW_CANCELLED or HOW_REMOVED
    by: str | None  # who cancelled it (its events' operator_command), when known
    state: str  # its last state and reason
    reason: str | None
    iteration: int | None  # the last iteration it logged
    restarts: int
    attempts: int
    runtime: str
    folder: str  # the archive: its history, journal and log
    runs_folder: str | None  # where its run dirs went (None: it had none)
    runs: tuple[tuple[str, str], ...] = ()  # (where a run dir was, where it is)
    files: tuple[tuple[str, str], ...] = ()  # (where a file was, its name in the archive)
    hidden: tuple[str, ...] = field(default=(), repr=False)  # its environment values: scrubbed for other users

    def to_json(self) -> dict[str, Any]:
        """What a reader is shown: everything but the values to hide."""
        d = asdict(self)
        d.pop("hidden")
        return d

    @classmethod
    def from_json(cls, d: Any) -> "EndedJob":
        """Raises ValueError on a damaged record."""
        if not isinstance(d, dict):
            raise ValueError("expected a JSON object")
        try:
            return cls(name=str(d["name"]), owner=d.get("owner"), submitted_at=d.get("submitted_at"),
                       ended_at=float(d["ended_at"]), how=str(d["how"]), by=d.get("by"), state=str(d["state"]),
                       reason=d.get("reason"), iteration=d.get("iteration"), restarts=int(d.get("restarts", 0)),
                       attempts=int(d.get("attempts", 0)), runtime=str(d.get("runtime", "process")),
                       folder=str(d["folder"]), runs_folder=d.get("runs_folder"),
                       runs=tuple((str(a), str(b)) for a, b in d.get("runs") or ()),
                       files=tuple((str(a), str(b)) for a, b in d.get("files") or ()),
                       hidden=tuple(str(v) for v in d.get("hidden") or ()))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not an ended job's record: {exc}") from None

    def describe(self) -> str:
        """One line: when and how it ended, its last state and reason."""
        how = f"{self.how} by {self.by}" if self.by else self.how
        why = f" ({self.reason})" if self.reason else ""
        at = f", at iteration {self.iteration}" if self.iteration is not None else ""
        return f"{self.name} has ended: {how} at {clock(self.ended_at)}; last state {self.state}{why}{at}"

    def where(self) -> str:
        runs = f"; its run dirs in {self.runs_folder}" if self.runs_folder else ""
        return f"its history and logs are in {self.folder}{runs}"

    def moved(self, path: str) -> str:
        """Where a file the job's history names (a log, a run dir) is now."""
        for src, dst in self.runs:
            if path == src or path.startswith(src + "/"):
                return dst + path[len(src):]
        for src, name in self.files:
            if path == src or path.startswith(src + "/"):
                return str(Path(self.folder) / name) + path[len(src):]
        return path


def clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def archive_folders(state_dir: Path, name: str, wall: float) -> tuple[Path, Path]:
    """(partial, final) folders for an archive of `name` ended at `wall`: named after the local time, like a reset's
    folder; a second end within one second gets a suffix."""
    base = ended_root(state_dir) / name
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(wall))
    n, label = 1, stamp
    while (base / label).exists() or (base / f".{label}{PARTIAL}").exists():
        n += 1
        label = f"{stamp}-{n}"
    return base / f".{label}{PARTIAL}", base / label


def archive(job: EndedJob, partial: Path) -> Path:
    """Carry the plan out (see the module's doc): `job.folder` is the final folder, `partial` its hidden twin.
    Raises OSError from a move; whatever it left is finished by `finish_pending` at the next start."""
    partial.mkdir(parents=True, exist_ok=False, mode=0o700)
    atomic_write_json(partial / PLAN, {**job.to_json(), "hidden": list(job.hidden)})
    return _carry_out(job, partial)


def _carry_out(job: EndedJob, partial: Path) -> Path:
    for src, name in job.files:  # the history first (its document last): out of jobs/, the old job cannot come back
        _move(Path(src), partial / name)
    for src, dst in job.runs:
        try:
            _move(Path(src), Path(dst))
        except OSError as exc:  # left where it was, said so; the history is archived all the same
            log.error("ended_run_dir_not_moved", job=job.name, run_dir=src, error=str(exc))
    final = Path(job.folder)
    os.replace(partial, final)
    _fsync_dir(final.parent)
    return final


def _move(src: Path, dst: Path) -> None:
    if not os.path.lexists(src) or os.path.lexists(dst):
        return  # moved already (a plan carried out again), or never there
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.rename(src, dst)
    _fsync_dir(src.parent)


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def finish_pending(state_dir: Path) -> list[Path]:
    """At a supervisor's start, before any job is made: complete every archive a killed supervisor left half made.
    Returns the archives finished."""
    done: list[Path] = []
    root = ended_root(state_dir)
    for partial in sorted(root.glob(f"*/.*{PARTIAL}")):
        try:
            job = EndedJob.from_json(json.loads((partial / PLAN).read_text(encoding="utf-8")))
        except FileNotFoundError:
            shutil.rmtree(partial, ignore_errors=True)  # killed before its plan was saved: nothing had moved
            log.warning("ended_archive_dropped", folder=str(partial), detail="no plan: killed before any move")
            continue
        except (OSError, ValueError) as exc:
            log.error("ended_archive_unreadable", folder=str(partial), error=str(exc))
            continue
        try:
            done.append(_carry_out(job, partial))
        except OSError as exc:
            log.error("ended_archive_unfinished", folder=str(partial), error=str(exc))
            continue
        log.warning("ended_archive_finished", job=job.name, folder=job.folder,
                    detail="a supervisor was killed while it archived this ended job; finished now")
    return done


def list_ended(state_dir: Path, name: str | None = None) -> list[EndedJob]:
    """Every ended job (or every ended job named `name`), newest first. Half-made archives are left out (the next
    supervisor start finishes them); a damaged record is skipped and logged."""
    root = ended_root(state_dir)
    try:
        names = [name] if name is not None else sorted(p.name for p in root.iterdir() if not p.name.startswith("."))
    except OSError:
        return []
    out = []
    for n in names:
        try:
            folders = [p for p in (root / n).iterdir() if not p.name.startswith(".")]
        except OSError:
            continue
        for folder in folders:
            try:
                out.append(EndedJob.from_json(json.loads((folder / PLAN).read_text(encoding="utf-8"))))
            except (OSError, ValueError) as exc:
                log.warning("ended_record_unreadable", folder=str(folder), error=str(exc))
    return sorted(out, key=lambda j: j.ended_at, reverse=True)


def find_ended(state_dir: Path, name: str, nth: int = 1) -> EndedJob | None:
    """The `nth` newest ended job of that name (1: the newest), or None."""
    found = list_ended(state_dir, name)
    return found[nth - 1] if 1 <= nth <= len(found) else None


def ended_events(job: EndedJob, limit: int | None = None) -> list[dict[str, Any]]:
    """Its journal as it was when it ended, then one `ended` event that says when, how and where its files are."""
    events = read_journal(Path(job.folder) / f"{job.name}.events.jsonl", job.name, None)
    last = {"time": job.ended_at, "job": job.name, "event": "ended", "how": job.how, "by": job.by,
            "state": job.state, "reason": job.reason, "folder": job.folder, "runs_folder": job.runs_folder}
    out = [*events, last]
    return out[-limit:] if limit else ([] if limit == 0 else out)


def ended_history(job: EndedJob) -> JobHistory:
    """Its history document, each attempt's log path pointed at where the archive keeps it. Raises ValueError or
    OSError (a damaged or missing document)."""
    h = JobHistory.from_json(json.loads((Path(job.folder) / f"{job.name}.json").read_text(encoding="utf-8")))
    for a in h.attempts:
        if isinstance(a.handle, dict) and isinstance(a.handle.get("log_path"), str):
            a.handle = {**a.handle, "log_path": job.moved(a.handle["log_path"])}
    return h


def ended_log(job: EndedJob) -> Path | None:
    """The job's whole output file (process, ray), as the archive keeps it; None for a container runtime's."""
    p = Path(job.folder) / f"{job.name}.log"
    return p if p.exists() else None


def ended_log_source(job: EndedJob) -> LogSource:
    """`isaacd logs` of an ended job (log_source.py): its archived output file and attempts."""
    attempts: list[AttemptOutput] = []
    problem = None
    try:
        attempts = [AttemptOutput(a.number, a.runtime, a.started_at, dict(a.handle or {}))
                    for a in ended_history(job).attempts]
    except FileNotFoundError:
        pass  # it ended before its history was ever saved: no attempts
    except (OSError, ValueError) as exc:
        problem = f"cannot read {Path(job.folder) / f'{job.name}.json'}: {exc}"
    return LogSource(job.name, job.runtime, str(Path(job.folder) / f"{job.name}.log"), tuple(attempts), problem)
