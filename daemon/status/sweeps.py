"""A sweep as `isaacd sweep status` and /metrics show it (issue 39): typed values and their JSON both ways, as
status/types.py does for jobs (lenient `from_json`: a missing key takes its default). Stdlib only: the client imports
this and must start fast."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

JSON = dict[str, Any]


def _kwargs(cls: type, raw: Mapping[str, Any]) -> JSON:
    return {f.name: raw[f.name] for f in fields(cls) if f.name in raw}


@dataclass(frozen=True, slots=True)
class TrialStatus:
    """One trial: an ordinary job (`job`), its sampled hyperparameters, and where ASHA has it."""

    number: int
    job: str
    values: dict[str, Any] = field(default_factory=dict)  # searched key -> its value, in the sweep file's order
    state: str = "pending"  # sweeps.asha.TrialState: pending, running, paused, completed, failed, cancelled
    iteration: int | None = None
    objective: float | None = None  # the objective now: the mean of its last `smooth` logged values
    rung: int = 0  # rungs passed (continued or promoted past)
    rung_values: tuple[float, ...] = ()  # the objective recorded at each rung it reached
    gpu_seconds: float = 0.0  # GPU time its trainers held so far (seconds of wall time × GPUs, or a share of one)
    # PBT (issue 40): a member's exploits so far, each carried out (from whom, at which iteration, which values:
    # its schedule of hyperparameters), and whether one is under way
    exploits: int = 0
    lineage: tuple[dict[str, Any], ...] = ()
    exploiting: bool = False

    def to_json(self) -> JSON:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["rung_values"] = list(self.rung_values)
        out["lineage"] = [dict(e) for e in self.lineage]
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "TrialStatus":
        kw = _kwargs(cls, raw)
        kw["rung_values"] = tuple(kw.get("rung_values") or ())
        kw["values"] = dict(kw.get("values") or {})
        kw["lineage"] = tuple(dict(e) for e in kw.get("lineage") or ())
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class SweepStatus:
    """One sweep: its settings in brief, its best trial, and its trials best first."""

    name: str
    owner: str | None = None
    state: str = "running"  # running, done, cancelled
    reason: str | None = None  # why it is done or cancelled
    source: str | None = None  # the sweep file it was submitted from
    submitted_at: float | None = None  # wall clock
    trials_total: int = 0
    concurrency: int = 1
    objective_tag: str = "Train/mean_reward"
    mode: str = "max"
    smooth: int = 10
    scheduler: str = "asha"
    reduction_factor: int = 3
    rungs: tuple[int, ...] = ()
    max_iterations: int | None = None
    interval: int | None = None  # PBT: iterations between a member's judgements
    quantile: float | None = None  # PBT: the bottom fraction that copies the top
    best: int | None = None  # the best trial's number (sweeps.asha.best_trial)
    best_objective: float | None = None
    gpu_seconds: float = 0.0
    trials: tuple[TrialStatus, ...] = ()  # best first (sweeps.asha.ranking)

    def trial(self, number: int) -> TrialStatus | None:
        return next((t for t in self.trials if t.number == number), None)

    def counts(self) -> dict[str, int]:
        """Trials by state (every state named, 0 where none)."""
        out = dict.fromkeys(("pending", "running", "paused", "completed", "failed", "cancelled"), 0)
        for t in self.trials:
            out[t.state] = out.get(t.state, 0) + 1
        return out

    def to_json(self) -> JSON:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["rungs"] = list(self.rungs)
        out["trials"] = [t.to_json() for t in self.trials]
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "SweepStatus":
        kw = _kwargs(cls, raw)
        kw["rungs"] = tuple(kw.get("rungs") or ())
        kw["trials"] = tuple(TrialStatus.from_json(t) for t in kw.get("trials") or () if isinstance(t, Mapping))
        return cls(**kw)
