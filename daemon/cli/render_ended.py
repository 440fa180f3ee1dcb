"""How an ended job reads to a person (`isaacd history`, and the first lines of `isaacd events|logs` of an ended job).
Pure functions over the control API's answers (history/ended.py EndedJob.to_json, and its `ended` event)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .columns import aligned


def _clock(ts: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if isinstance(ts, (int, float)) else "-"


def _how(e: Mapping[str, Any]) -> str:
    return f"{e.get('how')} by {e['by']}" if e.get("by") else str(e.get("how"))


def _last(e: Mapping[str, Any]) -> str:
    return f"{e.get('state')} ({e['reason']})" if e.get("reason") else str(e.get("state"))


def ended_note(job: str, e: Mapping[str, Any], ended_at: Any = None) -> str:
    """Two lines: that the job has ended (when, how, its last state and reason), and where its files are."""
    runs = f"; its run dirs in {e['runs_folder']}" if e.get("runs_folder") else ""
    return (f"{job} has ended: {_how(e)} at {_clock(ended_at if ended_at is not None else e.get('ended_at'))}; "
            f"last state {_last(e)}\n  its history and logs are in {e.get('folder')}{runs}")


def events_note(job: str, events: list[dict[str, Any]]) -> str | None:
    """The note for `isaacd events` when the answer is an ended job's (its last event is `ended`)."""
    last = events[-1] if events else None
    if last is None or last.get("event") != "ended":
        return None
    return ended_note(job, last, last.get("time"))


def format_ended(rows: list[dict[str, Any]]) -> str:
    """`isaacd history`: one line per ended job, newest first, and where its files are."""
    if not rows:
        return "(no ended jobs)"
    table = [["NAME", "OWNER", "SUBMITTED", "ENDED", "HOW", "LAST STATE"]]
    table += [[r.get("name"), r.get("owner") or "-", _clock(r.get("submitted_at")), _clock(r.get("ended_at")),
               _how(r), _last(r)] for r in rows]
    lines = aligned(table)
    out = [lines[0]]
    for line, r in zip(lines[1:], rows):
        runs = f"; runs: {r['runs_folder']}" if r.get("runs_folder") else ""
        out += [line, f"  files: {r.get('folder')}{runs}"]
    return "\n".join(out)
