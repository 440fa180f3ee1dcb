"""Events the backup threads want in the job's journal. They are queued here and written by the runner on its
tick (the journal has one writer, the supervisor's main thread), in the order they happened."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

MAX_QUEUED = 1000  # a runner that stopped draining (a removed job) must not grow this without bound


class Notes:
    def __init__(self) -> None:
        self._q: deque[tuple[str, dict[str, Any]]] = deque(maxlen=MAX_QUEUED)
        self._lock = threading.Lock()

    def add(self, event: str, **fields: Any) -> None:
        with self._lock:
            self._q.append((event, fields))

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            out = list(self._q)
            self._q.clear()
        return out
