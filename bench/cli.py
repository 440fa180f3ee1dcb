#!/usr/bin/env python3
"""Client start-up and install re-run benchmark: prints medians.

    .venv/bin/python bench/cli.py            # `isaacd status` against a real supervisor, N runs, + install re-run
    .venv/bin/python bench/cli.py --runs 50 --no-install

Measures the wall time of the real `isaacd` binary (a fresh interpreter each run, as a user's shell starts it)
for `status`, `events JOB`, `--help`, and, for comparison, a bare `python -c pass` (the floor). Then the wall time
of `scripts/install.sh` when nothing changed. The supervisor is started on a throw-away config with one idle job
and metrics off. Figures depend on the machine and its load: compare runs made on the same machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CONFIG = """
[supervisor]
state_dir = "state"
control_socket = "isaacd.sock"
log_format = "json"
[metrics]
enabled = false
[gpu]
source = "none"
[[jobs]]
name = "idle"
autostart = false
"""


def timed(argv: list[str], runs: int, cwd: Path | None = None) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        out.append(time.perf_counter() - t0)
    return out


def line(name: str, xs: list[float]) -> str:
    return (f"{name:<34} median {statistics.median(xs) * 1000:7.1f} ms   "
            f"min {min(xs) * 1000:7.1f} ms   max {max(xs) * 1000:7.1f} ms   (n={len(xs)})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--no-install", action="store_true", help="skip the install re-run figure")
    args = ap.parse_args()

    isaacd = str(BIN / "isaacd")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_RUNTIME_DIR"] = tmp  # a registry of our own: other supervisors of this user stay out
        cfg = Path(tmp) / "isaacd.toml"
        cfg.write_text(CONFIG)
        sup = subprocess.Popen([isaacd, "run", "--config", str(cfg)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.time() + 30
            while subprocess.run([isaacd, "--config", str(cfg), "status"], capture_output=True).returncode != 0:
                if time.time() > deadline:
                    print("supervisor did not come up", file=sys.stderr)
                    return 1
                time.sleep(0.2)
            print(line("python -c pass (floor)", timed([sys.executable, "-c", "pass"], args.runs)))
            print(line("isaacd --help", timed([isaacd, "--help"], args.runs)))
            print(line("isaacd status", timed([isaacd, "--config", str(cfg), "status"], args.runs)))
            print(line("isaacd status --json", timed([isaacd, "--config", str(cfg), "status", "--json"], args.runs)))
            print(line("isaacd events idle", timed([isaacd, "--config", str(cfg), "events", "idle"], args.runs)))
            print(line("isaacd status (found via registry)", timed([isaacd, "status"], args.runs, cwd=Path(tmp).parent)))
        finally:
            os.killpg(sup.pid, signal.SIGTERM)
            sup.wait(30)
    if not args.no_install:
        install = str(REPO / "scripts" / "install.sh")
        subprocess.run([install], stdout=subprocess.DEVNULL, check=True)  # bring the stamp up to date first
        print(line("scripts/install.sh, nothing changed", timed([install], max(3, args.runs // 4))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
