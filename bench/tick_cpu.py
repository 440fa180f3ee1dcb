#!/usr/bin/env python3
"""Supervisor CPU per tick with 0 (baseline), 1, 8 and 64 jobs (issue 10): prints ms per tick and per job.

    python3 bench/tick_cpu.py                          # this checkout
    python3 bench/tick_cpu.py --repo /work/main        # another checkout (its .venv is used)
    python3 bench/tick_cpu.py --jobs 0,1,8,64,128 --window 60

For each size a real `isaacd run` supervises N jobs on the process runtime whose trainer is a stand-in,
bench/_standin_trainer.py (stdlib Python, ~no CPU of its own): it gets the builtin workflow's flags,
creates the run dir isaacd looks for and appends one rsl_rl-like iteration of scalars to a TensorBoard
event file every --period seconds, so every job is `running`, makes progress, and every per-tick path
of the supervisor (runtime poll, TensorBoard tail, watchdogs on new points, checkpoint scans, status for
the sd_notify summary) does its real work. No checkpoints are written; no GPU (`[gpu] source = "none"`);
/metrics is on but nobody scrapes it; no client polls the control socket.

Once every job has reported an iteration, the bench waits --warmup seconds, then reads the supervisor's
CPU over --window seconds:
  process  utime+stime of /proc/<pid>/stat (every thread: tick, control socket, metrics, GPU sampler),
           clock-tick resolution (1/SC_CLK_TCK s), over the whole window
  tick thr the main thread (the one that ticks) from /proc/<pid>/task/<pid>/schedstat (ns), per slice of
           --slice seconds, for the median and p90 across slices
CPU per tick = CPU / ticks, ticks = window / tick_interval (the config's, default 0.2 s). The loop waits
tick_interval *between* ticks, so when a tick takes a sizeable part of the interval there are fewer
ticks than that and the figure is a lower bound; "busy" (the tick thread's share of one core) says how
far off it can be: the corrected count is window * (1 - busy) / tick_interval (exact for a CPU-bound
tick), shown as "corr.". Per job = (per tick with N jobs - per tick with 0 jobs) / N.
Figures depend on the machine and its load: compare runs made on the same machine.
Only the standard library: run it with any python3.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _supervised import CLK_TCK, Checkout, HostSupervisor, ask, cpu_ticks, free_port, pct, wait_until  # noqa: E402

STANDIN = Path(__file__).resolve().parent / "_standin_trainer.py"


def config(d: Path, n: int, port: int, tick: float, period: float) -> str:
    head = "jobs = []\n" if n == 0 else ""
    jobs = "".join(f"""
[[jobs]]
name = "j{i:03d}"
runtime = "process"
command = {json.dumps([sys.executable, str(STANDIN)])}
log_root = "{d}/logs/j{i:03d}"
stop_timeout = 5
max_iterations = 1000000
environment = {{ STANDIN_PERIOD = "{period}" }}
""" for i in range(n))
    return head + f"""
[supervisor]
state_dir = "{d}/state"
control_socket = "{d}/isaacd.sock"
log_format = "json"
tick_interval = {tick}

[metrics]
enabled = true
listen = "127.0.0.1:{port}"

[gpu]
source = "none"
""" + jobs


def sched_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0])


def one_size(co: Checkout, n: int, args: argparse.Namespace) -> dict[str, Any]:
    d = Path(tempfile.mkdtemp(prefix=f"isaacd-bench-tick-{n}-"))
    cfg = d / "isaacd.toml"
    cfg.write_text(config(d, n, free_port(), args.tick, args.period))
    sock = d / "isaacd.sock"
    sup = HostSupervisor(co, cfg)
    try:
        wait_until(lambda: ask(sock, {"cmd": "status"}, timeout=5), 60, "the control socket")
        t0 = time.monotonic()

        def all_alive() -> bool:
            jobs = ask(sock, {"cmd": "status"})["jobs"]
            bad = [j for j in jobs if j["state"] in ("failed", "stopped", "completed")]
            if bad:
                raise SystemExit(f"{bad[0]['name']} is {bad[0]['state']}: {bad[0]['state_reason']} (see {d})")
            return len(jobs) == n and all(j["state"] == "running" and j["iteration"] is not None for j in jobs)

        wait_until(all_alive, 60 + 2 * n, f"{n} jobs to report an iteration", interval=0.5)
        up = time.monotonic() - t0
        time.sleep(args.warmup)
        pid = sup.pid
        slices: list[tuple[float, int]] = []  # (seconds, main-thread ns)
        c0, w0 = cpu_ticks(pid), time.monotonic()
        s_prev, t_prev = sched_ns(pid), w0
        while time.monotonic() - w0 < args.window:
            time.sleep(max(0.0, min(args.slice, args.window - (time.monotonic() - w0))))
            s, t = sched_ns(pid), time.monotonic()
            slices.append((t - t_prev, s - s_prev))
            s_prev, t_prev = s, t
        c1, w1 = cpu_ticks(pid), time.monotonic()
        jobs = ask(sock, {"cmd": "status"})["jobs"]
    finally:
        sup.stop()
    window = w1 - w0
    proc_ms = (c1 - c0) / CLK_TCK * 1000
    main_ms = sum(ns for _, ns in slices) / 1e6
    busy = main_ms / 1000 / window
    ticks = window / args.tick
    per_slice = [ns / 1e6 / (sec / args.tick) for sec, ns in slices]
    alive = sum(1 for j in jobs if j["state"] == "running")
    restarts = sum(j["restarts"] for j in jobs)
    trips = sum(t["count"] for j in jobs for t in j.get("watchdog_trips", []))
    shutil.rmtree(d, ignore_errors=True)
    return {"n": n, "window": window, "up": up, "proc_tick": proc_ms / ticks, "main_tick": main_ms / ticks,
            "main_tick_corr": main_ms / (ticks * (1 - busy)) if busy < 1 else float("nan"),
            "median": statistics.median(per_slice), "p90": pct(per_slice, 90), "busy": busy,
            "proc_busy": proc_ms / 1000 / window, "alive": alive, "restarts": restarts, "trips": trips}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", help="the checkout to run (its .venv/bin/isaacd); default: this script's checkout")
    ap.add_argument("--jobs", default="0,1,8,64", help="job counts; 0 is the baseline for per-job figures")
    ap.add_argument("--window", type=float, default=20.0, help="measured seconds per size")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds after every job is alive, unmeasured")
    ap.add_argument("--slice", type=float, default=2.0, help="seconds per slice for median/p90")
    ap.add_argument("--tick", type=float, default=0.2, help="[supervisor] tick_interval (0.2 is the default)")
    ap.add_argument("--period", type=float, default=0.5, help="stand-in trainer: seconds per iteration")
    args = ap.parse_args()

    co = Checkout(args.repo)
    print(f"checkout: {co.describe()}")
    print(f"process runtime, stand-in trainer (bench/_standin_trainer.py, one iteration of 10 scalars every "
          f"{args.period:g} s), tick_interval {args.tick:g} s, {args.window:g} s window; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at start")
    rows = []
    for n in [int(x) for x in args.jobs.split(",")]:
        r = one_size(co, n, args)
        rows.append(r)
        print(f"  {n:>3} jobs: all alive after {r['up']:.1f} s; measured {r['window']:.1f} s", flush=True)
    base = next((r for r in rows if r["n"] == 0), None)
    print(f"\n{'jobs':>4}  {'process ms/tick':>15}  {'tick thr ms/tick':>16}  {'median':>7}  {'p90':>7}  "
          f"{'corr.':>7}  {'busy':>6}  {'proc %core':>10}  {'per job ms/tick':>15}  alive restarts trips")
    for r in rows:
        per_job = ""
        if base is not None and r["n"] > 0:
            per_job = f"{(r['main_tick'] - base['main_tick']) / r['n']:.3f}"
        print(f"{r['n']:>4}  {r['proc_tick']:>15.2f}  {r['main_tick']:>16.2f}  {r['median']:>7.2f}  {r['p90']:>7.2f}  "
              f"{r['main_tick_corr']:>7.2f}  {r['busy'] * 100:>5.1f}%  {r['proc_busy'] * 100:>9.1f}%  {per_job:>15}  "
              f"{r['alive']:>5} {r['restarts']:>8} {r['trips']:>5}")
    if base is not None:
        for r in rows:
            if r["n"] > 0 and base["main_tick"] > 0:
                print(f"  {r['n']} jobs: tick thread x{r['main_tick'] / base['main_tick']:.1f} of 0 jobs")
    print("per job = (tick thread ms/tick with N jobs - with 0 jobs) / N")
    return 0


if __name__ == "__main__":
    sys.exit(main())
