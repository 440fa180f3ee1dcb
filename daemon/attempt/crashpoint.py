"""The crash test's seam (tests/test_crash_consistency.py): die at one effect boundary, as a power cut would."""

from __future__ import annotations

import os
import signal

from ..os_seam.oscalls import signal_pid

CRASH_AT_ENV = "ISAACD_TEST_CRASH_AT"  # the crash test's seam: SIGKILL ourselves at one effect boundary


def crash_point(label: str) -> None:
    """Die here, as a power cut would, when the crash test asks for this boundary (tests/test_crash_consistency.py).
    Only an environment variable set by that test reaches this; nothing else can."""
    if os.environ.get(CRASH_AT_ENV) == label:
        signal_pid(os.getpid(), signal.SIGKILL)
