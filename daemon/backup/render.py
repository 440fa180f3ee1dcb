"""The backup line of `isaacd status`: last upload (iteration, age), lag in iterations, and any error."""

from __future__ import annotations

from typing import Any

from ..durations import age


def backup_note(job: dict[str, Any], now: float) -> str | None:
    b = job.get("backup")
    if not isinstance(b, dict):
        return None
    last = b.get("last_upload")
    parts = [f"last upload iteration {last['iteration']} ({age(last['time'], now)} ago)" if last
             else "no upload yet"]
    if b.get("lag_iterations") is not None:
        parts.append(f"lag {b['lag_iterations']} iteration{'' if b['lag_iterations'] == 1 else 's'}")
    if b.get("restoring"):
        parts.append(f"fetching a checkpoint: {b['restoring']}")
    line = f"  {job['name']} backup {b.get('url')}: {', '.join(parts)}"
    if b.get("error"):
        retry = f"; retry in {max(0, int(b['retry_at'] - now))}s" if b.get("retry_at") else ""
        line += f"\n    backup ERROR since {age(b.get('error_since'), now)} ago: {b['error']}{retry}"
    return line
