"""Learn of a trainer's death the moment it happens, not at the next tick.

A pidfd (Linux >= 5.3) becomes readable when its process exits, whoever its parent is: a process-runtime
child, an adopted trainer from a previous supervisor, or the host pid of a container's main process. One
thread waits on all of them with poll(2) and sets the supervisor's wake event; the supervisor then ticks at
once, the runtime's poll() reports the exit and the state machine decides, so a crash is acted on within
milliseconds. Where pidfds are unavailable (old kernel, a pid in another namespace) the tick still finds
the exit, one tick_interval later.
"""

from __future__ import annotations

import os
import select
import threading

from ..daemon_log import log


class ExitWatcher:
    def __init__(self, wake: threading.Event):
        self._wake = wake
        self._fds: dict[int, int] = {}  # pid -> pidfd
        self._seen_dead: set[int] = set()  # reported once; not watched again (a zombie would wake us forever)
        self._lock = threading.Lock()
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="isaacd-exitwatch", daemon=True)
        self.available = hasattr(os, "pidfd_open")

    def start(self) -> None:
        if self.available:
            self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        self._poke()
        if self._thread.is_alive():
            self._thread.join(2)
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass

    def watch(self, pids: set[int]) -> None:
        """Watch exactly these pids (called each tick with the live trainers' pids)."""
        if not self.available:
            return
        changed = False
        with self._lock:
            self._seen_dead &= pids  # forget the dead once nobody asks about them
            pids = pids - self._seen_dead
            for pid in [p for p in self._fds if p not in pids]:
                os.close(self._fds.pop(pid))
                changed = True
            for pid in pids - set(self._fds):
                try:
                    self._fds[pid] = os.pidfd_open(pid)
                    changed = True
                except OSError:  # already gone (the tick will see it), or not ours to watch
                    continue
        if changed:
            self._poke()

    def _poke(self) -> None:
        try:
            os.write(self._w, b"x")
        except OSError:
            pass

    def _run(self) -> None:
        while not self._stopped:
            poller = select.poll()
            poller.register(self._r, select.POLLIN)
            with self._lock:
                by_fd = {fd: pid for pid, fd in self._fds.items()}
            for fd in by_fd:
                poller.register(fd, select.POLLIN)
            try:
                ready = poller.poll()
            except (OSError, ValueError):  # an fd closed under us by watch(): rebuild the set
                continue
            for fd, _ in ready:
                if fd == self._r:
                    try:
                        os.read(self._r, 4096)
                    except OSError:
                        pass
                elif fd in by_fd:
                    log.debug("trainer_exit_seen", pid=by_fd[fd])
                    with self._lock:  # seen once: the tick decides; stop watching until told again
                        if self._fds.get(by_fd[fd]) == fd:
                            os.close(self._fds.pop(by_fd[fd]))
                            self._seen_dead.add(by_fd[fd])
                    self._wake.set()
