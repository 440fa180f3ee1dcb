"""How `isaacd reload`'s answer reads to a person (config/reload_diff.py makes it); pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config.live_keys import job_change_lines

WHEN = {"now": "in force now", "restart": "needs a supervisor restart (the running supervisor keeps the old value)"}


def setting_label(key: str) -> str:
    """"access.defaults.gpus" as the file spells it: "[access] defaults.gpus" (a whole section: "[ray]")."""
    section, _, rest = key.partition(".")
    return f"[{section}] {rest}" if rest else f"[{section}]"


def format_reload(config_path: str, res: Mapping[str, Any]) -> str:
    """One line per change: the jobs added and removed, each changed job with its keys, and every other changed key
    with when it takes effect. "no changes" only when nothing differs."""
    lines = []
    if res.get("added"):
        lines.append(f"added: {', '.join(res['added'])}")
    if res.get("removed"):
        lines.append(f"removed: {', '.join(res['removed'])} (a running trainer is stopped with a save)")
    keys = res.get("job_keys") or {}
    for job in res.get("changed") or ():
        lines += job_change_lines(job, keys.get(job) or ())
    settings = res.get("settings")
    if isinstance(settings, list):
        for s in settings:
            note = f"; {s['note']}" if s.get("note") else ""
            lines.append(f"{setting_label(str(s.get('key')))}: {WHEN.get(s.get('applies'), s.get('applies'))}{note}")
    elif res.get("needs_restart"):  # an older supervisor's answer: the names of what needs a restart
        lines.append(f"needs a supervisor restart: {', '.join(map(str, res['needs_restart']))}")
    if not lines:
        return f"reloaded {config_path}: no changes"
    return f"reloaded {config_path}:\n" + "\n".join(f"  {line}" for line in lines)
