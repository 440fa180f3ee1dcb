"""Sweeps in /metrics (issue 39): each sweep's trials by state, its best objective and the GPU time its trials held.
Like the rest of /metrics it reads only the published status (`Status.sweeps`, each a status/sweeps.py
`SweepStatus`, or their JSON); what it exports is defined in catalog.py, its state labels read from
sweeps.asha.TrialState, never copied. One sweep whose row is odd costs only its own series (the caller counts it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..status.sweeps import SweepStatus
from ..sweeps.asha import TrialState
from .families import Families, num

TRIAL_STATES = tuple(s.value for s in TrialState)


def sweeps_of(status: Any) -> list[SweepStatus | Mapping[str, Any]]:
    """The sweep rows of a scrape's status: a Status's typed ones, or its JSON's rows (read one by one)."""
    rows = getattr(status, "sweeps", None)
    if rows is None and isinstance(status, Mapping):
        rows = status.get("sweeps")
    return [r for r in (rows if isinstance(rows, (list, tuple)) else ()) if isinstance(r, (SweepStatus, Mapping))]


def collect_sweep(f: Families, row: SweepStatus | Mapping[str, Any]) -> None:
    """One sweep's series. Every trial state from 0, so a panel sees trials move from pending to completed."""
    sw = row if isinstance(row, SweepStatus) else SweepStatus.from_json(row)
    if not isinstance(sw.name, str) or not sw.name:
        raise ValueError(f"sweep without a name in status: {row!r:.200}")
    counts = dict.fromkeys(TRIAL_STATES, 0)
    for t in sw.trials:
        state = t.state.value if isinstance(t.state, TrialState) else str(t.state)
        counts[state] = counts.get(state, 0) + 1  # (a state this isaacd does not know: exported as it came)
    for state, n in counts.items():
        f.add("isaacd_sweep_trials", [sw.name, state], n)
    if sw.best is not None:  # none yet: no series, never a fake 0
        f.add("isaacd_sweep_best_objective", [sw.name], num(sw.best_objective))
    f.add("isaacd_sweep_gpu_seconds_total", [sw.name], num(sw.gpu_seconds))

