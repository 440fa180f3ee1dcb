"""One background thread per runtime for the slow calls (Podman API, systemctl, journalctl, podman kill).

The runtime's methods run in the supervisor's tick and must not wait; they `submit` work here and
read the results later. One thread, first in first out: what a runtime queued for a job happens in
the order it was queued (the release of an attempt before the launch of the next one), and the
runtime's caches are written by one thread only. A task never sleeps waiting for a state change:
it looks once and leaves the rest to the next `poll`, so one job stopping slowly does not hold up
the others' observations. Each external command in a task has its own timeout (`host.run_cmd`).

`Slot` is what a handle's tasks and the caller share: written by the worker under its lock, read
by the caller. `Handle.state` itself is only ever changed in the caller's thread (`poll` merges
what the worker found), so the runner can copy it at any time.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..daemon_log import log

MISSING = object()


@dataclass
class Slot:
    """One attempt's shared record between the caller (runtime methods) and the worker."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    busy: bool = False  # an observation is queued or running
    found: dict[str, Any] = field(default_factory=dict)  # Handle.state keys the worker set
    dropped: set[str] = field(default_factory=set)  # Handle.state keys the worker removed
    exit: Any = None  # ExitStatus once the end is known
    signalled: bool = False  # isaacd sent a signal (read by the worker's exit classification)
    cancel: int | None = None  # a signal that arrived while the launch was still queued
    launched: bool = False  # the launch task finished (successfully or not)
    cleanup_queued: bool = False
    cleaned: bool = False
    cache: dict[str, Any] = field(default_factory=dict)  # worker-side observations (inspect, props)

    def record(self, before: dict[str, Any], after: dict[str, Any]) -> None:
        """Remember what the worker changed in its copy of Handle.state, for `merge` in the caller."""
        with self.lock:
            for k, v in after.items():
                if before.get(k, MISSING) != v:
                    self.found[k] = v
                    self.dropped.discard(k)
            for k in before:
                if k not in after:
                    self.dropped.add(k)
                    self.found.pop(k, None)

    def merge(self, state: dict[str, Any]) -> None:
        with self.lock:
            state.update(self.found)
            for k in self.dropped:
                state.pop(k, None)
            self.found, self.dropped = {}, set()


class Worker:
    """A daemon thread running submitted callables in order; an exception is logged, never raised."""

    def __init__(self, name: str):
        self.name = name
        self._q: queue.SimpleQueue[tuple[str, Callable[[], None]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.current: tuple[str, float] | None = None  # what runs now, since when (monotonic)

    def submit(self, what: str, fn: Callable[[], None]) -> None:
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=f"isaacd-{self.name}-worker",
                                                    daemon=True)
                    self._thread.start()
        self._q.put((what, fn))

    def submit_after(self, delay: float, what: str, fn: Callable[[], None]) -> None:
        """Queue `fn` once `delay` seconds have passed: a task that looked once and must look again later (a unit
        still stopping) comes back this way instead of sleeping on the worker. The wait is a daemon timer thread,
        so a supervisor that exits meanwhile does not wait for it."""
        timer = threading.Timer(delay, self.submit, (what, fn))
        timer.daemon = True
        timer.start()

    def pending(self) -> int:
        return self._q.qsize()

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until everything queued so far has run (tests, shutdown). Never call from a tick."""
        done = threading.Event()
        self.submit("drain", done.set)
        return done.wait(timeout)

    def _run(self) -> None:
        while True:
            what, fn = self._q.get()
            self.current = (what, time.monotonic())
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - a task's failure is reported by its slot, not here
                log.warning("runtime_worker_task_failed", worker=self.name, task=what, error=f"{type(exc).__name__}: {exc}")
            finally:
                self.current = None


class SlottedRuntime:
    """The tick side of a runtime whose slow calls run on its Worker (podman, systemd): `poll` never waits.

    Each attempt has a Slot keyed by its launch token. `poll` hands back a known exit at once; otherwise, when
    nothing is queued for the attempt, it queues one step: the launch's next step until that finished, then
    one look (`_look`). What the worker found reaches Handle.state through `Slot.merge` at the next `_slot`.
    A subclass sets `worker`, `_slots` and `poll_failed_event`, and writes `_launch` and `_look`.
    """

    worker: Worker
    _slots: dict[str, Slot]
    poll_failed_event = "runtime_poll_failed"

    def _slot_key(self, handle: Any) -> str:
        return str(handle.state["token"])

    def _slot(self, handle: Any, launched: bool = True) -> Slot:
        key = self._slot_key(handle)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = Slot(launched=launched)
        slot.merge(handle.state)
        return slot

    def poll(self, handle: Any) -> Any:
        slot = self._slot(handle)
        if slot.exit is not None:
            return slot.exit
        if not slot.busy:
            slot.busy = True
            snap = dict(handle.state)
            if slot.launched:
                self.worker.submit(f"observe {handle.job}", lambda: self._observe(slot, snap))
            else:
                self.worker.submit(f"launch {handle.job}", lambda: self._launch(slot, snap))
        return None

    def _observe(self, slot: Slot, snap: dict[str, Any]) -> None:
        st = dict(snap)
        try:
            status = self._look(st, slot)
            slot.record(snap, st)
            if status is not None:
                slot.exit = status
        except Exception as exc:  # noqa: BLE001 - the API or systemctl went away for a moment: look again next tick
            log.warning(self.poll_failed_event, container=st.get("container"), unit=st.get("unit"), error=str(exc))
        finally:
            slot.busy = False

    def _launch(self, slot: Slot, snap: dict[str, Any]) -> None:
        """Worker: one step of the launch; sets `slot.launched` (and `slot.exit` if it failed) when done."""
        raise NotImplementedError

    def _look(self, st: dict[str, Any], slot: Slot) -> Any:
        """Worker: one look at a launched attempt, updating `st` (its Handle.state copy): its ExitStatus or None."""
        raise NotImplementedError
