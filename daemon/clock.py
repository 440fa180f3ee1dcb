"""Time for the supervisor: monotonic for every interval and deadline, wall only for what people read.

The wall clock jumps (NTP, an operator, a VM resume); deadlines on it fire hours early or late. The
monotonic clock does not jump, and CLOCK_MONOTONIC keeps counting across a supervisor restart on the
same boot, so a saved deadline still means the same instant to the next supervisor. After a reboot the
saved values mean nothing: `boot_id` tells the two apart (see runner.recover).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Protocol


# A status row's wall-clock times (a backoff's end, a placement, an estimated end) are monotonic ones plus wall -
# monotonic: a row made before is reused while that is the same to within this (NTP slews the wall clock by < 1 ms a
# second; a step makes every such row anew). runner.py's rows and the queue's part of them (scheduling/hook.py).
WALL_MINUS_MONO_SLACK = 0.01


class Clock(Protocol):
    boot_id: str

    def monotonic(self) -> float: ...

    def wall(self) -> float: ...


def _read_boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return f"unknown-{uuid.uuid4()}"  # every start is then a new boot: deadlines are waited again in full


class SystemClock:
    def __init__(self) -> None:
        self.boot_id = _read_boot_id()

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()
