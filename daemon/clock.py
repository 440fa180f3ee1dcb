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
