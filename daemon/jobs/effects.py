"""What the state machine asks the supervisor to do. The runner applies them in order.

Order is the crash-consistency contract: a decision that matters is `Persist`ed before the effect that
acts on it (`Signal`, `Kill`, `Launch`), so a supervisor killed between the two finds the intent on disk
and finishes it (recovery replays intents; replays are idempotent, see attempt/recovery.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .model import LaunchIntent


@dataclass(frozen=True)
class Persist:
    """Save the job's model (and history) now: the next effect relies on it being on disk."""


@dataclass(frozen=True)
class Launch:
    """Plan and start attempt N (choose the checkpoint, spawn with a token recorded first)."""

    intent: LaunchIntent


@dataclass(frozen=True)
class Signal:
    signum: int


@dataclass(frozen=True)
class Kill:
    """SIGKILL the trainer's whole process group / container."""


@dataclass(frozen=True)
class Event:
    """One line in the job's journal and the structured log."""

    name: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Forget:
    """Drop the ended attempt's per-run state (tail, shim reader); the history keeps the facts."""


@dataclass(frozen=True)
class HoldSpare:
    """Kill the job's warm spare and start none until `until` (monotonic): the queue needs its GPU memory."""

    reason: str
    until: float


Effect = Persist | Launch | Signal | Kill | Event | Forget | HoldSpare
