"""Where a job's trainer output is: what `isaacd logs` reads, wherever the client runs (issue 37).

The supervisor answers the control socket's `log-source` request with a `LogSource` (control.py), its paths
absolute, so a client in any directory reads the files of the supervisor it found (config/locate.py) and never a
state dir relative to its own directory. With no supervisor answering, the client builds the same value from the
config file's state dir (`read_log_source`). Both read only: no directory is made, a damaged history is not moved
aside (that is the running supervisor's job, history/store.py)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .store import JobHistory, job_log_path


@dataclass(frozen=True)
class AttemptOutput:
    """One attempt's output: its runtime and handle (a log file and offset, a unit, a container)."""

    number: int
    runtime: str
    started_at: float
    handle: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LogSource:
    """A job's output: the job's runtime now, the process and ray runtimes' log file, and every attempt's."""

    job: str
    runtime: str
    log_path: str
    attempts: tuple[AttemptOutput, ...] = ()
    problem: str | None = None  # the history could not be read: why (the job's log file is still read)

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "runtime": self.runtime, "log_path": self.log_path, "problem": self.problem,
                "attempts": [{"number": a.number, "runtime": a.runtime, "started_at": a.started_at,
                              "handle": dict(a.handle)} for a in self.attempts]}

    @classmethod
    def from_json(cls, raw: Any) -> "LogSource":
        """Raises ValueError for an answer that is not one (an older or a foreign supervisor)."""
        if not isinstance(raw, dict) or not all(isinstance(raw.get(k), str) for k in ("job", "runtime", "log_path")):
            raise ValueError("the supervisor's log-source answer is not one")
        attempts = tuple(AttemptOutput(int(a["number"]), str(a.get("runtime") or "process"),
                                       float(a.get("started_at") or 0.0), dict(a.get("handle") or {}))
                         for a in raw.get("attempts") or () if isinstance(a, dict) and "number" in a)
        problem = raw.get("problem")
        return cls(raw["job"], raw["runtime"], raw["log_path"], attempts, problem if isinstance(problem, str) else None)

    @property
    def newest(self) -> AttemptOutput | None:
        return self.attempts[-1] if self.attempts else None


def _absolute(path: Any) -> Any:
    """A handle's log path as the supervisor wrote it, made absolute against the supervisor's own directory."""
    return os.path.abspath(path) if isinstance(path, str) and path else path


def read_log_source(state_dir: Path, job: str, runtime: str) -> LogSource:
    """The job's output as its saved history in `state_dir` records it; reads, never writes (a missing history: no
    attempts yet). Raises PermissionError when the state dir is not the caller's to read."""
    state_dir = Path(os.path.abspath(state_dir))
    doc = state_dir / "jobs" / f"{job}.json"
    attempts: list[AttemptOutput] = []
    problem = None
    try:
        with open(doc, "rb") as f:  # read-only: StateStore would make the directory and move a bad file aside
            history = JobHistory.from_json(json.loads(f.read().decode("utf-8")))
        for a in history.attempts:
            handle = dict(a.handle or {})
            if "log_path" in handle:
                handle["log_path"] = _absolute(handle["log_path"])
            attempts.append(AttemptOutput(a.number, a.runtime, a.started_at, handle))
    except FileNotFoundError:
        pass
    except PermissionError:
        raise
    except OSError as exc:
        problem = f"cannot read {doc}: {exc.strerror}"
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        problem = f"cannot read {doc}: {exc}"
    return LogSource(job, runtime, str(job_log_path(state_dir, job)), tuple(attempts), problem)
