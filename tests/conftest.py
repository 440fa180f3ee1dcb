import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from helpers import SupervisorProc  # noqa: E402

# A suite started as a background job of a non-interactive shell (`cmd &` in a script, nohup) inherits SIGINT
# ignored, and so would every trainer and CLI it starts: Ctrl-C tests then hang on processes that never see the
# signal (session 8: `(nohup bash -c '... .ci/run' &)` failed four such tests). Ignored signals survive exec, handled
# ones do not, so a handler here gives the children SIGINT back as a user's terminal delivers it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


@pytest.fixture
def tmpfs():
    """mount(tmpfs of `size`) at a path: a small disk a test can fill. Skips without root; unmounted after."""
    import subprocess

    mounted: list[Path] = []

    def mount(path: Path, size: str = "2m") -> Path:
        path.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {res.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)
