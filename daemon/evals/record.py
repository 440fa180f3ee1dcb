"""A job's evaluations, saved (issue 41): `<state_dir>/evals/<job>.json`, one JSON document per job, written whole
(beside it, synced, renamed) as a sweep's record is (sweeps/record.py).

It holds each finished evaluation by iteration, each iteration's attempts and failures (the reason and when), the
iterations given up and skipped, and the best. choose.py reads it to decide what comes next; `isaacd evals` and
`isaacd best` read it; a supervisor restarted mid-run evaluates nothing twice and forgets no failure.

Reading never raises: a missing file is a fresh record; a file that cannot be used (not JSON, of another shape) is
set aside beside it (`<job>.json.corrupt-<time>`) and a fresh record begins, with a reason the keeper puts into an
event. An evaluation's results are also beside each checkpoint (`<checkpoint>.eval.json`), so nothing measured is lost.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..os_seam.durable import write_private_json
from .best import best_result
from .types import EvalResult

EVALS_DIR = "evals"
VERSION = 1


@dataclass(frozen=True)
class EvalFailure:
    """A failed attempt (or a give-up): when, and the reason as the event says it."""

    at: float  # wall
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "reason": self.reason}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> EvalFailure:
        at, reason = raw["at"], raw["reason"]
        if not isinstance(at, (int, float)) or isinstance(at, bool) or not isinstance(reason, str):
            raise ValueError(f"a failure of another shape: {raw!r}")
        return cls(float(at), reason)


@dataclass
class EvalRecord:
    job: str
    results: dict[int, EvalResult] = field(default_factory=dict)  # finished evaluations, by iteration
    attempts: dict[int, int] = field(default_factory=dict)  # evaluations started, by iteration
    failures: dict[int, list[EvalFailure]] = field(default_factory=dict)  # failed attempts, by iteration
    given_up: dict[int, EvalFailure] = field(default_factory=dict)  # iterations given up: when, and the last reason
    skipped: set[int] = field(default_factory=set)  # chosen, never evaluated: newer ones waited (choose.py)
    best: int | None = None  # the best result's iteration (best.py)

    # -- what the keeper records ------------------------------------------------------------------------------------
    def started(self, iteration: int) -> int:
        """An evaluation of `iteration` starts; its attempt number (1 for the first)."""
        self.attempts[iteration] = self.attempts.get(iteration, 0) + 1
        return self.attempts[iteration]

    def finished(self, result: EvalResult) -> bool:
        """A result recorded (a later one of the same iteration replaces it); True when it is a new best."""
        self.results[result.iteration] = result
        self.given_up.pop(result.iteration, None)
        before = self.best
        best = best_result(self.results.values())
        self.best = best.iteration if best is not None else None
        return self.best == result.iteration and before != result.iteration

    def failed(self, iteration: int, reason: str, at: float) -> int:
        """A failed attempt recorded; the failures of `iteration` so far."""
        self.failures.setdefault(iteration, []).append(EvalFailure(at, reason))
        return len(self.failures[iteration])

    def give_up(self, iteration: int, reason: str, at: float) -> None:
        self.given_up[iteration] = EvalFailure(at, reason)

    def skip(self, iterations: Iterable[int]) -> tuple[int, ...]:
        """Chosen checkpoints left unevaluated (choose.py `skipped`); the ones not skipped before, for an event."""
        new = tuple(sorted(set(iterations) - self.skipped - set(self.results)))
        self.skipped.update(new)
        return new

    # -- what the status reads ------------------------------------------------------------------------------------
    def failure_count(self, iteration: int | None = None) -> int:
        if iteration is not None:
            return len(self.failures.get(iteration, ()))
        return sum(len(f) for f in self.failures.values())

    @property
    def best_result(self) -> EvalResult | None:
        return self.results.get(self.best) if self.best is not None else None

    @property
    def last_result(self) -> EvalResult | None:
        """The newest finished evaluation (by when it finished)."""
        return max(self.results.values(), key=lambda r: (r.finished_at, r.iteration), default=None)

    @property
    def last_failure(self) -> EvalFailure | None:
        return max((f for fs in self.failures.values() for f in fs), key=lambda f: f.at, default=None)

    def ordered(self) -> list[EvalResult]:
        """Every finished evaluation, oldest iteration first (`isaacd evals`)."""
        return [self.results[i] for i in sorted(self.results)]

    # -- JSON -------------------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"version": VERSION, "job": self.job,
                "results": {str(i): r.to_json() for i, r in sorted(self.results.items())},
                "attempts": {str(i): n for i, n in sorted(self.attempts.items())},
                "failures": {str(i): [f.to_json() for f in fs] for i, fs in sorted(self.failures.items())},
                "given_up": {str(i): f.to_json() for i, f in sorted(self.given_up.items())},
                "skipped": sorted(self.skipped), "best": self.best}

    @classmethod
    def from_json(cls, raw: Any) -> EvalRecord:
        """Strict: ValueError (or KeyError, TypeError) for a document of another shape; EvalStore sets it aside."""
        if not isinstance(raw, Mapping):
            raise ValueError("not a JSON object")
        if raw.get("version") != VERSION:
            raise ValueError(f"version {raw.get('version')!r}, not {VERSION}")
        if not isinstance(raw.get("job"), str):
            raise ValueError("no job name")
        results = {_iteration(k): _checked(EvalResult.from_json(v)) for k, v in _table(raw, "results").items()}
        for i, r in results.items():
            if r.iteration != i:
                raise ValueError(f"the result under {i} is of iteration {r.iteration}")
        attempts = {_iteration(k): _count(v) for k, v in _table(raw, "attempts").items()}
        failures = {_iteration(k): [EvalFailure.from_json(f) for f in _list(v)]
                    for k, v in _table(raw, "failures").items()}
        given_up = {_iteration(k): EvalFailure.from_json(v) for k, v in _table(raw, "given_up").items()}
        skipped = {_iteration(i) for i in _list(raw.get("skipped", []))}
        rec = cls(raw["job"], results, attempts, failures, given_up, skipped)
        best = best_result(results.values())  # from the results, whatever the file says: one source of truth
        rec.best = best.iteration if best is not None else None
        return rec


def _iteration(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"{v!r} is no iteration")
    n = int(v)
    if n < 0:
        raise ValueError(f"{v!r} is no iteration")
    return n


def _count(v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ValueError(f"{v!r} is no count")
    return v


def _table(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    v = raw.get(key, {})
    if not isinstance(v, Mapping):
        raise ValueError(f"{key} is not a table")
    return v


def _list(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise ValueError(f"{v!r} is not a list")
    return v


def _checked(r: EvalResult) -> EvalResult:
    """A saved result with every number the status and metrics read (EvalResult.from_json checks none)."""
    for name in ("return_mean", "return_std", "length_mean", "length_std", "duration_seconds", "finished_at"):
        v = getattr(r, name)
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise ValueError(f"a result's {name} is {v!r}")
    if not isinstance(r.iteration, int) or not isinstance(r.checkpoint, str):
        raise ValueError("a result without its iteration or checkpoint")
    return r


@dataclass(frozen=True)
class Loaded:
    record: EvalRecord
    problem: str | None = None  # the saved document could not be used: why, and where it was set aside


class EvalStore:
    """The jobs' eval documents under the state dir (`<state_dir>/evals/<job>.json`)."""

    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir) / EVALS_DIR

    def path(self, job: str) -> Path:
        return self.dir / f"{job}.json"

    def save(self, rec: EvalRecord) -> None:
        """Written whole (os_seam/durable.write_private_json). Raises OSError (a full disk): the keeper says it and
        keeps its record in memory."""
        write_private_json(self.path(rec.job), rec.to_json())

    def load(self, job: str, now: float) -> Loaded:
        """The job's record; a fresh one where there is none. A document that cannot be used is moved aside to
        `<job>.json.corrupt-<now>` (kept for a person to look at; never removed) and a fresh record begins."""
        path = self.path(job)
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return Loaded(EvalRecord(job))
        except OSError as exc:
            return Loaded(EvalRecord(job), f"the evaluations record {path} cannot be read ({exc.strerror}); "
                                           "evaluations start afresh")
        try:
            rec = EvalRecord.from_json(json.loads(text))
            if rec.job != job:
                raise ValueError(f"it is job {rec.job!r}'s")
            return Loaded(rec)
        except (ValueError, KeyError, TypeError) as exc:
            why = str(exc) if not isinstance(exc, KeyError) else f"no {exc}"
            aside = path.with_name(f"{path.name}.corrupt-{int(now)}")
            try:
                os.replace(path, aside)
                where = f"set aside as {aside.name}"
            except OSError as move:
                where = f"left in place (cannot move it: {move.strerror})"
            return Loaded(EvalRecord(job), f"the evaluations record {path} is unusable "
                                           f"({' '.join(why.split())[:200]}); {where}; evaluations start afresh")

    def remove(self, job: str) -> None:
        """A removed job's record goes with it (its results stay beside its checkpoints)."""
        try:
            self.path(job).unlink()
        except FileNotFoundError:
            pass
