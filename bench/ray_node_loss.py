#!/usr/bin/env python3
"""runtime = "ray" (issue 12): node lost -> training again on another node, and supervisor cost with 32 jobs.

    .venv/bin/python bench/ray_node_loss.py                 # 3 node losses, then 32 jobs
    .venv/bin/python bench/ray_node_loss.py --runs 5 --jobs 32 --window 20

Starts a local three-node Ray cluster like tests/test_ray_runtime.py (`ray start`: a head without GPUs and two
workers with one logical GPU each, the GCS health check at 0.5 s x 3 like the test), and a real `isaacd run`.

1. Node loss, --runs times: a builtin job (rsl_rl PPO, CPU) trains on worker A; its raylet is SIGKILLed by pid;
   timed from the kill to: the supervisor records the exit as node_lost ("detected"), the next attempt's
   trainer has a pid on worker B ("trainer started"), and a new TensorBoard iteration on B ("training").
   Then worker A is started again (`ray start`) and uncordoned (`isaacd uncordon`), and the next run kills B.
2. Tick cost: --jobs jobs whose trainer is `sleep` (via sh -c, which ignores the trainer flags) (no GPU, 0.05 CPU each) all placed on the cluster; the
   supervisor's CPU over --window s: the whole process (utime+stime; includes the Ray worker thread and Ray's
   own threads in the process) and its main (tick) thread (schedstat), per tick (tick_interval 0.2 s).
   Same figures for the same jobs on the process runtime, for comparison.
Prints figures; asserts nothing. Figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers import SupervisorProc, builtin_job, wait_for, write_config  # noqa: E402
from test_ray_runtime import Cluster, raylet_pid  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / CLK


def main_thread_s(pid: int) -> float:
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e9


def node_loss(cluster: Cluster, work: Path, runs: int) -> list[dict[str, float]]:
    work.mkdir(parents=True, exist_ok=True)
    cfg = write_config(work, builtin_job("cp", runtime="ray", num_envs=32, max_iterations=100000, save_interval=5,
                                         stop_timeout=5.0, ray={"num_gpus": 1, "num_cpus": 1}),
                       extra=f'\n[ray]\naddress = "{cluster.address}"\n')
    sup = SupervisorProc(cfg).start()
    out = []
    try:
        for i in range(runs):
            job = wait_for(lambda: (j := sup.job("cp"))["state"] == "running" and j["node"]
                           and (j["checkpoint"] or {}).get("iteration") is not None and j, 120, what="training")
            node, restarts = job["node"], job["restarts"]
            other = "w2" if node == "w1" else "w1"
            t0 = time.monotonic()
            os.kill(raylet_pid(cluster.dirs[node]), signal.SIGKILL)
            marks: dict[str, float] = {}
            while "training" not in marks and time.monotonic() - t0 < 120:
                j = sup.job("cp")
                now = time.monotonic() - t0
                if j["restarts"] > restarts:
                    marks.setdefault("detected", now)
                if j["restarts"] > restarts and j["node"] == other and j["pid"]:
                    marks.setdefault("trainer started", now)
                if j["restarts"] > restarts and j["state"] == "running" and j["node"] == other:
                    marks.setdefault("training", now)
                time.sleep(0.05)
            out.append(marks)
            print(f"  run {i + 1}: {node} lost -> " + ", ".join(f"{k} {v:.2f} s" for k, v in marks.items()),
                  flush=True)
            # bring the node back for the next run, under a fresh temp dir
            cluster.dirs[node] = cluster.root / f"{node}-{i + 1}"
            p = cluster._ray_start(node, "--address", cluster.address, "--num-cpus", "2", "--num-gpus", "1")
            p.wait(120)
            sup.cli("uncordon", node)
    finally:
        sup.stop()
    return out


def tick_cost(cluster: Cluster, work: Path, n: int, window: float, runtime: str) -> dict[str, float]:
    jobs = "".join(textwrap.dedent(f"""
        [[jobs]]
        name = "s{i}"
        runtime = "{runtime}"
        command = ["sh", "-c", "exec sleep 3600", "sleep"]  # the flags isaacd appends are ignored
        stop_timeout = 2.0
        [jobs.ray]
        num_gpus = 0
        num_cpus = 0.05
        """) for i in range(n))
    cfg = write_config(work, jobs, extra=f'\n[ray]\naddress = "{cluster.address}"\n')
    sup = SupervisorProc(cfg).start()
    try:
        wait_for(lambda: all(j["pid"] for j in sup.status()["jobs"]), 300, interval=0.5, what="every job started")
        time.sleep(3)
        pid = sup.proc.pid
        c0, m0, t0 = cpu_s(pid), main_thread_s(pid), time.monotonic()
        time.sleep(window)
        c1, m1, t1 = cpu_s(pid), main_thread_s(pid), time.monotonic()
        ticks = (t1 - t0) / 0.1  # helpers.write_config: tick_interval = 0.1
        nodes = {}
        for j in sup.status()["jobs"]:
            nodes[j.get("node") or "-"] = nodes.get(j.get("node") or "-", 0) + 1
        return {"process_cpu_pct": 100 * (c1 - c0) / (t1 - t0), "tick_thread_ms_per_tick": 1000 * (m1 - m0) / ticks,
                "process_ms_per_tick": 1000 * (c1 - c0) / ticks, "nodes": nodes}
    finally:
        for j in sup.status()["jobs"]:
            sup.cli("stop", j["name"], check=False)
        sup.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=32)
    ap.add_argument("--window", type=float, default=20.0)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="isaacd-rb-", dir="/tmp"))
    cluster = Cluster(root)
    t = time.monotonic()
    cluster.start()
    print(f"cluster of 3 nodes up in {time.monotonic() - t:.1f} s ({os.cpu_count()} CPUs)", flush=True)
    try:
        if args.runs:
            print(f"node lost -> training on the other worker, {args.runs} runs:", flush=True)
            marks = node_loss(cluster, root / "loss", args.runs)
            for k in ("detected", "trainer started", "training"):
                vals = [m[k] for m in marks if k in m]
                if vals:
                    print(f"  {k:16s} median {statistics.median(vals):.2f} s  (min {min(vals):.2f}, max {max(vals):.2f},"
                          f" n={len(vals)})")
        if args.jobs:
            for runtime in ("ray", "process"):
                d = root / f"tick-{runtime}"
                d.mkdir()
                r = tick_cost(cluster, d, args.jobs, args.window, runtime)
                print(f"{args.jobs} sleeping jobs, runtime = {runtime}: supervisor {r['process_cpu_pct']:.1f} % CPU, "
                      f"{r['process_ms_per_tick']:.2f} ms CPU per tick (all threads), tick thread "
                      f"{r['tick_thread_ms_per_tick']:.2f} ms per tick; placed {json.dumps(r['nodes'])}", flush=True)
    finally:
        cluster.stop()
        subprocess.run(["rm", "-rf", str(root)], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
