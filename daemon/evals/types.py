"""An evaluation's result and a job's evaluations as the status shows them (issue 41; /work/notes/eval-design.md C).

The eval keeper (attempt/evals.py) builds these; `JobStatus.evals` carries an `EvalsStatus`; `isaacd status`, `isaacd
evals`, `isaacd best`, /metrics and the dashboard read them. Their JSON both ways, as status/types.py does: `to_json`
writes every field (tuples as lists, nested parts by their own to_json), `from_json` is lenient (a missing key takes
its default or None, an unknown key is ignored, a nested part of the wrong shape is None) and checks no types; the
record (evals/record.py) and the result reader (evals/result.py) check what they read.

Stdlib only: `isaacd status` imports this and must start fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

JSON = dict[str, Any]


def _kwargs(cls: type, raw: Mapping[str, Any]) -> JSON:
    return {f.name: raw[f.name] for f in fields(cls) if f.name in raw}


@dataclass(frozen=True, slots=True)
class EvalResult:
    """One finished evaluation of one checkpoint: the episode return and length over `episodes` episodes."""

    iteration: int
    checkpoint: str  # absolute path
    episodes: int
    return_mean: float
    return_std: float
    length_mean: float
    length_std: float
    success_rate: float | None  # None: the task logs none
    seed: int
    num_envs: int
    device: str
    duration_seconds: float
    finished_at: float  # wall time, set by the keeper when it read the result
    video: str | None = None  # the MP4's path, where one was recorded
    gif: str | None = None

    @property
    def checkpoint_name(self) -> str:
        """ "model_400.pt": how `isaacd status` names it."""
        return self.checkpoint.rsplit("/", 1)[-1]

    def to_json(self) -> JSON:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> EvalResult:
        """Lenient: a key the JSON lacks is None (video and gif: their defaults)."""
        return cls(**{f.name: raw.get(f.name, f.default if f.name in ("video", "gif") else None)  # type: ignore[misc]
                      for f in fields(cls)})


def _result(v: Any) -> EvalResult | None:
    return EvalResult.from_json(v) if isinstance(v, Mapping) else None


@dataclass(frozen=True, slots=True)
class EvalsStatus:
    """A job's evaluations at one publish (None in `JobStatus.evals`: the job has no [jobs.eval])."""

    every: str  # "1", "5", "best"
    last: EvalResult | None = None  # the newest finished evaluation
    best: EvalResult | None = None
    running: int | None = None  # the iteration being evaluated now
    running_since: float | None = None  # wall
    waiting: int = 0  # checkpoints chosen but not yet evaluated
    failed: int = 0  # failed attempts in total
    done: int = 0  # finished evaluations in total (results recorded): /metrics' isaacd_job_evals_total{outcome="done"}
    given_up: tuple[int, ...] = ()  # iterations given up
    last_error: str | None = None  # the newest failure's reason
    video_unavailable: str | None = None  # said once: why no video on this host
    where: str = ""  # "cpu" or "gpu 0 (4.0 GiB)"
    cost_seconds: float | None = None  # an evaluation's cost to the training, the recent measures' mean (evals/pacing.py)
    cost_share: float | None = None  # that cost over the newest evaluation's own duration
    paced_until: float | None = None  # wall: the next evaluation waits for this (max_training_cost)

    def to_json(self) -> JSON:
        out: JSON = {f.name: getattr(self, f.name) for f in fields(self)}
        out["last"] = self.last.to_json() if self.last is not None else None
        out["best"] = self.best.to_json() if self.best is not None else None
        out["given_up"] = list(self.given_up)
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> EvalsStatus:
        kw = _kwargs(cls, raw)
        kw.setdefault("every", "")
        kw["last"] = _result(raw.get("last"))
        kw["best"] = _result(raw.get("best"))
        given_up = raw.get("given_up")
        kw["given_up"] = tuple(given_up) if isinstance(given_up, (list, tuple)) else ()
        return cls(**kw)
