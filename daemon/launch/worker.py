"""A launch's preparation off the tick thread (issue 38: one job's slow launch must never stall another job's
recovery, as a kubelet pod worker never blocks `UpdatePod`).

The preparation reads checkpoints (the deep check of the resume point), makes and hands over directories and writes
nothing the tick reads; on a slow disk (NFS) each of those can hang. It runs on a thread of its own per launch; the
tick waits for it at most `inline_wait` seconds once (a preparation takes milliseconds: the launch goes on in the
same tick, so recovery times stay as they were), and otherwise asks again at later ticks. What it has to say (its
events) it hands back with its answer, for the tick to write into the job's journal."""

from __future__ import annotations

import threading
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")
INLINE_WAIT = 0.2  # seconds: one default tick (supervisor.tick_interval)

Said = list[tuple[str, dict[str, Any]]]  # events the preparation says, written by the tick in order


class Preparation(Generic[T]):
    """One preparation running on its thread; `answer()` never blocks beyond the wait it is given."""

    def __init__(self, work: Callable[[Callable[..., None]], T], name: str):
        self.said: Said = []
        self._done = threading.Event()
        self._result: T | None = None
        self._error: BaseException | None = None
        self.stale = False  # its launch was given up meanwhile (a stop): its answer is dropped
        self._thread = threading.Thread(target=self._run, args=(work,), name=name, daemon=True)
        self._thread.start()

    def _say(self, name: str, **fields: Any) -> None:
        self.said.append((name, fields))

    def _run(self, work: Callable[[Callable[..., None]], T]) -> None:
        try:
            self._result = work(self._say)
        except BaseException as exc:  # noqa: BLE001 - handed to the tick, which raises it as the inline code did
            self._error = exc
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def answer(self, wait: float = 0.0) -> T | None:
        """Its result once done (None before); an exception it raised is raised here, on the tick."""
        if not self._done.wait(wait):
            return None
        if self._error is not None:
            raise self._error
        return self._result
