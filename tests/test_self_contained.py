"""The test suite needs nothing outside the repository: its Podman host setup and systemd testbed are in it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent / "testbed"))

import tb  # noqa: E402


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / p for p in out.split("\0") if p]


def test_no_tracked_file_reaches_outside_the_repository():
    outside = "../" + "shared"  # spelled apart so this file does not match itself
    hits = []
    for path in _tracked():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        hits += [f"{path.relative_to(REPO)}:{n}" for n, line in enumerate(text.splitlines(), 1) if outside in line]
    assert hits == []


def test_the_testbed_scripts_are_the_repositorys_own_and_parse():
    assert tb.TB_SCRIPT.resolve().is_relative_to(REPO), tb.TB_SCRIPT
    host_setup = REPO / "tests" / "testbed" / "host-setup.sh"
    for script in (tb.TB_SCRIPT, host_setup):
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0, script
    assert "tests/testbed/host-setup.sh" in (REPO / "scripts" / "test.sh").read_text()
