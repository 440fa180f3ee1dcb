#!/usr/bin/env python3
"""Watchdog benchmark: detection latency against the configured hold, and false positives.

Detection latency: each watchdog class (the same code the supervisor runs) is driven tick by tick
(0.2 s, the supervisor's default tick) through a simulated run whose fault starts at a random
moment: training at `--iter-seconds` per iteration, then a hang, an idle GPU, a frozen loss, a
spike, heat, or an XID. Median over `--runs` runs of (trip time - fault start) is printed beside
the configured hold (or timeout / window).

False positives: a real, healthy training run of the built-in rsl_rl trainer (CPU) is recorded
from its TensorBoard events, then replayed through every training-signal watchdog with default
settings, counting trips.

    .venv/bin/python bench/watchdogs.py           # 15 runs per fault, a 300-iteration healthy run
    .venv/bin/python bench/watchdogs.py --quick   # 5 runs, 40 iterations: well under a minute
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from isaacd.observations.tensorboard import ScalarPoint, TensorBoardTail
from isaacd.config import watchdogs as wc
from isaacd.watchdogs.base import GpuReading, JobView, XidEvent
from isaacd.watchdogs.engine import WATCHDOG_CLASSES

TICK = 0.2


class SimRun:
    """A simulated attempt: one new iteration every `iter_s` seconds until the fault, if it stops progress."""

    def __init__(self, iter_s: float, fault_at: float):
        self.iter_s, self.fault_at = iter_s, fault_at
        self.step = -1
        self.last_progress: float | None = None

    def view(self, now: float, points: Callable[[int, bool], list[ScalarPoint]], stops_progress: bool,
             gpu: Callable[[bool], GpuReading], xids: list[XidEvent]) -> JobView:
        faulty = now >= self.fault_at
        new: list[ScalarPoint] = []
        due = int(now / self.iter_s)
        while self.step < due and not (faulty and stops_progress):
            self.step += 1
            self.last_progress = now
            new += points(self.step, faulty)
        return JobView(name="bench", now=now, alive=True, attempt_started_at=0.0, attempt_first_step=0,
                       iteration=self.step if self.step >= 0 else None, last_progress_time=self.last_progress,
                       new_points=new, gpus=[gpu(faulty)], new_xids=xids if faulty else [], attempt=1)


def healthy_points(step: int, rng: random.Random) -> list[ScalarPoint]:
    return [ScalarPoint(step, "Loss/value", 10.0 * (1 + 0.2 * rng.random()) / (1 + 0.01 * step), 0.0),
            ScalarPoint(step, "Loss/surrogate", -0.01 + 0.004 * rng.random(), 0.0),
            ScalarPoint(step, "Train/mean_reward", min(500.0, 5 + step) + rng.random(), 0.0)]


def scenario(name: str, rng: random.Random) -> tuple[Any, Callable[..., Any], bool, Callable[[bool], GpuReading],
                                                   list[XidEvent], float]:
    """(watchdog config, points(step, faulty), fault stops progress, gpu(faulty), xids, nominal latency)."""
    ok_gpu = GpuReading(0, utilization_ratio=0.9, power_watts=500.0, power_limit_watts=700.0, temperature_celsius=60.0)

    def points(step: int, faulty: bool) -> list[ScalarPoint]:
        pts = healthy_points(step, rng)
        if faulty and name == "loss_stagnation":
            pts = [ScalarPoint(step, "Loss/surrogate", 0.0, 0.0)]
        if faulty and name == "divergence":
            pts = [ScalarPoint(step, "Loss/value", 1e6, 0.0)]
        return pts

    gpu = lambda faulty: ok_gpu  # noqa: E731
    stops, xids = False, []
    if name == "no_progress":
        cfg, stops = wc.NoProgress(timeout=10.0, warmup_seconds=0.0), True
        nominal = cfg.timeout
    elif name == "duty_cycle":
        cfg = wc.DutyCycle(hold=5.0, progress_grace=3.0, warmup_seconds=0.0)
        stops = True
        gpu = lambda faulty: GpuReading(0, utilization_ratio=0.02 if faulty else 0.9, power_watts=80.0,  # noqa: E731
                                        power_limit_watts=700.0)
        nominal = cfg.progress_grace + cfg.hold
    elif name == "loss_stagnation":
        cfg = wc.LossStagnation(warmup_iterations=0, warmup_seconds=0.0, cooldown=0.0)
        nominal = cfg.window * 1.0  # iterations until the window is flat, at --iter-seconds each
    elif name == "divergence":
        cfg = wc.Divergence()
        nominal = 0.0
    elif name == "gpu_temperature":
        cfg = wc.GpuTemperature(hold=30.0, warmup_seconds=0.0)
        gpu = lambda faulty: GpuReading(0, temperature_celsius=88.0 if faulty else 60.0,  # noqa: E731
                                        power_limit_watts=700.0, slowdown_celsius=89.0)
        nominal = cfg.hold
    elif name == "xid":
        cfg = wc.Xid()
        xids = [XidEvent(0, 79, 0.0)]
        nominal = 0.0
    else:
        raise ValueError(name)
    return cfg, points, stops, gpu, xids, nominal


def detection_latency(name: str, runs: int, iter_s: float, seed: int) -> tuple[list[float], float, int]:
    rng = random.Random(seed)
    latencies, misses, nominal = [], 0, 0.0
    for _ in range(runs):
        cfg, points, stops, gpu, xids, nominal = scenario(name, rng)
        if name == "loss_stagnation":
            nominal = cfg.window * iter_s
        wd = WATCHDOG_CLASSES[name](cfg)
        fault_at = rng.uniform(20.0, 40.0)
        sim = SimRun(iter_s, fault_at)
        now, tripped = 0.0, None
        sent_xid = False
        while now < fault_at + nominal + 120:
            x = xids if (now >= fault_at and not sent_xid) else []
            sent_xid = sent_xid or bool(x)
            trip = wd.step(sim.view(now, points, stops, gpu, x))
            if trip is not None:
                if now < fault_at:
                    misses += 1  # tripped before the fault: a false positive in the healthy prefix
                    continue
                tripped = now
                break
            now = round(now + TICK, 6)
        if tripped is not None:
            latencies.append(tripped - fault_at)
    return latencies, nominal, misses


def record_healthy_run(iterations: int, workdir: Path, device: str = "cpu", num_envs: int = 64) -> list[ScalarPoint]:
    exe = Path(sys.executable).with_name("isaacd-train")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "isaacd_trainer"]
    # Isaac Lab's contract: runs go to ./logs/rsl_rl/<experiment>/ of the working directory
    subprocess.run([*cmd, "--task", "Isaacd-Cartpole-v0", "--num_envs", str(num_envs), "agent.num_steps_per_env=8",
                    "--max_iterations", str(iterations), f"agent.save_interval={iterations}", "--device", device,
                    f"agent.device={device}",  # --device is the simulation's only, as upstream
                    "--experiment_name", "bench", "--run_name", "healthy", "--seed", "7"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, cwd=workdir)
    run_dir = next((workdir / "logs" / "rsl_rl" / "bench").iterdir())
    return sorted(TensorBoardTail(run_dir).poll(), key=lambda p: p.step)


def false_positives(points: list[ScalarPoint]) -> dict[str, int]:
    defaults = wc.WatchdogsConfig()
    out = {}
    for name in ("loss_stagnation", "reward_plateau", "divergence"):
        cfg = getattr(defaults, name).model_copy(update={"warmup_seconds": 0.0, "cooldown": 0.0})
        wd = WATCHDOG_CLASSES[name](cfg)
        trips = 0
        by_step: dict[int, list[ScalarPoint]] = {}
        for p in points:
            by_step.setdefault(p.step, []).append(p)
        for step in sorted(by_step):
            view = JobView(name="bench", now=float(step), alive=True, attempt_started_at=-1e9, attempt_first_step=0,
                           iteration=step, last_progress_time=float(step), new_points=by_step[step], attempt=1)
            trips += wd.step(view) is not None
        out[name] = trips
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--iterations", type=int, default=None, help="length of the healthy real run")
    ap.add_argument("--iter-seconds", type=float, default=1.0, help="simulated seconds per training iteration")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="device of the healthy real run (cuda on a GPU host)")
    ap.add_argument("--num-envs", type=int, default=64)
    args = ap.parse_args()
    runs = args.runs or (5 if args.quick else 15)
    iterations = args.iterations or (25 if args.quick else 300)

    print(f"detection latency, {runs} runs each, tick {TICK} s, {args.iter_seconds} s per iteration")
    print(f"{'watchdog':<17} {'configured':>24} {'median':>9} {'max':>9} {'missed':>7} {'early':>6}")
    for name in ("no_progress", "duty_cycle", "loss_stagnation", "divergence", "gpu_temperature", "xid"):
        lat, nominal, early = detection_latency(name, runs, args.iter_seconds, args.seed)
        desc = {"no_progress": f"timeout {nominal:g} s", "duty_cycle": f"grace+for {nominal:g} s",
                "loss_stagnation": f"window 10 it = {nominal:g} s", "divergence": "immediate",
                "gpu_temperature": f"for {nominal:g} s", "xid": "immediate"}[name]
        med = f"{statistics.median(lat):.2f} s" if lat else "-"
        mx = f"{max(lat):.2f} s" if lat else "-"
        print(f"{name:<17} {desc:>24} {med:>9} {mx:>9} {runs - len(lat):>7} {early:>6}")

    with tempfile.TemporaryDirectory(prefix="isaacd-wd-bench-") as tmp:
        points = record_healthy_run(iterations, Path(tmp), args.device, args.num_envs)
    fps = false_positives(points)
    steps = len({p.step for p in points})
    print()
    print(f"false positives over a healthy real run ({steps} iterations of the built-in trainer, {args.num_envs} envs "
          f"on {args.device}, default settings):")
    for name, n in fps.items():
        print(f"  {name:<17} {n} trips")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
