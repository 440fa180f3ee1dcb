"""The GPU sampler's three daemon threads: when each pass runs, and surviving whatever a pass raises.

* ``isaacd-gpu-fast`` opens the source (again every ``reopen_interval`` while it is unavailable), then
  runs the fast pass every ``sample_interval``, skipping ticks it fell behind on rather than bursting;
* ``isaacd-gpu-slow`` runs the slow pass every ``slow_interval`` once the source is open;
* ``isaacd-gpu-xid`` sits in the XID wait, and ends when the system cannot report XIDs at all.

The passes themselves are the sampler's (``sampler.py``); this module only schedules them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, Callable, Protocol

import structlog

from .types import GpuNotSupportedError, XidEvent

log = structlog.get_logger("isaacd.gpu")


class Passes(Protocol):
    """What the threads run: the sampler's passes and intervals."""

    sample_interval: float
    slow_interval: float
    xid_timeout: float

    def open_due(self) -> bool: ...
    def poll_fast(self) -> None: ...
    def poll_slow(self) -> None: ...
    def poll_xid(self) -> list[XidEvent]: ...


class SamplerThreads:
    def __init__(self, sampler: Passes, opened: threading.Event):
        self.sampler = sampler
        self._opened = opened
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def running(self) -> bool:
        return bool(self._threads)

    def start(self) -> None:
        self._stop.clear()
        for name, target in (("fast", self._fast_loop), ("slow", self._slow_loop), ("xid", self._xid_loop)):
            t = threading.Thread(target=target, name=f"isaacd-gpu-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, limit: float) -> list[str]:
        """Stop and join the threads within ``limit`` seconds; returns the names of those still running."""
        self._stop.set()
        deadline = time.monotonic() + limit
        stuck = []
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                stuck.append(t.name)
        self._threads = []
        return stuck

    def _guard(self, loop: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the loop must survive anything
            log.exception("gpu sampler pass crashed", loop=loop, error=str(e))

    def _fast_loop(self) -> None:
        s = self.sampler
        next_t = time.monotonic()
        while not self._stop.is_set():
            if not self._opened.is_set() and not s.open_due():
                self._stop.wait(min(s.sample_interval, 1.0))
                continue
            self._guard("fast", s.poll_fast)
            next_t += s.sample_interval
            now = time.monotonic()
            if next_t < now:  # fell behind (slow driver): skip missed ticks, don't burst
                next_t = now + s.sample_interval
            self._stop.wait(next_t - now)

    def _while_open(self) -> Iterator[None]:
        """Once per turn until stopped, while the source is open (rechecked twice a second while it is not)."""
        while not self._stop.is_set():
            if self._opened.wait(0.5):
                yield

    def _slow_loop(self) -> None:
        s = self.sampler
        for _ in self._while_open():
            start = time.monotonic()
            self._guard("slow", s.poll_slow)
            self._stop.wait(max(0.0, s.slow_interval - (time.monotonic() - start)))

    def _xid_loop(self) -> None:
        s = self.sampler
        for _ in self._while_open():
            t0 = time.monotonic()
            try:
                if not s.poll_xid() and time.monotonic() - t0 < min(0.01, s.xid_timeout):
                    # a source that returns at once without events must not make this thread spin
                    self._stop.wait(min(s.xid_timeout, 0.5))
            except GpuNotSupportedError:
                return  # logged once in poll_xid; nothing to watch on this system
            except Exception:  # noqa: BLE001 - counted and logged in poll_xid
                self._stop.wait(1.0)
