"""sd_notify(3) in a few lines of stdlib: READY=1, STATUS=, WATCHDOG=1, STOPPING=1.

A no-op outside systemd (NOTIFY_SOCKET unset). The trainer's environment drops NOTIFY_SOCKET
(see launch.TRAINER_ENV_DROP) so a child can never claim the supervisor unit's main PID.
"""

from __future__ import annotations

import os
import socket


def notify(*lines: str) -> bool:
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(addr)
            sock.sendall("\n".join(lines).encode())
        return True
    except OSError:
        return False

