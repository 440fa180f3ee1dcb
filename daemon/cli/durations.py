"""How long ago something happened, in the few characters a status table has room for ("45s", "3h07m")."""

from __future__ import annotations


def age(ts: float | None, now: float) -> str:
    if ts is None:
        return "-"
    s = max(0, int(now - ts))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"
