"""The docs' word on `check-config` (docs/workflows.md, where the README's Isaac Lab material moved in issue 30), held
against the real `isaacd check-config` output (issue 29). The README's word on `status` after a kill -9 is held in
tests/test_cli_history.py, on a real supervisor."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from helpers import BIN
from isaaclab3_helpers import PY, TASK

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = " ".join((REPO / "docs" / "workflows.md").read_text().split())  # claims wrap across lines


def check_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "host.toml"
    path.write_text(text)
    res = subprocess.run([str(BIN / "isaacd"), "check-config", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_check_config_names_the_builtin_trainers_contract(tmp_path):
    out = check_config(tmp_path, '[[jobs]]\nname = "a"\n')
    assert "  a: built-in trainer (Isaac Lab 2.3 contract)" in out.splitlines()


@pytest.mark.isaaclab3
def test_check_config_shows_the_installed_isaac_lab_version_as_the_docs_say(tmp_path):
    claim = ("the version of the `isaaclab` distribution installed in that Python, read once (`check-config` and "
             "`doctor` show it")
    assert claim in WORKFLOWS
    if not PY.exists():
        pytest.skip(f"{PY} missing: scripts/isaaclab3-venv.sh builds it (scripts/test.sh runs it)")
    version = subprocess.run([str(PY), "-c", "import importlib.metadata as m; print(m.version('isaaclab'))"],
                             capture_output=True, text=True, timeout=60).stdout.strip()
    out = check_config(tmp_path, f'[[jobs]]\nname = "il3"\nworkflow = "rsl_rl"\nlauncher = ["{PY}"]\n'
                                 f'task = "{TASK}"\n')
    major_minor = ".".join(version.split(".")[:2])
    assert re.search(rf"^  il3: Isaac Lab {re.escape(major_minor)} rsl_rl: .*\(from isaaclab installed in {PY}\)$",
                     out, re.M), out


def test_every_isaacd_command_the_readme_names_is_a_real_one():
    """The README's operator table and prose name commands a newcomer will type: each must exist."""
    readme = (REPO / "README.md").read_text()
    help_text = subprocess.run([str(BIN / "isaacd"), "--help"], capture_output=True, text=True, timeout=60).stdout
    commands = set(re.findall(r"^    ([a-z-]+)\s", help_text, re.M))
    named = set(re.findall(r"`(?:sudo )?(?:\.venv/bin/)?isaacd ([a-z][a-z-]+)", readme))  # as typed, in code
    named |= {m for row in re.findall(r"^\| `isaacd .*$", readme, re.M) for m in re.findall(r"/ `([a-z-]+)", row)}
    assert {"status", "events", "logs", "stop", "start", "reset", "reload", "doctor"} <= named
    assert named <= commands, f"the README names commands isaacd does not have: {sorted(named - commands)}"
