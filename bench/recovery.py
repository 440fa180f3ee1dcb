#!/usr/bin/env python3
"""Crash-recovery benchmark: kill -9 the built-in trainer at random moments, measure the way back.

Runs the same supervised job (real `isaacd run`, real rsl_rl trainer on CPU) in several recovery setups, side
by side in one run, and prints per setup, over N kills:
  recovery time   kill -> first new training iteration logged (TensorBoard) by the resumed trainer,
                  split into detection+restart (kill -> new trainer pid) and trainer start-up
  lost iterations iteration at kill - iteration resumed from (rsl_rl then also re-runs the resumed one)
  throughput      iterations/s over a quiet window before the first kill
Setups (issue 11): cold start + checkpoints only (save_interval) | cold + per-iteration snapshots |
warm spare + snapshots. Also the supervisor's CPU and peak RSS, and the spare's start-up and memory.

    .venv/bin/python bench/recovery.py            # 5 kills per setup
    .venv/bin/python bench/recovery.py --quick    # 2 kills per setup (CI-sized)
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

from isaacd.observations.tensorboard import TensorBoardTail  # noqa: E402


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


SETUPS = {
    "cold+checkpoint": {"spare": False, "snapshot_every": 0},
    "cold+snapshot": {"spare": False, "snapshot_every": 1},
    "warm+snapshot": {"spare": True, "snapshot_every": 1},
}


def run_setup(name: str, over: dict, kills: int, rng: random.Random, save_interval: int, num_envs: int,
              device: str, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="isaacd-bench-") as tmp:
        # the divergence watchdog off: on the toy the value loss can spike right after a resume, and its restart
        # would take the spare and blur what this measures (crash recovery, not watchdogs: bench/watchdogs.py)
        cfg = write_config(Path(tmp), builtin_job("bench", max_iterations=100000, save_interval=save_interval,
                                                  num_envs=num_envs, device=device,
                                                  extra_args=[f"agent.num_steps_per_env={steps}"], **over)
                           + "\n[jobs.watchdogs.divergence]\nenabled = false\n")
        sp = SupervisorProc(cfg).start()
        t_start = time.time()
        out: dict = {"rows": [], "spare": None}
        try:
            j = wait_for(lambda: (x := sp.job("bench"))["state"] == "running" and x["iteration"] is not None
                         and x, 300, what="running")
            if over.get("spare"):
                sj = wait_for(lambda: (x := sp.job("bench"))["spare"].get("state") == "ready" and x, 300,
                              what="spare ready")
                out["spare"] = dict(sj["spare"])
            it0, t0 = sp.job("bench")["iteration"], time.time()
            time.sleep(10)
            it1, t1 = sp.job("bench")["iteration"], time.time()
            out["throughput"] = (it1 - it0) / (t1 - t0)
            for n in range(kills):
                wait_for(lambda: (x := sp.job("bench"))["state"] == "running" and x["iteration"] is not None
                         and x["checkpoint"] is not None and (not over.get("spare") or
                                                              x["spare"].get("state") == "ready") and x,
                         300, what="running (and the spare ready)")
                time.sleep(rng.uniform(0.5, 4.0))  # a random moment inside the run
                j = wait_for(lambda: (x := sp.job("bench"))["state"] == "running" and x["run_dir"] and x, 300,
                             what="running with its run dir")
                old_pid, old_run = j["pid"], j["run_dir"]
                os.kill(old_pid, signal.SIGKILL)
                t_kill = time.time()
                tail = TensorBoardTail(Path(old_run))  # the last iteration the killed trainer logged
                tail.poll()
                it_at_kill = tail.progress.last_step
                wait_for(lambda: (x := sp.job("bench"))["pid"] not in (None, old_pid) and x, 300, interval=0.01,
                         what="restart")
                t_restart = time.time()
                wait_for(lambda: (x := sp.job("bench"))["run_dir"] not in (None, old_run) and
                         x["state"] == "running", 300, interval=0.02, what="first new iteration")
                t_iter = time.time()
                started = [e for e in sp.events("bench") if e["event"] == "started"][-1]
                resumed = started["resume_from"]["iteration"] if started["resume_from"] else -1
                out["rows"].append({"restart": t_restart - t_kill, "startup": t_iter - t_restart,
                                    "recovery": t_iter - t_kill, "lost": it_at_kill - resumed,
                                    "warm": bool(started.get("warm_spare"))})
                r = out["rows"][-1]
                print(f"{name}: kill {n + 1}/{kills}: at iteration {it_at_kill}, resumed from {resumed}"
                      f"{' (warm spare)' if r['warm'] else ''}, new pid after {r['restart']:.3f} s, "
                      f"training after {r['recovery']:.2f} s", flush=True)
            out["cpu"] = proc_cpu_seconds(sp.proc.pid)
            out["wall"] = time.time() - t_start
            out["rss"] = proc_peak_rss_mib(sp.proc.pid)
        finally:
            sp.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 kills per setup")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--save-interval", type=int, default=20)
    ap.add_argument("--num-envs", type=int, default=64)
    ap.add_argument("--device", default="cpu", help="e.g. cuda:0 on a GPU host")
    ap.add_argument("--steps", type=int, default=8, help="agent.num_steps_per_env (rsl_rl's default is 24)")
    ap.add_argument("--setups", default=",".join(SETUPS), help="comma-separated, of: " + ", ".join(SETUPS))
    args = ap.parse_args()
    kills = 2 if args.quick else args.kills
    results = {}
    for name in args.setups.split(","):
        results[name] = run_setup(name, SETUPS[name], kills, random.Random(args.seed), args.save_interval,
                                  args.num_envs, args.device, args.steps)

    def med(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    print()
    print(f"isaacd crash recovery, {kills} x kill -9 per setup of the built-in trainer ({args.device}, "
          f"{args.num_envs} envs, save_interval {args.save_interval}, {args.steps} steps per env); medians (max)")
    print(f"{'setup':<18} {'kill->new pid':>14} {'start-up':>10} {'kill->training':>15} {'lost it':>9} "
          f"{'it/s':>7} {'it/s ratio':>10}")
    base = next(iter(results.values())).get("throughput") or float("nan")
    for name, r in results.items():
        rows = r["rows"]
        print(f"{name:<18} {med(rows, 'restart'):>10.3f} s   {med(rows, 'startup'):>7.2f} s "
              f"{med(rows, 'recovery'):>9.2f} s ({max(x['recovery'] for x in rows):.2f}) "
              f"{med(rows, 'lost'):>5.0f} ({max(x['lost'] for x in rows):.0f}) {r['throughput']:>7.2f} "
              f"{r['throughput'] / base:>9.3f}x")
    for name, r in results.items():
        if r["spare"]:
            sp = r["spare"]
            print(f"{name}: spare preload {sp.get('preload_seconds')} s, RSS "
                  f"{(sp.get('rss_bytes') or 0) / 2**20:.0f} MiB, CUDA memory {sp.get('cuda_memory_bytes')}")
        print(f"{name}: supervisor CPU {r['cpu']:.2f} s over {r['wall']:.0f} s wall, peak RSS {r['rss']:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
