"""scripts/test.sh FILE sets up only what FILE's pytest markers ask for; with no test path, everything (CI)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"

# What in a test file shows it needs a setup step, and the marker that asks scripts/test.sh for that step.
USES = {
    "podman": r"\bpodman_url\b|_podman_works|\bpodman_api\b|_podman_runs_containers",
    "isaaclab3": r"isaaclab3_helpers|\bREAL_PY\b|ISAACLAB3_VENV",  # not the name in prose: captured output
    "prometheus": r"which\(\"(promtool|prometheus)\"\)|alertmanager",
    "systemd": r"\bbooted_testbed\b|\bchroot_tools\b|systemd-analyze",
    "shared_install": r"ISAACD_TEST_PREFIX",  # scripts/install.sh --system's install for the test
}


def plan(*args: str) -> str:
    res = subprocess.run([str(REPO / "scripts" / "test.sh"), *args], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "ISAACD_TEST_PLAN": "1"}, cwd=REPO)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().removeprefix("test.sh sets up: ")


@pytest.mark.parametrize("args, wants", [
    ((), "prometheus systemd podman isaaclab3 shared_install"),  # CI: `scripts/test.sh`, the full setup
    (("-k", "status"), "prometheus systemd podman isaaclab3 shared_install"),  # no test path: the whole suite runs
    (("--deselect", "tests/test_cli.py::test_x"), "prometheus systemd podman isaaclab3 shared_install"),  # a value
    (("tests/test_workflows_installed.py",), "nothing"),
    (("tests/test_podman_runtime.py", "-x"), "podman"),
    (("tests/test_quadlet_units.py::test_sd_quote_shapes",), "systemd"),
    (("tests/test_isaaclab3_podman.py", "tests/test_prometheus_rules.py"), "isaaclab3 podman prometheus"),
    (("tests/test_shared_install.py",), "shared_install"),
    (("--fast",), "nothing"),  # the inner loop: no real-thing test runs in it
])
def test_the_plan_follows_the_named_files_markers(args, wants):
    assert plan(*args) == wants


def test_every_file_that_uses_a_setup_carries_its_marker():
    """A file that needs Podman (say) without `pytest.mark.podman` would run unprepared under `test.sh FILE`."""
    missing = [f"{path.name}: pytest.mark.{need}" for path in sorted(TESTS.glob("test_*.py"))
               for need, uses in USES.items()
               if path != Path(__file__) and re.search(uses, text := path.read_text())
               and f"pytest.mark.{need}" not in text]
    assert not missing, missing


def test_the_fast_tier_keeps_quick_unit_files_and_leaves_out_real_things_and_long_files():
    """`scripts/test.sh --fast` is pytest --fast: a real-thing file (Podman, the real Isaac Lab) and a file measured
    slow in tests/timings.txt are left out; a unit-test file runs."""
    files = ["tests/test_job_machine.py", "tests/test_isaaclab3_real.py", "tests/test_supervisor_e2e.py"]
    res = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider", "--fast",
                          "--collect-only", "-q", *files], capture_output=True, text=True, timeout=120, cwd=REPO)
    collected = {line.split("::")[0] for line in res.stdout.splitlines() if "::" in line}
    assert collected == {"tests/test_job_machine.py"}, res.stdout[-2000:]
