"""Spares the keeper has let go of, kept until their runtime has released them (issue 37: no zombie processes).

A killed spare is a zombie (`<defunct>` under the supervisor) until someone waits for it, and nothing polls a spare
the keeper has dropped: the observer polls trainers only. So the keeper hands each dropped spare's handle here, and
at each tick `poll` asks its runtime's `cleanup` again until it answers True (runtimes/base.py's contract), then
forgets it. On the process runtime that cleanup is where the child is reaped (waitpid with WNOHANG: never a
blocking wait on the tick); a container runtime's stops a spare's unit. The runner says it is `releasing` while one
is left, and the supervisor keeps a removed (cancelled) job's runner until then, so its last spare is reaped too.
"""

from __future__ import annotations

from ..daemon_log import log
from ..runtimes.base import Handle, Runtime


class Releasing:
    """The dropped spares whose runtime has not released them yet: each with the runtime that started it (a reload
    may give the job another runtime meanwhile)."""

    def __init__(self) -> None:
        self.pending: list[tuple[Runtime, Handle]] = []

    def add(self, runtime: Runtime, handle: Handle) -> None:
        """A spare the keeper dropped (killed, or dead unused): released now if its runtime can, else kept."""
        if not _released(runtime, handle):
            self.pending.append((runtime, handle))

    def poll(self) -> None:
        """One more ask of each runtime (each tick): the released ones are forgotten."""
        if self.pending:
            self.pending = [(runtime, handle) for runtime, handle in self.pending if not _released(runtime, handle)]

    def __bool__(self) -> bool:
        return bool(self.pending)


def _released(runtime: Runtime, handle: Handle) -> bool:
    try:
        done = runtime.cleanup(handle)
    except Exception as exc:  # noqa: BLE001 - a runtime that cannot say is not asked again: nothing to wait for
        log.warning("spare_cleanup_failed", job=handle.job, pid=handle.pid, error=str(exc))
        return True
    return done is None or bool(done)
