#!/usr/bin/env python3
"""What checking a job's task before the launch costs (daemon/workflows/registry.py), against what a wrong task cost
before issue 29: one failed launch of the real trainer (and, before, max_restarts of them).

    .venv/bin/python bench/task_check.py [REPEATS]

Prints, per trainer: the look-up's wall seconds (median of REPEATS) and one wrong-task launch's wall seconds until
the trainer exits, with the host's 1-minute load average beside them (the figures scale with it on a shared CPU).
The Isaac Lab 3.0 rows need .venv-isaaclab3 (scripts/isaaclab3-venv.sh).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from isaacd.config.schema import JobConfig
from isaacd.workflows.registry import check_task

REPO = Path(__file__).resolve().parents[1]
IL3 = REPO / ".venv-isaaclab3" / "bin" / "python"


def timed(fn) -> float:  # noqa: ANN001
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def launch_seconds(argv: list[str]) -> float:
    """A wrong-task launch, from exec to the trainer's exit (what isaacd waited per attempt)."""
    with tempfile.TemporaryDirectory() as cwd:
        t = time.monotonic()
        subprocess.run(argv, cwd=cwd, capture_output=True, check=False,
                       env=os.environ | {"ISAACSIM_ASSET_ROOT": str(REPO / "tests/isaaclab3/asset_root")})
        return time.monotonic() - t


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    rows = [("built-in trainer (2.x contract)", JobConfig(name="b", task="Isaacd-Cartpol-v0"),
             [sys.executable, "-m", "isaacd_trainer", "--task", "Isaacd-Cartpol-v0", "--num_envs", "8"])]
    if IL3.exists():
        job = JobConfig(name="i", workflow="rsl_rl", task="Isaac-Cartpol-Direct", launcher=[str(IL3)])
        rows.append(("Isaac Lab 3.0.0 kit-less, pip", job,
                     [str(IL3), "-m", "isaaclab", "train", "--rl_library", "rsl_rl", "--task", "Isaac-Cartpol-Direct",
                      "--device", "cpu", "--num_envs", "8"]))
    for label, job, argv in rows:
        checks = [timed(lambda: check_task(job)) for _ in range(repeats)]
        found = check_task(job)
        launch = launch_seconds(argv)
        print(f"{label}: task check {statistics.median(checks):.3f} s (median of {repeats}; "
              f"{'caught' if found.error else 'missed'}, closest {found.closest}); "
              f"one wrong-task launch {launch:.1f} s; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
