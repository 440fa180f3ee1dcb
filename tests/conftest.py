import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from helpers import SupervisorProc  # noqa: E402


@pytest.fixture
def supervisor_factory(tmp_path):
    """Start real supervisors; always stopped (and their trainers killed) at teardown."""
    started: list[SupervisorProc] = []

    def make(config: Path) -> SupervisorProc:
        sp = SupervisorProc(config).start()
        started.append(sp)
        return sp

    yield make
    for sp in started:
        if sp.proc and sp.proc.poll() is None:
            sp.stop()
    # trainers left behind by a test that killed its supervisor with SIGKILL
    for line in os.popen(f"pgrep -f {tmp_path}").read().split():
        try:
            os.kill(int(line), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
