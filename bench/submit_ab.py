#!/usr/bin/env python3
"""Issue 39, the commands that change jobs, measured in pairs: two supervisors at once, each with N job files (4
running, the rest queued, as bench/job_scale.py sets up), a baseline (--against DIR) and this checkout, and each
command run on one then the other, alternating, so both are measured under the same load at the same moment (on a
shared machine one arm after the other, as job_scale.py runs them, swings by 2x with the others' load).

    nice -n 10 .venv/bin/python bench/submit_ab.py --against DIR --jobs 1000 --repeats 7 --sweeps 2

Per arm, median / max ms: `isaacd submit` of one more queued job, `isaacd sweep submit` of a --trials sweep (ASHA,
concurrency 2; each a sweep of its own name), `isaacd sweep status NAME --json`; and the ratio of the medians (after /
before). DIR holds an `isaacd` link to the baseline's daemon/ (run through this venv, PYTHONPATH=DIR). Only the
standard library (nothing here imports isaacd)."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _supervised import Checkout, HostSupervisor, ask, wait_until  # noqa: E402
from job_scale import RUNNING, host_config, job_text, ms, sweep_text, timed  # noqa: E402


class Arm:
    def __init__(self, name: str, co: Checkout, n: int, pythonpath: str | None, tick: float):
        self.name = name
        self.d = Path(tempfile.mkdtemp(prefix=f"isaacd-bench-ab-{name}-"))
        self.cfg = host_config(self.d, tick)
        self.logs = self.d / "logs"
        jobs_d = self.d / "jobs.d"
        jobs_d.mkdir(mode=0o700)
        for i in range(n):
            (jobs_d / f"j{i:04d}.toml").write_text(job_text(f"j{i:04d}", self.logs))
        extra = {"PYTHONPATH": pythonpath} if pythonpath else {}
        self.env = {**os.environ, **extra}  # the after arm: this environment's (this checkout, or its PYTHONPATH)
        self.sup = HostSupervisor(co, self.cfg, extra)
        self.cli = [str(co.isaacd), "--config", str(self.cfg)]
        self.sock = self.d / "isaacd.sock"
        self.times: dict[str, list[float]] = {}

    def settled(self, n: int) -> bool:
        try:
            jobs = ask(self.sock, {"cmd": "status"}, timeout=60)["jobs"]
        except (OSError, RuntimeError, ValueError):
            return False
        live = sum(1 for j in jobs if j["state"] in ("starting", "running") and j.get("pid"))
        return len(jobs) == n and live == min(n, RUNNING)

    def run(self, what: str, args: list[str]) -> None:
        dt, _ = timed(self.cli + args, self.env)
        self.times.setdefault(what, []).append(dt)

    def stop(self, keep: bool) -> None:
        self.sup.stop()
        if not keep:
            shutil.rmtree(self.d, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", metavar="DIR", required=True, help="holds an `isaacd` link to the baseline's daemon/")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=7, help="submits (and sweep statuses) per arm")
    ap.add_argument("--sweeps", type=int, default=2, help="sweep submits per arm (each adds --trials jobs)")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--tick", type=float, default=0.2)
    ap.add_argument("--settle", type=float, default=0.0, help="seconds between a submit and the sweep status after it")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    co = Checkout(None)
    pp = os.environ.get("PYTHONPATH", "")
    print(f"checkout: {co.describe()} (PYTHONPATH={pp!r}); baseline: PYTHONPATH={a.against}; N = {a.jobs}, "
          f"{a.repeats} submits and {a.sweeps} sweep submits of {a.trials} trials per arm, alternating; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start", flush=True)
    arms = [Arm("before", co, a.jobs, a.against, a.tick), Arm("after", co, a.jobs, None, a.tick)]
    try:
        for arm in arms:
            wait_until(lambda: arm.settled(a.jobs), 300 + a.jobs / 2, f"{arm.name}: {RUNNING} running, the rest queued",
                       interval=1.0)
        for s in range(a.sweeps):
            for arm in arms if s % 2 == 0 else arms[::-1]:
                f = arm.d / f"sweep{s}.toml"
                f.write_text(sweep_text(f"s{s}", a.trials, arm.logs))
                arm.run("sweep submit", ["sweep", "submit", str(f)])
        total = a.jobs + a.sweeps * a.trials
        for arm in arms:
            wait_until(lambda: len(ask(arm.sock, {"cmd": "status"}, timeout=60)["jobs"]) == total, 300,
                       f"{arm.name}: the sweeps' trials to be jobs")
        time.sleep(5)
        for r in range(a.repeats):
            for arm in arms if r % 2 == 0 else arms[::-1]:
                f = arm.d / f"extra{r}.toml"
                f.write_text(job_text(f"extra{r}", arm.logs))
                arm.run("submit", ["submit", str(f)])
                time.sleep(a.settle)
                arm.run("sweep status", ["sweep", "status", "s0", "--json"])
        print(f"{'arm':<7} {'jobs':>5}  {'sweep submit':>14}  {'submit':>14}  {'sweep status':>14}")
        for arm in arms:
            print(f"{arm.name:<7} {total:>5}  " + "  ".join(f"{ms(arm.times[k]):>14}"
                                                           for k in ("sweep submit", "submit", "sweep status")))
        print("after / before, medians: " + ", ".join(
            f"{k} {statistics.median(arms[1].times[k]) / statistics.median(arms[0].times[k]):.2f}"
            for k in ("sweep submit", "submit", "sweep status")))
        print(f"load average {os.getloadavg()[0]:.2f} at the end")
    finally:
        for arm in arms:
            arm.stop(a.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
