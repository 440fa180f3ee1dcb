"""What the real-Isaac-Lab-3.0 tests share: where the venv and the assets are, and how a job's runs are read back."""

from __future__ import annotations

import os
from pathlib import Path

from helpers import steps  # noqa: F401 (re-exported: the real-Isaac-Lab tests read their runs with it)

REPO = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("ISAACLAB3_VENV", REPO / ".venv-isaaclab3"))  # scripts/isaaclab3-venv.sh
PY = VENV / "bin" / "python"
ASSET_ROOT = REPO / "tests" / "isaaclab3" / "asset_root"  # the hand-written cart-pole and ground plane
TASK = "Isaac-Cartpole-Direct"
BOOT = 240  # seconds a launch may take to reach its first iteration on a loaded 2-core machine (cold Warp cache)


def events(sp, job: str, kind: str) -> list[dict]:  # noqa: ANN001
    return [e for e in sp.events(job) if e["event"] == kind]


def started(sp, job: str) -> list[dict]:  # noqa: ANN001
    return events(sp, job, "started")


def run_dirs(sp, job: str) -> list[Path]:  # noqa: ANN001
    """The job's run dirs in the order its attempts reported them."""
    out: list[Path] = []
    for e in events(sp, job, "run_dir"):
        if Path(e["run_dir"]) not in out:
            out.append(Path(e["run_dir"]))
    return out


