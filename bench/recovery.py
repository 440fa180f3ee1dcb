#!/usr/bin/env python3
"""Crash-recovery benchmark: kill -9 the built-in trainer at random moments, measure the way back.

Prints, over N kills of one supervised run (real `isaacd run`, real rsl_rl trainer on CPU):
  recovery time   kill -> first new training iteration logged (TensorBoard) by the resumed trainer,
                  split into detection+restart (kill -> new trainer pid) and trainer start-up
  lost iterations iteration at kill - iteration resumed from
and the supervisor's own CPU time and peak RSS for the whole run.

    .venv/bin/python bench/recovery.py            # 8 kills
    .venv/bin/python bench/recovery.py --quick    # 3 kills (CI-sized)
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import SupervisorProc, builtin_job, wait_for, write_config  # noqa: E402

from isaacd.signals.tensorboard import TensorBoardTail  # noqa: E402


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="3 kills")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--save-interval", type=int, default=5)
    args = ap.parse_args()
    kills = 3 if args.quick else args.kills
    rng = random.Random(args.seed)

    with tempfile.TemporaryDirectory(prefix="isaacd-bench-") as tmp:
        cfg = write_config(Path(tmp), builtin_job("bench", max_iterations=100000, save_interval=args.save_interval,
                                                  extra_args=["agent.num_steps_per_env=8"]))
        sp = SupervisorProc(cfg).start()
        t_start = time.time()
        try:
            rows = []
            for n in range(kills):
                j = wait_for(lambda: (x := sp.job("bench"))["state"] == "running" and x["iteration"] is not None
                             and x["checkpoint"] is not None and x, 180, what="running")
                time.sleep(rng.uniform(0.5, 4.0))  # a random moment inside the run
                j = sp.job("bench")
                old_pid, old_run = j["pid"], j["run_dir"]
                os.kill(old_pid, signal.SIGKILL)
                t_kill = time.time()
                tail = TensorBoardTail(Path(old_run))  # the last iteration the killed trainer logged
                tail.poll()
                it_at_kill = tail.progress.last_step
                j2 = wait_for(lambda: (x := sp.job("bench"))["pid"] not in (None, old_pid) and x, 300, interval=0.01,
                              what="restart")
                t_restart = time.time()
                wait_for(lambda: (x := sp.job("bench"))["run_dir"] not in (None, old_run) and
                         x["state"] == "running", 180, interval=0.02, what="first new iteration")
                t_iter = time.time()
                started = [e for e in sp.events("bench") if e["event"] == "started"][-1]
                resumed = started["resume_from"]["iteration"] if started["resume_from"] else -1
                # iterations done after the checkpoint and redone by the resumed run
                rows.append({"restart": t_restart - t_kill, "startup": t_iter - t_restart,
                             "recovery": t_iter - t_kill, "lost": it_at_kill - resumed})
                print(f"kill {n + 1}/{kills}: at iteration {it_at_kill}, resumed from {resumed}, "
                      f"new pid after {rows[-1]['restart']:.3f} s, training after {rows[-1]['recovery']:.2f} s",
                      flush=True)
            cpu = proc_cpu_seconds(sp.proc.pid)
            wall = time.time() - t_start
            # steady state: a healthy run, nobody polling the control socket
            c0, w0 = proc_cpu_seconds(sp.proc.pid), time.time()
            time.sleep(10 if args.quick else 30)
            idle_cpu = (proc_cpu_seconds(sp.proc.pid) - c0) / (time.time() - w0)
            rss = proc_peak_rss_mib(sp.proc.pid)
        finally:
            sp.stop()

    def line(name: str, key: str, unit: str, fmt: str = "{:.3f}") -> str:
        vals = [r[key] for r in rows]
        return (f"{name:<34} median {fmt.format(statistics.median(vals))} {unit:<4} "
                f"max {fmt.format(max(vals))} {unit}")

    print()
    print(f"isaacd crash recovery, {kills} x kill -9 of the built-in trainer (CPU, 64 envs, "
          f"save_interval {args.save_interval})")
    print(line("kill -> new trainer started", "restart", "s"))
    print(line("trainer start-up -> first iteration", "startup", "s", "{:.2f}"))
    print(line("recovery (kill -> first iteration)", "recovery", "s", "{:.2f}"))
    print(line("lost iterations", "lost", "it", "{:.0f}"))
    print(f"{'supervisor CPU, whole benchmark':<34} {cpu:.2f} s over {wall:.0f} s wall "
          f"({100 * cpu / max(wall, 1e-9):.2f} % of a core, incl. answering the benchmark's status polls)")
    print(f"{'supervisor CPU, steady state':<34} {100 * idle_cpu:.2f} % of a core (tick 0.1 s, one job training)")
    print(f"{'supervisor peak RSS':<34} {rss:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
