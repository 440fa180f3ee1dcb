"""Sizes of the compile-cache directories for `isaacd status` and /metrics, measured off the supervisor's tick.

A Warp or Kit cache holds thousands of files; walking them on every tick (and every scrape) would stall the
supervisor. `SizeSampler.size` answers at once with the last measured size (None before the first walk) and, at
most every `every` seconds, hands one walk of every directory asked for so far to a background thread.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable

from .compile_caches import size_bytes

MEASURE_EVERY = 60.0


class SizeSampler:
    def __init__(self, every: float = MEASURE_EVERY, clock: Callable[[], float] = time.monotonic,
                 walk: Callable[[Path], int] = size_bytes,
                 spawn: Callable[[Callable[[], None]], None] | None = None):
        self.every, self.clock, self.walk = every, clock, walk
        self.spawn = spawn or (lambda fn: threading.Thread(target=fn, name="isaacd-cache-sizes", daemon=True).start())
        self._lock = threading.Lock()
        self._sizes: dict[Path, int] = {}
        self._asked: set[Path] = set()
        self._last: float | None = None
        self._busy = False
        self.version = 0  # one more each time a walk found another size: a status row made before it is stale
        self._unmeasured = False  # a path asked for has no size yet: walked a second after the last walk

    def due(self) -> bool:
        """A walk is due: the next `size()` starts one (a status row reused instead of made asks for none)."""
        if self._busy:
            return False
        since = None if self._last is None else self.clock() - self._last
        return since is None or since >= self.every or self._unmeasured and since >= 1.0

    def size(self, path: Path) -> int | None:
        """The last measured size of `path`; starts a walk in the background when one is due."""
        with self._lock:
            self._asked.add(path)
            self._unmeasured = self._unmeasured or path not in self._sizes
            now = self.clock()
            due = not self._busy and (self._last is None or now - self._last >= self.every
                                      or path not in self._sizes and now - self._last >= 1.0)
            if due:
                self._busy, self._last, paths = True, now, sorted(self._asked)
            known = self._sizes.get(path)
        if due:
            self.spawn(lambda: self._measure(paths))
        return known

    def _measure(self, paths: list[Path]) -> None:
        sizes: dict[Path, int] = {}
        try:
            for p in paths:
                sizes[p] = self.walk(p)
        finally:
            with self._lock:
                if any(self._sizes.get(p) != n for p, n in sizes.items()):
                    self.version += 1
                self._sizes.update(sizes)
                self._unmeasured = any(p not in self._sizes for p in self._asked)
                self._busy = False


SIZES = SizeSampler()  # the supervisor's one sampler: attempt/job_status.py asks it at every publish
