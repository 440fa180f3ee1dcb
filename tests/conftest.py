import functools
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from helpers import SupervisorProc  # noqa: E402

# A suite started as a background job of a non-interactive shell (`cmd &` in a script, nohup) inherits SIGINT
# ignored, and so would every trainer and CLI it starts: Ctrl-C tests then hang on processes that never see the
# signal (session 8: `(nohup bash -c '... .ci/run' &)` failed four such tests). Ignored signals survive exec, handled
# ones do not, so a handler here gives the children SIGINT back as a user's terminal delivers it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# ---- running the suite on several workers (pytest-xdist, `scripts/test.sh` passes `-n N --dist loadscope`) -------
# Each test file is one unit of work (its module fixtures boot once), except where files share something of the
# host's that two workers cannot hold at once: Podman containers and systemd units are named after the job
# ("isaaclab-job-cp"), so every file with a podman or systemd test runs on one worker, one after another; the two
# Ray files each start a local cluster. Units are handed out longest first (tests/timings.txt: seconds per file,
# measured from a fresh clone) so that the last unit to finish is a short one: that orders work, it asserts nothing
# about speed. The units are made here, by file name, in a scheduler of our own: xdist's `loadgroup` marks do not
# reach its scheduler under pytest 9 (xdist 3.8 renames `item._nodeid`, pytest 9 reads `item._id`).
TESTS = Path(__file__).parent
FILE_GROUPS = {"test_ray_runtime.py": "ray", "test_backup_ray.py": "ray"}
HOST_MARKS = re.compile(r"pytest\.mark\.(podman|systemd)\b")  # as scripts/test.sh reads a file's needs
TIMINGS = TESTS / "timings.txt"


@functools.cache
def work_unit(file_name: str) -> str:
    if file_name in FILE_GROUPS:
        return FILE_GROUPS[file_name]
    try:
        text = (TESTS / file_name).read_text()
    except OSError:
        return file_name
    return "host-containers" if HOST_MARKS.search(text) else file_name


@functools.cache
def file_seconds() -> dict[str, float]:
    """tests/timings.txt: seconds per test file (scripts/test-timings.py writes it from a --durations=0 run)."""
    try:
        rows = [line.split() for line in TIMINGS.read_text().splitlines() if line.strip() and not line.startswith("#")]
    except OSError:
        return {}
    return {name: float(seconds) for seconds, name in rows}


# A file not in tests/timings.txt yet (a test written since the last fresh-clone measure) with a mark of the slow or
# real-thing tests is counted this long, so that it is handed out among the first, not last: an unmeasured Isaac Lab
# e2e test (60-90 s in the suite) handed out last would run alone at the end while the other worker idles. An unmeasured
# file without such a mark counts 0 s, as before: the short unit tests are what should fill the end.
UNMEASURED_SLOW_SECONDS = 90.0
SLOW_FILE_MARKS = re.compile(r"pytest\.mark\.(slow|isaaclab3|podman|systemd|prometheus)\b")


@functools.cache
def estimated_seconds(file_name: str) -> float:
    """The file's measured seconds (tests/timings.txt); else UNMEASURED_SLOW_SECONDS for a file marked slow."""
    if file_name in file_seconds():
        return file_seconds()[file_name]
    try:
        text = (TESTS / file_name).read_text()
    except OSError:
        return 0.0
    return UNMEASURED_SLOW_SECONDS if SLOW_FILE_MARKS.search(text) else 0.0


def unit_seconds(file_names: set[str]) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for name in file_names:
        unit = work_unit(name)
        seconds[unit] = seconds.get(unit, 0.0) + estimated_seconds(name)
    return seconds


def pytest_configure(config: pytest.Config) -> None:
    # On a worker, one math thread per trainer: the workers already keep the cores busy, and torch's default (a
    # thread per core in every trainer of every worker) only makes them take turns. Inherited by every process a
    # test starts; a test that sets it itself wins.
    if hasattr(config, "workerinput"):
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, "1")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadscope` with our units: every test of a unit goes to the worker that took the unit."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(Path(nodeid.split("::", 1)[0]).name)

    return ByUnit(config, log)


# The fast tier (`scripts/test.sh --fast`, the inner loop): the files that took at most FAST_UNIT_SECONDS in the last
# measured run and need none of the real things (Podman, systemd, Prometheus, the real Isaac Lab), nor a long run.
# A file not measured yet counts as fast: new tests are run by the next `--fast`, and CI runs everything anyway.
FAST_UNIT_SECONDS = 5.0
REAL_THING_MARKS = ("slow", "podman", "systemd", "prometheus", "isaaclab3")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true",
                     help=f"only the fast tier: files measured at most {FAST_UNIT_SECONDS:g} s (tests/timings.txt) "
                          f"with none of the marks {', '.join(REAL_THING_MARKS)}")


def is_fast(item: pytest.Item) -> bool:
    if any(item.get_closest_marker(mark) is not None for mark in REAL_THING_MARKS):
        return False
    return file_seconds().get(item.path.name, 0.0) <= FAST_UNIT_SECONDS


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("fast"):
        keep = [item for item in items if is_fast(item)]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep
    # the workers collect (the controller only hands out ids); xdist sets a worker's own `dist` to "no", so a
    # worker knows it is one by its `workerinput`. Every worker sorts alike: their collections must match.
    if not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") == "no":
        return  # one process: the order the files are written in
    seconds = unit_seconds({item.path.name for item in items})
    # a stable sort: within a unit, tests keep their order (module fixtures, tests that build on each other)
    items.sort(key=lambda item: -seconds[work_unit(item.path.name)])


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

