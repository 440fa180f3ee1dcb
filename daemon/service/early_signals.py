"""SIGHUP from the first instant of `isaacd run`: a reload request, never death.

SIGHUP's default action kills the process. The supervisor's own handlers are installed only once its
config is read and its modules imported (half a second and more), and a SIGHUP sent in that window by
a `systemctl reload` or a config-management run killed the supervisor. `defer()` runs first thing in
`isaacd run` and remembers the signal; the supervisor picks it up when it installs its handlers.
"""

from __future__ import annotations

import signal
from typing import Any

_pending: set[int] = set()


def _remember(signum: int, _frame: Any) -> None:
    _pending.add(signum)


def defer() -> None:
    signal.signal(signal.SIGHUP, _remember)


def take(signum: int) -> bool:
    """Whether `signum` arrived before the real handlers were installed (and forget it)."""
    if signum in _pending:
        _pending.discard(signum)
        return True
    return False
