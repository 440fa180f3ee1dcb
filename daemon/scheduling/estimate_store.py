"""The queue's memory of earlier runs (issue 42): `state_dir/estimates.json`, one JSON document written atomically
(a temporary file beside it, fsynced, renamed over it), read once at the queue's start.

  runs     "<workflow>:<task>:<num_envs>" -> the last completed run's seconds per iteration and start-up seconds:
           a job of that task, library and size that has not run yet is estimated from it (estimates.py)
  overran  job -> when it ran past the reservation it had started ahead of, not preemptible: it does not start
           ahead on an estimate again until one of its estimates has held
  errors   job -> its last completed run's estimate error (took / said, by source), shown by `isaacd status`

Each map keeps its newest MAX_KEPT entries (a host that runs sweeps names thousands of jobs over its life, and
the whole document is rewritten at each job's end): runs by when each was last written, errors by when each
was first written, overran by its time.

A file that cannot be read is set aside (`estimates.json.bad-<time>`) and the queue starts with no history: an
estimate is an optimisation, never a reason not to start.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..daemon_log import log
from ..os_seam.durable import write_private_json
from .estimates import Past

FILE = "estimates.json"
MAX_KEPT = 1000  # entries per map: every task, library and size a host runs at once, many times over


class EstimateStore:
    def __init__(self, state_dir: Path | str | None):
        self.path = Path(state_dir) / FILE if state_dir is not None else None
        self.runs: dict[str, Past] = {}
        self.overran: dict[str, float] = {}
        self.errors: dict[str, dict[str, float]] = {}
        self._load()

    def _load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            doc = json.loads(self.path.read_text())
            self.runs = {k: Past(float(v["seconds_per_iteration"]), float(v["startup_seconds"]))
                         for k, v in doc.get("runs", {}).items()}
            self.overran = {str(k): float(v) for k, v in doc.get("overran", {}).items()}
            self.errors = {str(k): {str(s): float(r) for s, r in v.items()} for k, v in doc.get("errors", {}).items()}
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            aside = self.path.with_name(f"{FILE}.bad-{int(time.time())}")
            log.warning("estimates_unreadable", path=str(self.path), error=str(e), moved_to=str(aside),
                        detail="starting with no history of earlier runs")
            self.runs, self.overran, self.errors = {}, {}, {}
            try:
                self.path.rename(aside)
            except OSError:
                pass

    def record(self, key: str, past: Past) -> None:
        self.runs.pop(key, None)  # the newest last: what pruning keeps
        self.runs[key] = past
        self.save()

    def _prune(self) -> None:
        for newest_last in (self.runs, self.errors):
            for key in list(newest_last)[:max(0, len(newest_last) - MAX_KEPT)]:
                del newest_last[key]
        if len(self.overran) > MAX_KEPT:
            self.overran = dict(sorted(self.overran.items(), key=lambda kv: kv[1])[-MAX_KEPT:])

    def save(self) -> None:
        if self.path is None:
            return
        self._prune()
        doc: dict[str, Any] = {  # in the order written (oldest first): the next supervisor prunes the same ones
            "version": 1,
            "runs": {k: {"seconds_per_iteration": p.seconds_per_iteration, "startup_seconds": p.startup_seconds}
                     for k, p in self.runs.items()},
            "overran": self.overran, "errors": self.errors}
        try:
            write_private_json(self.path, doc, sort_keys=False)
        except OSError as e:  # a full disk costs the history, never the queue
            log.warning("estimates_not_saved", path=str(self.path), error=str(e))
