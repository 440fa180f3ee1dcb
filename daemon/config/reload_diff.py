"""What a reload changed, and when each change takes effect (`isaacd reload`, issue 37); pure.

The old and new validated configs are compared key by key, generically: every field of every section, every key of a
table such as `[access.users]`, so a section added to the schema is reported without a list here to update. A job's
keys are compared the same way. Whether a section's change is in force now or waits for a supervisor restart is the
supervisor's to say (`Supervisor._apply_config` keeps some sections as it started: `held`); this module only words it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from .live_keys import NOW

RESTART = "restart"
# Keys whose effect is more than "now" or "at a restart" (the supervisor's own behaviour, said where a user reads it)
NOTES = {
    "supervisor.jobs_dir": "the jobs in the new directory are read now; `isaacd submit` and `isaacd cancel` use the "
                           "old one until a restart",
}


def changed_keys(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two validated values: models field by field, tables key by key
    (a key only one side has is changed), anything else (a list, a number) as a whole."""
    if isinstance(old, BaseModel) and isinstance(new, BaseModel) and type(old) is type(new):
        out: list[str] = []
        for name in type(old).model_fields:
            out += changed_keys(getattr(old, name), getattr(new, name), _join(prefix, name))
        return out
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out = []
        for k in [*old, *(k for k in new if k not in old)]:
            key = _join(prefix, str(k))
            out += changed_keys(old[k], new[k], key) if k in old and k in new else [key]
        return out
    return [] if old == new else [prefix]


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


@dataclass(frozen=True)
class SettingChange:
    """One changed key of a section other than [[jobs]]: "access.defaults.gpus", in force now or at a restart."""

    key: str
    applies: str  # NOW or RESTART
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "applies": self.applies, "note": self.note}


def setting_changes(old: BaseModel, new: BaseModel, held: Collection[str]) -> tuple[SettingChange, ...]:
    """Every changed key of every section but the jobs; `held`: the sections the running supervisor keeps as they
    were when it started (their changes need a restart)."""
    out = []
    for section in type(old).model_fields:
        if section == "jobs":
            continue
        for key in changed_keys(getattr(old, section), getattr(new, section), section):
            out.append(SettingChange(key, RESTART if section in held else NOW, NOTES.get(key)))
    return tuple(out)


@dataclass(frozen=True)
class ReloadSummary:
    """A reload's answer (the control socket's `reload`): the jobs added, removed and changed (with the keys that
    changed: in force now or at each job's next start, live_keys.job_key_applies) and every other changed key with
    when it takes effect."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    job_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    settings: tuple[SettingChange, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"added": list(self.added), "removed": list(self.removed), "changed": list(self.changed),
                "job_keys": {k: list(v) for k, v in self.job_keys.items()},
                "settings": [s.to_json() for s in self.settings],
                "needs_restart": [s.key for s in self.settings if s.applies == RESTART]}
