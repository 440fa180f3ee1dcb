#!/usr/bin/env python3
"""Issue 41: does a process that leaves a GPU stall another process's work on that GPU, and does os._exit spare it?

Issue 41's H100 run (bench/results/issue41-eval-beside-gpu.txt, session 22) saw each evaluation of the real Isaac Lab
3.0 cost the training beside it ~0.3 s: its 3 iterations 0.6-1.2 s before eval_done took 0.25 s instead of 0.143 s,
while the evaluation tore down (close_env, then the frees of its CUDA memory at interpreter exit). trainer/shim_eval.py
now ends an evaluation with os._exit once its result is written. This bench isolates the mechanism with torch alone
(no Isaac Lab, no wheels: the device image's own torch), so it needs only one short `run` call:

* a "trainer" process steps a fixed GPU workload (matmuls, synchronised) and records every step's time;
* an "evaluation" process, started again and again beside it, allocates GPU memory through torch's caching allocator
  (many tensors, like an environment's buffers and a policy), runs kernels for a while, then leaves either the
  orderly way (the interpreter's exit: the allocator's frees, the context's destruction) or with os._exit (the
  driver reclaims the context at once), the two alternated;
* per exit: the trainer's time lost in the steps around it (step time above its median, from the evaluation's last
  kernel to 0.5 s after its exit), by how the evaluation left.

    python3 bench/eval_exit_stall.py --rounds 6          # on the device: `run` with no carry (~60-90 s)
    python3 bench/eval_exit_stall.py --device cpu --rounds 1 --alloc-mb 64   # a smoke test of the script here

Prints medians per way of leaving; --out writes the JSON. Nothing is asserted: figures only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TRAINER = r"""
import sys, time, json, torch
dev, seconds, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
a = torch.randn(n, n, device=dev); b = torch.randn(n, n, device=dev)
sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
out, end = [], time.time() + seconds
while time.time() < end:
    t0 = time.time()
    for _ in range(4):
        c = a @ b
    sync()
    out.append((t0, time.time() - t0))
print(json.dumps(out))
"""

EVALUATION = r"""
import os, sys, time, torch
dev, mb, busy, way = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
keep = [torch.empty(mb * 1024 * 1024 // 400 // 4, device=dev) for _ in range(400)]  # 400 buffers
x = torch.randn(1024, 1024, device=dev)
end = time.time() + busy
while time.time() < end:
    y = x @ x
    sync()
print(f"last_kernel {time.time()}", flush=True)
if way == "os_exit":
    os._exit(0)
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--rounds", type=int, default=6, help="evaluations of each way of leaving (alternated)")
    p.add_argument("--alloc-mb", type=int, default=800, help="GPU memory each evaluation holds (MB)")
    p.add_argument("--busy", type=float, default=2.0, help="seconds each evaluation runs kernels")
    p.add_argument("--gap", type=float, default=1.5, help="seconds between evaluations")
    p.add_argument("--n", type=int, default=2048, help="the trainer's matmul size")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    py = sys.executable
    plan = ["orderly", "os_exit"] * a.rounds
    seconds = 6 + len(plan) * (a.busy + a.gap + 6)  # the trainer outlives the evaluations (an import ~2-4 s each)
    trainer = subprocess.Popen([py, "-c", TRAINER, a.device, str(seconds), str(a.n)], stdout=subprocess.PIPE,
                               text=True)
    time.sleep(5)
    exits = []
    for way in plan:
        t_start = time.time()
        r = subprocess.run([py, "-c", EVALUATION, a.device, str(a.alloc_mb), str(a.busy), way], capture_output=True,
                           text=True)
        t_exit = time.time()
        last = [float(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("last_kernel")]
        exits.append({"way": way, "start": t_start, "last_kernel": last[0] if last else None, "exit": t_exit,
                      "rc": r.returncode, "err": r.stderr[-300:]})
        print(f"{way:8} rc {r.returncode}  last kernel -> exit {t_exit - last[0] if last else float('nan'):.3f} s",
              flush=True)
        time.sleep(a.gap)
    steps = json.loads(trainer.communicate()[0])
    base = statistics.median(d for _, d in steps)
    for e in exits:
        lo = e["last_kernel"] or e["exit"] - 1.0
        around = [d for t, d in steps if lo <= t + d and t <= e["exit"] + 0.5]
        e["lost"] = round(sum(max(0.0, d - base) for d in around), 4)
        e["worst_step"] = round(max(around), 4) if around else None
    print(f"\ntrainer: {len(steps)} steps, median {base * 1000:.1f} ms; per evaluation's exit, the trainer's time lost "
          "(steps above the median, from the evaluation's last kernel to 0.5 s after its exit):")
    for way in ("orderly", "os_exit"):
        xs = [e for e in exits if e["way"] == way]
        print(f"  {way:8} lost median {statistics.median(e['lost'] for e in xs) * 1000:7.1f} ms "
              f"(each: {[round(e['lost'] * 1000) for e in xs]}); worst step median "
              f"{statistics.median(e['worst_step'] or 0 for e in xs) * 1000:.1f} ms; last kernel -> exit median "
              f"{statistics.median(e['exit'] - (e['last_kernel'] or e['exit']) for e in xs):.3f} s")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"args": vars(a), "base": base, "exits": exits, "steps": steps}, f)


if __name__ == "__main__":
    main()
