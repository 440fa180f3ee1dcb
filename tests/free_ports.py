"""Free TCP ports on 127.0.0.1 for servers a test starts.

Several ports for one test are picked with every socket still bound, so the kernel cannot hand the same port out
twice: picked one at a time (bind to 0, close, repeat), two of them can be equal, and a server given the same port
for two listeners dies at its second bind (CI of stop 47: SeaweedFS's S3 and Iceberg listeners both on 42149). A
port can still be taken by another process between the pick and the server's bind; a caller that can pick again
does so (`SeaweedS3.start`)."""

from __future__ import annotations

import socket
from contextlib import ExitStack


def free_ports(n: int) -> list[int]:
    """n distinct free ports."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def free_port() -> int:
    return free_ports(1)[0]
