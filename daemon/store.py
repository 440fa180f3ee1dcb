"""The supervisor's memory on disk: one JSON document and one event journal per job.

Documents are replaced atomically (temp file, fsync, rename, fsync dir) so a crash at any moment
leaves either the old or the new version, never a torn one. The event journal is append-only
JSON lines; a torn last line (crash mid-append) is skipped when read.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAX_ATTEMPTS_KEPT = 500


def atomic_write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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


@dataclass
class JobHistory:
    name: str
    restarts: int = 0
    restart_times: list[float] = field(default_factory=list)
    restarts_by_reason: dict[str, int] = field(default_factory=dict)
    last_restart_reason: str | None = None
    rollbacks: int = 0
    watchdog_trips: dict[str, int] = field(default_factory=dict)  # "watchdog/action" -> count
    final_state: str | None = None  # stopped | completed | failed, when the job is not meant to run
    final_reason: str | None = None
    trainer_rsl_rl_version: str | None = None  # as the shim last reported it: which checkpoints load
    last_iteration: int | None = None  # the last values seen, for status after a supervisor restart
    last_mean_reward: float | None = None
    last_fps: float | None = None
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def current(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "JobHistory":
        attempts = [Attempt(**a) for a in data.get("attempts", [])]
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and k != "attempts"}
        return cls(**known, attempts=attempts)


class StateStore:
    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir)
        self.jobs_dir = self.dir / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)

    def _doc(self, job: str) -> Path:
        return self.jobs_dir / f"{job}.json"

    def _journal(self, job: str) -> Path:
        return self.jobs_dir / f"{job}.events.jsonl"

    def load(self, job: str) -> JobHistory:
        path = self._doc(job)
        try:
            return JobHistory.from_json(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return JobHistory(name=job)

    def save(self, history: JobHistory) -> None:
        history.attempts = history.attempts[-MAX_ATTEMPTS_KEPT:]
        atomic_write_json(self._doc(history.name), history.to_json())

    def append_event(self, job: str, event: str, **fields: Any) -> dict[str, Any]:
        record = {"time": time.time(), "job": job, "event": event, **fields}
        line = json.dumps(record, sort_keys=True, default=str) + "\n"
        fd = os.open(self._journal(job), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return record

    def events(self, job: str, limit: int | None = None) -> list[dict[str, Any]]:
        try:
            lines = self._journal(job).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines[-limit:] if limit else lines:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # torn write from a crash mid-append
        return out
