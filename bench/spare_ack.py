#!/usr/bin/env python3
"""The warm spare's ack of the go (issue 28): how long a parked spare takes to acknowledge the go line isaacd writes,
the latency `[jobs.launch] spare_ack_timeout` must always cover with a margin. Real `isaacd run`, the built-in
trainer (real rsl_rl, CPU) with its imports-only spare. Kills the trainer N times, each time with a spare ready, and
prints the `spare_took_over` events' `ack_seconds` (the spare's spare_go time minus the go's write time, both wall
clocks of this host) and the seconds from the kill to the new pid. The real Isaac Lab 3.0's booted spare:
tests/test_isaaclab3_frozen_spare.py prints its ack; on the H200 bench/isaaclab3_recovery.py records
`spare_ack_seconds` per kill.

    .venv/bin/python bench/spare_ack.py              # 5 takeovers
    .venv/bin/python bench/spare_ack.py --kills 2
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import SupervisorProc, builtin_job, wait_for, write_config  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--boot-timeout", type=float, default=480.0, help="seconds a spare may take to get ready")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="isaacd-spare-ack-") as tmp:
        tmp_path = Path(tmp)
        cfg = write_config(tmp_path, builtin_job("cp", max_iterations=100000, save_interval=20,
                                                 extra_args=["agent.num_steps_per_env=8"], snapshot_budget=0))
        job = "cp"
        sup = SupervisorProc(cfg).start()
        try:
            acks, pids = [], []
            used: set[int] = set()
            for k in range(a.kills):
                j = wait_for(lambda: (x := sup.job(job))["state"] == "running" and x["spare"].get("state") == "ready"
                             and x["spare"]["pid"] not in used and x, a.boot_timeout, what=f"kill {k}: a ready spare")
                used.add(j["spare"]["pid"])
                before = len([e for e in sup.events(job) if e["event"] == "spare_took_over"])
                os.kill(j["pid"], signal.SIGKILL)
                t = time.time()
                wait_for(lambda: sup.job(job)["pid"] not in (None, j["pid"]), 60, interval=0.01, what="a new pid")
                pids.append(time.time() - t)
                took = wait_for(lambda: (x := [e for e in sup.events(job) if e["event"] == "spare_took_over"])[before:]
                                and x[-1], 60, interval=0.05, what=f"kill {k}: the ack")
                acks.append(took["ack_seconds"])
                print(f"kill {k}: {took['mode']} spare, ack {took['ack_seconds'] * 1000:.2f} ms, kill -> new pid "
                      f"{pids[-1]:.2f} s", flush=True)
        finally:
            sup.stop()
    print(f"spare ack of the go over {len(acks)} takeovers: median {statistics.median(acks) * 1000:.2f} ms, "
          f"max {max(acks) * 1000:.2f} ms (spare_ack_timeout default 2 s); kill -> new pid median "
          f"{statistics.median(pids):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
