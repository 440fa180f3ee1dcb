#!/usr/bin/env python3
"""Issue 39: how much of ASHA's "GPU-seconds to the target" against every trial to the end is the sampler's order?

A trace-driven replay, NOT a measurement: it takes the 27 learning curves that one measured `none` arm logged on the
GPU (bench/sweep_gpu.py's JSON: each trial's live smoothed objective against its iteration, polled from `isaacd sweep
status`) and replays the same configurations in many random orders through isaacd's own pure ASHA decision
(`isaacd.sweeps.asha.decide`) and through a plain first-in-first-out queue (every trial to the end), on one GPU with
`--concurrency` slots. Time model, from the same measured runs: a trainer boots for `--boot` s (start -> first
iteration), trains at min(`--solo-rate`, `--packed-rate` / the trainers training at once) iterations/s, and frees its
slot `--exit` s after a pause or its end; a promotion boots again and resumes at its rung's iteration. GPU-seconds are
the sweep's own count: every trainer's alive seconds x its gpu_memory share. Each trial's curve is the same in every
order and arm (same configuration, same seed; on the GPU each trial's values matched across the two arms to ~0.01).

It first replays the measured order (trial 1 first) to check the model against the two measured arms, then N orders.

    python3 bench/sweep_order_sim.py NONE.json [--asha-json ASHA.json] [--orders 500]
"""

from __future__ import annotations

import argparse
import bisect
import json
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from isaacd.sweeps.asha import Asha, Continue, Done, Launch, Pause, Promote, TrialState, TrialView, decide

def curves(res: dict) -> dict[int, tuple[list[int], list[float]]]:
    """Each trial's (iterations, live objective) from the none arm's status polls, first value per iteration."""
    out: dict[int, dict[int, float]] = {}
    for row in res["timeline"]:
        for n, v in (row.get("objectives") or {}).items():
            it = (row.get("iterations") or {}).get(n)
            if v is not None and it is not None:
                out.setdefault(int(n), {}).setdefault(int(it), float(v))
    return {n: (sorted(d), [d[k] for k in sorted(d)]) for n, d in out.items()}


def curves_cpu(arm: dict, smooth: int) -> dict[int, tuple[list[int], list[float]]]:
    """The same from one arm of bench/sweep_asha_vs_none.py's JSON: each trial's TensorBoard points, smoothed over the
    last `smooth` logged values as the sweep smooths them."""
    out = {}
    for n, pts in arm["series"].items():
        vals = [v for _, v, _ in sorted(pts)]
        its = [int(s) for s, _, _ in sorted(pts)]
        sm = [sum(vals[max(0, i + 1 - smooth):i + 1]) / min(i + 1, smooth) for i in range(len(vals))]
        out[int(n)] = (its, sm)
    return out


def value_at(curve: tuple[list[int], list[float]], it: float) -> float | None:
    i = bisect.bisect_right(curve[0], it) - 1
    return curve[1][i] if i >= 0 else None


@dataclass
class T:
    number: int  # the position in the order (1 = launched first); its curve is `cfg`'s
    cfg: int
    state: TrialState = TrialState.PENDING
    phase: str = ""  # boot | train | exit | "" (not alive)
    left: float = 0.0  # seconds left in boot/exit
    iters: float = 0.0
    values: list[float] = field(default_factory=list)
    passed: int = 0
    alive: float = 0.0


def run(order: list[int], C: dict, a: argparse.Namespace, kind: str, target: float) -> dict:
    asha = Asha(rungs=tuple(a.rungs), max_iterations=a.max_iterations, eta=a.eta, concurrency=a.concurrency)
    ms = list(a.rungs) + [a.max_iterations]
    ts = [T(i + 1, cfg) for i, cfg in enumerate(order)]
    t = gpu_s = 0.0
    hit = None
    dt = a.dt
    next_fifo = 0
    dirty = True  # asked again only after something it reads changed (a value recorded, a slot freed, an end)
    while True:
        # decisions
        if kind == "asha" and dirty:
            dirty = False
            views = [TrialView(x.number, x.state, int(x.iters) - 1 if x.iters >= 1 else 0, tuple(x.values), x.passed,
                               None) for x in ts]
            ds = decide(asha, views)
            done = False
            for d in ds:
                x = ts[d.trial - 1] if not isinstance(d, Done) else None
                if isinstance(d, Continue):
                    x.passed = d.rung + 1
                elif isinstance(d, Pause):
                    x.state, x.phase, x.left, x.iters = TrialState.PAUSED, "exit", a.exit, float(ms[d.rung])
                elif isinstance(d, Promote):  # resumes at its rung's save, after the freed slot's trainer exits
                    x.state, x.passed, x.phase, x.left = TrialState.RUNNING, d.rung + 1, "wait", a.exit
                elif isinstance(d, Launch):
                    x.state, x.phase, x.left = TrialState.RUNNING, "wait", a.exit if t > 0 else 0.0
                elif isinstance(d, Done):
                    done = True
            if done and not any(x.phase for x in ts):
                break
        elif kind == "asha":
            pass
        else:
            running = sum(x.state is TrialState.RUNNING for x in ts)
            while running < a.concurrency and next_fifo < len(ts):
                x = ts[next_fifo]
                x.state, x.phase, x.left = TrialState.RUNNING, "wait", a.exit if next_fifo >= a.concurrency else 0
                next_fifo += 1
                running += 1
            if next_fifo == len(ts) and not any(x.phase for x in ts):
                break
        # time passes
        training = [x for x in ts if x.phase == "train"]
        rate = min(a.solo_rate, a.packed_rate / len(training)) if training else 0.0
        for x in ts:
            if x.phase in ("boot", "train", "exit"):
                x.alive += dt
                gpu_s += dt * a.share
            if x.phase == "wait":  # the slot's memory still held by the trainer before (its exit)
                x.left -= dt
                if x.left <= 0:
                    x.phase, x.left = "boot", a.boot
            elif x.phase == "boot":
                x.left -= dt
                if x.left <= 0:
                    x.phase = "train"
            elif x.phase == "exit":
                x.left -= dt
                if x.left <= 0:
                    x.phase, dirty = "", True
            elif x.phase == "train":
                x.iters = min(a.max_iterations, x.iters + rate * dt)
                marks = ms if kind == "asha" else [a.max_iterations]  # the values recorded (none: its end only)
                while len(x.values) < len(marks) and x.iters >= marks[len(x.values)]:
                    x.values.append(value_at(C[x.cfg], marks[len(x.values)] - 1))
                    dirty = True
                if x.iters >= a.max_iterations:
                    x.state, x.phase, x.left, dirty = TrialState.COMPLETED, "exit", a.exit, True
        t += dt
        if hit is None:
            live = [value_at(C[x.cfg], x.iters - 1) for x in ts if x.iters >= 1]
            if any(v is not None and v >= target for v in live):
                hit = (gpu_s, t)
        if t > 5000:
            raise RuntimeError("no end")
    # the sweep's final best: the best final value of the trials that trained to the end
    best = max((x.values[-1], -x.number) for x in ts if x.state is TrialState.COMPLETED)
    iters = sum(x.iters for x in ts)
    return {"to_target_gpu_s": hit[0] if hit else None, "to_target_wall": hit[1] if hit else None,
            "gpu_s": gpu_s, "wall": t, "final_best": best[0], "best_cfg": ts[-best[1] - 1].cfg, "iterations": iters}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("none_json", help="bench/sweep_gpu.py's none arm, or with --cpu-seed bench/sweep_asha_vs_none.py's")
    ap.add_argument("--cpu-seed", type=int, default=None, help="the none arm of this sweep seed in a CPU bench JSON")
    ap.add_argument("--smooth", type=int, default=10, help="the CPU bench's smoothing (its --smooth)")
    ap.add_argument("--asha-json")
    ap.add_argument("--orders", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1, help="the orders' random seed")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-iterations", type=int, default=108)
    ap.add_argument("--rungs", default="12,36")
    ap.add_argument("--eta", type=float, default=3)
    ap.add_argument("--boot", type=float, default=15.0, help="start -> first iteration, s (measured median 14-16)")
    ap.add_argument("--exit", type=float, default=1.2, help="pause or end -> the slot's memory free, s (1.1-1.2)")
    ap.add_argument("--packed-rate", type=float, default=13.2, help="it/s of all trainers together (8 packed: 13.1)")
    ap.add_argument("--solo-rate", type=float, default=4.6, help="it/s of one trainer alone (measured max 4.6)")
    ap.add_argument("--share", type=float, default=9 / 79.65, help="gpu_memory / the GPU's total (9 GiB of 79.65)")
    ap.add_argument("--target", type=float, default=0.9, help="the fraction of the best final objective")
    ap.add_argument("--dt", type=float, default=0.1)
    a = ap.parse_args()
    a.rungs = [int(x) for x in a.rungs.split(",") if x]
    N = json.loads(Path(a.none_json).read_text())
    if a.cpu_seed is not None:
        arms = [x for r in N.get("runs", [N]) for x in r["arms"]]  # --from-json's file of several runs, or one
        arm = next(x for x in arms if x["kind"] == "none" and x["seed"] == a.cpu_seed)
        C = curves_cpu(arm, a.smooth)
        a.asha_json = None
        N = {"timeline": []}
    else:
        C = curves(N)
    finals = {n: value_at(c, a.max_iterations - 1) for n, c in C.items()}
    target = a.target * max(v for v in finals.values() if v is not None)
    print(f"curves of {len(C)} trials from {a.none_json}; target {a.target:g} x {max(finals.values()):.3f} = "
          f"{target:.3f}; trials whose curve ever reaches it: "
          f"{sum(any(v >= target for v in c[1]) for c in C.values())}")
    print(f"model: boot {a.boot} s, exit {a.exit} s, {a.packed_rate} it/s packed, {a.solo_rate} solo, share "
          f"{a.share:.4f}, concurrency {a.concurrency}, rungs {a.rungs} of {a.max_iterations}, eta {a.eta:g}")
    measured = sorted(C)
    for kind in ("none", "asha"):
        r = run(measured, C, a, kind, target)
        print(f"replayed measured order, {kind}: to target {r['to_target_gpu_s']:.1f} GPU-s / {r['to_target_wall']:.1f}"
              f" s wall, whole sweep {r['gpu_s']:.1f} GPU-s / {r['wall']:.1f} s, {r['iterations']:.0f} iterations, "
              f"final best {r['final_best']:.3f} (trial {r['best_cfg']})")
    for path, kind in ((a.none_json, "none"), (a.asha_json, "asha")):
        if path and a.cpu_seed is None:
            R = json.loads(Path(path).read_text())
            g = R["figures"]["gpu_seconds"]
            hit = next(((row["gpu_seconds"], row["t"]) for row in R["timeline"]
                        if any(v is not None and v >= target for v in (row.get("objectives") or {}).values())), None)
            print(f"measured, {kind}: to target {hit[0]:.1f} GPU-s / {hit[1]:.1f} s wall, whole sweep "
                  f"{g['sweep_count']:.1f} GPU-s / {g['sweep_wall_seconds']:.1f} s, {g['iterations_trained']} "
                  "iterations")
    rnd = random.Random(a.seed)
    rows = []
    for _ in range(a.orders):
        order = measured[:]
        rnd.shuffle(order)
        n, s = run(order, C, a, "none", target), run(order, C, a, "asha", target)
        first_good = next(i for i, c in enumerate(order, 1) if any(v >= target for v in C[c][1]))
        rows.append((s["to_target_gpu_s"] / n["to_target_gpu_s"], s["gpu_s"] / n["gpu_s"],
                     s["final_best"] - n["final_best"], first_good))
    if not rows:
        return
    r = sorted(x[0] for x in rows)
    q = lambda p: r[min(len(r) - 1, int(p * len(r)))]  # noqa: E731
    print(f"{a.orders} random orders of the same {len(C)} configurations (seed {a.seed}):")
    print(f"  ASHA / none, GPU-seconds to the target: median {statistics.median(r):.2f}, p10 {q(0.1):.2f}, p90 "
          f"{q(0.9):.2f}; <= 1/3 in {sum(x <= 1 / 3 for x in r)} of {len(r)}")
    print(f"  ASHA / none, GPU-seconds of the whole sweep: median {statistics.median(x[1] for x in rows):.2f}")
    print(f"  final best ASHA - none: median {statistics.median(x[2] for x in rows):+.3f}, min "
          f"{min(x[2] for x in rows):+.3f}; ASHA's final best lower by > 0.02 in "
          f"{sum(x[2] < -0.02 for x in rows)} of {len(rows)}")
    for lo, hi in ((1, a.concurrency), (a.concurrency + 1, 10**6)):
        sub = [x[0] for x in rows if lo <= x[3] <= hi]
        if sub:
            print(f"  the first configuration that can reach the target at position {lo}..{min(hi, len(C))} of the "
                  f"order ({len(sub)} orders): ratio median {statistics.median(sub):.2f}, <= 1/3 in "
                  f"{sum(x <= 1 / 3 for x in sub)}")


if __name__ == "__main__":
    main()
