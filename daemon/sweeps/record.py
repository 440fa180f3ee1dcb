"""A sweep's saved state (issue 39): `<state_dir>/sweeps/<name>.json`, one JSON document per sweep, written whole
(beside it, synced, renamed) before its decision is acted on, as a job's history is. It holds the sweep file as
submitted (so the same seed gives the same trials after a restart), each trial's sampled values, and what ASHA did
with it (launched, paused, the rungs passed, the objective recorded at each): a supervisor killed mid-sweep loses no
trial and launches none twice. The trials themselves are ordinary jobs, with histories of their own."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..daemon_log import log
from ..os_seam.durable import write_private_json

SWEEPS_DIR = "sweeps"
EVENTS_KEPT = 500  # a sweep's own events (submitted, done, cancelled), the newest kept in its document


@dataclass
class TrialRecord:
    number: int
    job: str  # the trial's job name, <sweep>-t007
    values: dict[str, Any]  # the sampled values, in the sweep file's order
    launched: bool = False  # ASHA launched it (a Start was sent); a pending trial has not been
    paused: bool = False  # paused by ASHA with a save, not promoted since
    passed: int = 0  # rungs it was let past (sweeps.asha.TrialView.passed)
    rung_values: list[float] = field(default_factory=list)  # the smoothed objective when it reached each rung
    objective: float | None = None  # its smoothed objective now
    gpu_seconds: float = 0.0
    # its job's attempt number when the sweep last sent it a Start (a launch, a promotion): a job still stopped at
    # that attempt later never got it (a supervisor killed between the saved decision and the act), so it is sent
    # again; one stopped at a later attempt was stopped by someone else
    started_attempt: int | None = None
    # PBT (issue 40; population.py): the iteration it was last judged at, its exploits so far (its generator's
    # seed), each one carried out (from whom, at which iteration, which values), and the one under way
    judged_at: int = 0
    exploits: int = 0
    lineage: list[dict[str, Any]] = field(default_factory=list)
    exploit: dict[str, Any] | None = None


@dataclass
class SweepRecord:
    name: str
    owner: str | None  # who submitted it: its trials are theirs
    source: str  # the sweep file's path as submitted
    text: str  # the sweep file's text
    base_dir: str  # where its relative paths are read from (the jobs_dir)
    submitted_at: float  # wall clock
    trials: list[TrialRecord]
    state: str = "running"  # running, done, cancelled
    reason: str | None = None
    best: int | None = None
    best_value: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    def trial(self, number: int) -> TrialRecord:
        return self.trials[number - 1]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> "SweepRecord":
        trials = [TrialRecord(**t) for t in raw.get("trials", [])]
        return cls(**{**raw, "trials": trials})


class SweepStore:
    """The sweeps' documents under the state dir (root's, as the jobs' histories are)."""

    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir) / SWEEPS_DIR

    def path(self, name: str) -> Path:
        return self.dir / f"{name}.json"

    def exists(self, name: str) -> bool:
        return self.path(name).exists()

    def save(self, rec: SweepRecord) -> None:
        write_private_json(self.path(rec.name), rec.to_json())

    def load_all(self) -> list[SweepRecord]:
        """Every sweep saved here; a document that cannot be read is said and left where it is (never removed)."""
        out = []
        for path in sorted(self.dir.glob("*.json")) if self.dir.is_dir() else []:
            try:
                out.append(SweepRecord.from_json(json.loads(path.read_text())))
            except (OSError, ValueError, TypeError) as exc:
                log.error("sweep_unreadable", path=str(path), error=str(exc),
                          detail="this sweep is not run; its trials are ordinary jobs and go on as such")
        return out
