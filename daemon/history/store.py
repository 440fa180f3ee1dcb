"""The supervisor's memory on disk: one JSON document and one event journal per job.

Documents are replaced atomically (temp file, fsync, rename, fsync dir) so a crash at any moment
leaves either the old or the new version, never a torn one. A document damaged from outside (a
disk error, an operator's editor, a newer isaacd's format) is never fatal: `load` moves it aside as
`<job>.json.corrupt-<time>` and raises `HistoryCorrupt` naming the file, so the caller can rebuild
that one job (see `rebuild.py`) while every other job carries on.

The event journal is append-only JSON lines. Lines that are not UTF-8 JSON objects (a torn append,
bytes from elsewhere) are skipped and counted when read; an append always starts on a fresh line,
so a torn last line can never swallow the next event.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import stat
import threading
import time
import types
import typing
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..daemon_log import log
from ..os_seam.durable import fsync_all, fsync_path

MAX_ATTEMPTS_KEPT = 500


class HistoryCorrupt(ValueError):
    """A job's history document could not be used; it has been moved to `kept_as`."""

    def __init__(self, path: Path, problem: str, kept_as: Path | None):
        self.path, self.problem, self.kept_as = path, problem, kept_as
        where = f"; kept as {kept_as}" if kept_as else ""
        super().__init__(f"{path}: {problem}{where}")


def atomic_write_json(path: Path, data: Any, sync: bool = True) -> None:
    """`sync=False`: not waited for here; the caller syncs the file and its directory later
    (StateStore.synced_together)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.flush()
        if sync:
            os.fsync(fh.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_path(path.parent)


@dataclass
class Attempt:
    number: int
    started_at: float
    reason: str  # why this attempt was started: "initial", "restart after killed by signal 9", ...
    resume_from: dict[str, Any] | None = None  # {"path", "iteration"}
    run_dir: str | None = None
    runtime: str = "process"
    handle: dict[str, Any] = field(default_factory=dict)  # runtime-specific, used to adopt after a crash
    ended_at: float | None = None
    exit: dict[str, Any] | None = None  # {"code", "signal", "oom_killed", "description"}
    checkpoint_at_exit: int | None = None  # newest complete checkpoint on the timeline when it ended
    shim_events: str | None = None  # the launcher shim's side channel for this attempt (None: no shim)
    last_iteration: int | None = None  # the last iteration it logged: a resume redoes those after its checkpoint
    token: str | None = None  # given to the trainer at spawn and saved first: finds it if the handle was not saved
    fresh: bool = False  # the first attempt after `isaacd reset`: the job's timeline starts here (attempt/setting.py)


@dataclass
class LegacyCounters:
    """What a history written before the state machine (no `machine`) said about the job's decisions.

    Read from such a document (or rebuilt from the journal, rebuild.py) and turned into the job's model once
    (attempt/record.py); never saved: the model is the one place the counters and the resting state live."""

    restarts: int = 0
    restart_times: list[float] = field(default_factory=list)  # wall-clock seconds
    restarts_by_reason: dict[str, int] = field(default_factory=dict)
    last_restart_reason: str | None = None
    rollbacks: int = 0
    watchdog_trips: dict[str, int] = field(default_factory=dict)  # "watchdog/action" -> count
    final_state: str | None = None  # stopped | completed | failed, when the job is not meant to run
    final_reason: str | None = None


@dataclass
class JobHistory:
    """The facts of a job (its attempts, what its trainer reported) and, in `machine`, its decision state
    (jobs/model.py JobModel.to_json: restarts, counters, resting state), the only copy of those."""

    name: str
    trainer_rsl_rl_version: str | None = None  # as the shim last reported it: which checkpoints load
    last_iteration: int | None = None  # the last values seen, for status after a supervisor restart
    last_mean_reward: float | None = None
    last_fps: float | None = None
    attempts: list[Attempt] = field(default_factory=list)
    # the state machine's decision state (jobs/model.py JobModel.to_json) and the boot it was saved on
    machine: dict[str, Any] | None = None
    boot_id: str | None = None
    spare_token: str | None = None  # the warm spare's launch token: a new supervisor stops a leftover spare
    # an older document's decision fields, until the runner turns them into a model (not saved)
    legacy: LegacyCounters | None = field(default=None, compare=False)

    @property
    def current(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        legacy = d.pop("legacy")
        if self.machine is None and legacy is not None:  # not migrated yet (rebuild.py saves before the runner)
            d.update(legacy)
        return d

    @classmethod
    def from_json(cls, data: Any) -> "JobHistory":
        """Raises ValueError saying what is wrong. Keys this version does not know (written by a newer
        isaacd) are ignored, so a downgrade keeps the history instead of throwing it away. A document
        without `machine` keeps its older decision fields in `legacy`."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, found {type(data).__name__}")
        raw_attempts = data.get("attempts", [])
        if not isinstance(raw_attempts, list):
            raise ValueError("attempts: expected a list")
        attempts = [_build(Attempt, a, f"attempts[{i}]") for i, a in enumerate(raw_attempts)]
        legacy = None
        if data.get("machine") is None:
            legacy = _build(LegacyCounters, data, "")
        own = {k: v for k, v in data.items() if k not in ("attempts", "legacy")}
        return _build(cls, own, "", attempts=attempts, legacy=legacy)


def _json_types(cls: Any) -> dict[str, tuple[tuple[type, ...], bool]]:
    """Field name -> (the JSON types it may hold, whether null is allowed), from the dataclass's own hints."""
    out: dict[str, tuple[tuple[type, ...], bool]] = {}
    for name, hint in typing.get_type_hints(cls).items():
        args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        kinds: list[type] = []
        for a in args:
            base = typing.get_origin(a) or a
            if base is float:
                kinds += [int, float]
            elif base is not type(None):
                kinds.append(base)
        out[name] = (tuple(kinds), type(None) in args)
    return out


def _build(cls: Any, data: Any, where: str, **extra: Any) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{where or 'document'}: expected a JSON object, found {type(data).__name__}")
    hints = _json_types(cls)
    kwargs = {k: v for k, v in data.items() if k in hints and k not in extra}
    for k, v in kwargs.items():
        kinds, nullable = hints[k]
        ok = (v is None and nullable) or (isinstance(v, kinds) and (bool in kinds or not isinstance(v, bool)))
        if not ok:
            raise ValueError(f"{where + '.' if where else ''}{k}: unexpected value {v!r:.60}")
    try:
        return cls(**kwargs, **extra)
    except TypeError as exc:  # a required field is missing
        raise ValueError(f"{where or 'document'}: {exc}") from None


@functools.lru_cache(maxsize=8192)  # asked for every job's status row at every tick (issue 39: 1,000 jobs)
def job_log_path(state_dir: Path, job: str) -> Path:
    """The job's trainer output, every attempt appended in turn (`isaacd logs`; `logs --attempt N` reads an
    attempt's offsets in it): the one place its name is spelled."""
    return Path(state_dir) / "logs" / f"{job}.log"


@dataclass
class _Together:
    """One StateStore.synced_together: its jobs, the files written without a sync, the documents it made."""

    jobs: set[str]
    files: list[Path] = field(default_factory=list)
    new: set[Path] = field(default_factory=set)


class StateStore:
    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir)
        self.jobs_dir = self.dir / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        # root's alone, but traversal kept once granted: a job that runs as its owner reaches its own files under
        # the state dir (os_seam/owner_dirs.open_state_dir makes it 0711; jobs/ stays 0700)
        os.chmod(self.dir, 0o700 | (stat.S_IMODE(os.stat(self.dir).st_mode) & 0o011))
        self._together = threading.local()  # this thread's open synced_together, if any

    @contextlib.contextmanager
    def synced_together(self, jobs: Collection[str]) -> Iterator[None]:
        """Within it, this thread's writes for `jobs` do not wait for the disk one by one: their journal appends, and
        the first document of one that never launched; at its end they are all synced at once (os_seam/durable.py:
        100 new sweep trials were ~400 fsyncs in a row, 10 ms each on a busy disk). Durable before it returns, as
        before. Only what an OS crash before its end cannot make worse than "just added": a document saved while it
        is new and nothing was started under it (no attempt, no spare: a trainer's token is saved before its spawn,
        always synced at once), and journal lines (a torn last line is skipped when read). A document that existed is
        synced at once, as is every write of another thread."""
        outer = getattr(self._together, "batch", None)
        if outer is not None:  # nested: the outer one syncs them
            outer.jobs |= set(jobs)
            yield
            return
        batch = _Together(set(jobs))
        self._together.batch = batch
        try:
            yield
        finally:
            self._together.batch = None
            try:
                fsync_all(batch.files, [self.jobs_dir] if batch.files else [], missing_ok=True)
            except OSError as exc:
                log.error("state_sync_failed", files=len(batch.files), error=str(exc),
                          detail="job documents or journal lines written but not known to be on disk")

    def _deferred(self, job: str) -> "_Together | None":
        batch: _Together | None = getattr(self._together, "batch", None)
        return batch if batch is not None and job in batch.jobs else None

    def _doc(self, job: str) -> Path:
        return self.jobs_dir / f"{job}.json"

    def _journal(self, job: str) -> Path:
        return self.jobs_dir / f"{job}.events.jsonl"

    def doc_path(self, job: str) -> Path:
        return self._doc(job)

    def journal_path(self, job: str) -> Path:
        return self._journal(job)

    def exists(self, job: str) -> bool:
        return self._doc(job).exists()

    def load(self, job: str) -> JobHistory:
        """The job's history; a fresh one if there is none. Raises HistoryCorrupt (after moving the bad
        file aside, so the next save cannot overwrite the evidence) when the document is unusable."""
        path = self._doc(job)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return JobHistory(name=job)
        except OSError as exc:
            raise HistoryCorrupt(path, f"cannot read: {exc.strerror}", None) from None
        try:
            history = JobHistory.from_json(json.loads(raw.decode("utf-8")))
        except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
            problem = "empty file" if not raw.strip() else f"not a valid job history: {exc}"
            raise HistoryCorrupt(path, problem, self._keep_aside(path)) from None
        if history.name != job:
            raise HistoryCorrupt(path, f"belongs to job {history.name!r}, not {job!r}", self._keep_aside(path))
        return history

    def _keep_aside(self, path: Path) -> Path | None:
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        try:
            os.replace(path, aside)
        except OSError as exc:
            log.error("history_keep_aside_failed", path=str(path), error=str(exc))
            return None
        return aside

    def save(self, history: JobHistory) -> None:
        history.attempts = history.attempts[-MAX_ATTEMPTS_KEPT:]
        path = self._doc(history.name)
        batch = self._deferred(history.name)
        # only a document nothing was ever started under (no attempt, no spare: their tokens find a trainer)
        later = (batch is not None and not history.attempts and history.spare_token is None
                 and (path in batch.new or not path.exists()))
        atomic_write_json(path, history.to_json(), sync=not later)
        if later and batch is not None:
            batch.new.add(path)
            batch.files.append(path)

    def append_event(self, job: str, event: str, **fields: Any) -> dict[str, Any]:
        record = {"time": time.time(), "job": job, "event": event, **fields}
        line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
        fd = os.open(self._journal(job), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            # A crash mid-append (or a full disk) can leave a last line without its newline; glued onto
            # it, this event would be lost with it when read. Start on a fresh line instead.
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line
            os.write(fd, line)
            batch = self._deferred(job)
            if batch is None:
                os.fsync(fd)
            else:
                batch.files.append(self._journal(job))
        finally:
            os.close(fd)
        return record

    def events(self, job: str, limit: int | None = None) -> list[dict[str, Any]]:
        """The newest `limit` events (all when None). Damaged lines are skipped; when there were any, a
        last entry `journal_damaged` says how many and where, so a reader knows the story has gaps."""
        return read_journal(self._journal(job), job, limit)


def read_journal(path: Path, job: str, limit: int | None = None) -> list[dict[str, Any]]:
    """A job's event journal at `path` (a live job's, or an ended job's in its archive: ended.py); see
    StateStore.events."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a whole number >= 0, got {limit!r}")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    bad = 0
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            bad += 1  # torn append, or bytes that never were an event
            continue
        if isinstance(rec, dict) and isinstance(rec.get("event"), str) and isinstance(rec.get("time"), (int, float)):
            out.append(rec)
        else:
            bad += 1
    if limit is not None:
        out = out[-limit:] if limit else []
    if bad:
        log.warning("journal_damaged", job=job, path=str(path), skipped_lines=bad)
        out.append({"time": time.time(), "job": job, "event": "journal_damaged", "path": str(path),
                    "skipped_lines": bad, "detail": f"{bad} unreadable line(s) skipped"})
    return out
