"""The launcher shim's side channel, the writing end (the daemon reads it in observations/shim_events.py): every
event one JSON line appended to ``ISAACD_SHIM_EVENTS`` (shim.py's docstring lists the events; their names are in
shim_protocol.py). Stdlib only, loaded with the shim (shim.py)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

if __package__:  # isaacd_trainer.shim_emit
    from . import shim_protocol as P
else:  # run by path: shim.py loaded these from beside it first (isaacd need not be installed)
    P = sys.modules["isaacd_shim_protocol"]


def rank() -> int:
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


# ----------------------------------------------------------------------------------------------- side channel
class Events:
    fd: int | None = None
    failed = False
    lock = threading.Lock()  # the snapshot writer thread emits too

    @classmethod
    def reopen(cls) -> None:
        """Forget the open file: the next event goes to the (new) ``ISAACD_SHIM_EVENTS``."""
        with cls.lock:
            if cls.fd is not None:
                try:
                    os.close(cls.fd)
                except OSError:
                    pass
            cls.fd, cls.failed = None, False

    @classmethod
    def emit(cls, event: str, **fields) -> None:
        path = os.environ.get(P.SHIM_EVENTS_ENV)
        if not path or cls.failed:
            return
        try:
            if cls.fd is None:
                got = cls.lock.acquire(timeout=1.0)  # a timeout: a signal handler may emit while the lock is held
                try:
                    if cls.fd is None:
                        cls.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                                         0o644)
                finally:
                    if got:
                        cls.lock.release()
            record = {"event": event, "time": time.time(), "pid": os.getpid(), "rank": rank()}
            record.update(fields)
            os.write(cls.fd, (json.dumps(record, default=str) + "\n").encode("utf-8"))
        except OSError as e:  # the side channel must never break training
            cls.failed = True
            print(f"[isaacd-shim] cannot write events to {path}: {e}", file=sys.stderr, flush=True)


emit = Events.emit
