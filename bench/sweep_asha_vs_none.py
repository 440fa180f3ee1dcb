"""ASHA against every trial to the end (what Isaac Lab's Ray tuner does): the same sweep file, the same seed (the
same sampled configurations), the same host, once with `[sweep.scheduler] kind = "asha"` and once with `"none"`
(issue 39's benchmark). A real `isaacd run` per arm on a scripted 8-GPU host (trials placed by gpu_memory, trained
by the built-in cart-pole on the CPU), the sweep's status polled twice a second.

    .venv/bin/python bench/sweep_asha_vs_none.py [--trials 9] [--concurrency 2] [--iterations 60] [--repeats 1]

Prints per arm: GPU-seconds until the sweep's best objective (its best trial's value at the furthest rung reached)
first reached the target (by default 90 % of the best
the `none` arm reached: its final best is the truth every trial to the end finds), the GPU-seconds of the whole
sweep, its final best and wall time; then ASHA's ratios against `none` measured in the same run. GPU-seconds are the
sweep's own count (status: wall seconds each trial's trainer lived × its GPUs), the figure a rented GPU bills.
Results: bench/results/issue39-asha-vs-none.{json,txt}."""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _supervised import Checkout, ask

HERE = Path(__file__).resolve().parent
QUIET = "".join(f"\n[job.watchdogs.{w}]\nenabled = false\n" for w in (
    "no_progress", "duty_cycle", "loss_stagnation", "reward_plateau", "divergence", "gpu_temperature", "xid"))


def host_config(d: Path) -> Path:
    (d / "gpu.json").write_text(json.dumps({"gpus": 8, "events": []}))
    cfg = d / "isaacd.toml"
    cfg.write_text('jobs = []\n[supervisor]\nstate_dir = "state"\ncontrol_socket = "isaacd.sock"\njobs_dir = "jobs.d"\n'
                   'log_format = "json"\ntick_interval = 0.2\n[metrics]\nenabled = false\n'
                   '[gpu]\nsource = "scripted"\nscript = "gpu.json"\nsample_interval = 0.5\n'
                   '[queue]\nmin_run_seconds = 1\n')
    return cfg


def sweep_text(kind: str, a: argparse.Namespace, logs: Path) -> str:
    return f"""
[sweep]
name = "bench"
trials = {a.trials}
concurrency = {a.concurrency}
seed = {a.seed}
[sweep.objective]
tag = "Train/mean_reward"
mode = "max"
smooth = 5
[sweep.scheduler]
kind = "{kind}"
reduction_factor = 3
grace_period = {a.grace}
[sweep.space]
"agent.algorithm.learning_rate" = {{ loguniform = [1e-5, 3e-2] }}
"agent.algorithm.entropy_coef" = {{ uniform = [0.0, 0.05] }}
[job]
device = "cpu"
gpu_memory = "10GiB"
num_envs = {a.num_envs}
max_iterations = {a.iterations}
save_interval = 5
stop_timeout = 60.0
spare = false
seed = 1
log_root = "{logs}"
extra_args = ["agent.num_steps_per_env=16", "agent.algorithm.schedule=fixed"]
environment = {{ OMP_NUM_THREADS = "1" }}
{QUIET}
"""


def run_arm(co: Checkout, kind: str, a: argparse.Namespace) -> dict[str, Any]:
    d = Path(tempfile.mkdtemp(prefix=f"isaacd-sweep-{kind}-"))
    cfg = host_config(d)
    (d / "bench.sweep.toml").write_text(sweep_text(kind, a, d / "logs"))
    log = open(d / "supervisor.log", "wb")
    proc = subprocess.Popen([str(co.isaacd), "run", "--config", str(cfg)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    sock = d / "isaacd.sock"
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        t0 = time.monotonic()
        subprocess.run([str(co.isaacd), "--config", str(cfg), "sweep", "submit", str(d / "bench.sweep.toml")],
                       check=True, capture_output=True, text=True)
        timeline: list[tuple[float, float, float | None]] = []  # (wall s, GPU-s so far, best objective so far)
        best_seen: float | None = None
        status: dict[str, Any] = {}
        while time.monotonic() - t0 < a.timeout:
            status = ask(sock, {"cmd": "sweep-status", "sweep": "bench"})
            # the sweep's own best so far: its best trial's value at the furthest rung reached (with no rungs, at the
            # end of a trial), what a tuner knows of its best at that moment; not a trial's passing peak
            best = status.get("best_objective")
            if best is not None:
                best_seen = best if best_seen is None else max(best_seen, best)
            timeline.append((time.monotonic() - t0, status["gpu_seconds"], best_seen))
            if status["state"] != "running":
                break
            time.sleep(0.5)
        return {"kind": kind, "dir": str(d), "wall_seconds": round(time.monotonic() - t0, 1),
                "pause_to_free": pause_to_free(d / "state" / "jobs"),
                "gpu_seconds": status.get("gpu_seconds"), "final_best": status.get("best_objective"),
                "best_seen": best_seen, "state": status.get("state"), "timeline": timeline,
                "trials": [{k: t[k] for k in ("number", "state", "iteration", "objective", "rung_values", "values",
                                               "gpu_seconds")} for t in status.get("trials", [])]}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)


def pause_to_free(journals: Path) -> list[float]:
    """Seconds from each `trial_paused` to its trainer's exit (the save done, its GPU given back to the queue)."""
    out = []
    for f in sorted(journals.glob("*.events.jsonl")):
        paused_at = None
        for line in f.read_text().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == "trial_paused":
                paused_at = e["time"]
            elif e.get("event") == "exited" and paused_at is not None:
                out.append(round(e["time"] - paused_at, 2))
                paused_at = None
    return out


def gpu_seconds_to(arm: dict[str, Any], target: float) -> float | None:
    return next((g for _, g, best in arm["timeline"] if best is not None and best >= target), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=9)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--grace", type=int, default=6, help="the first rung's iteration (then x3)")
    ap.add_argument("--num-envs", type=int, default=64)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--target", type=float, default=0.9, help="the fraction of the none arm's final best")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--keep", action="store_true", help="keep each arm's directory")
    ap.add_argument("--repo", default=None)
    a = ap.parse_args()
    co = Checkout(a.repo)
    rows, arms = [], []
    for r in range(a.repeats):
        none, asha = run_arm(co, "none", a), run_arm(co, "asha", a)
        arms += [none, asha]
        truth = none["final_best"] if none["final_best"] is not None else none["best_seen"]
        target = a.target * truth if truth is not None and truth > 0 else truth
        row = {"repeat": r + 1, "target": target}
        for arm in (none, asha):
            row[arm["kind"]] = {"to_target": gpu_seconds_to(arm, target) if target is not None else None,
                                "total": arm["gpu_seconds"], "final_best": arm["final_best"],
                                "wall": arm["wall_seconds"]}
        rows.append(row)
    out = [f"bench/sweep_asha_vs_none.py on {co.describe()}",
           f"{a.trials} trials (seed {a.seed}), {a.concurrency} at once, {a.iterations} iterations each, ASHA eta 3 "
           f"from iteration {a.grace}; built-in cart-pole on the CPU, {a.num_envs} envs; target {a.target:.0%} of "
           "the none arm's final best", ""]
    out.append(f"{'repeat':>6}  {'arm':>4}  {'GPU-s to target':>15}  {'GPU-s total':>11}  {'final best':>10}  "
               f"{'wall s':>6}")
    for row in rows:
        for kind in ("none", "asha"):
            x = row[kind]
            to = f"{x['to_target']:.1f}" if x["to_target"] is not None else "never"
            best = f"{x['final_best']:.2f}" if x["final_best"] is not None else "-"
            out.append(f"{row['repeat']:>6}  {kind:>4}  {to:>15}  {x['total']:>11.1f}  {best:>10}  {x['wall']:>6.1f}")
    ratios_to = [r["asha"]["to_target"] / r["none"]["to_target"] for r in rows
                 if r["asha"]["to_target"] and r["none"]["to_target"]]
    ratios_total = [r["asha"]["total"] / r["none"]["total"] for r in rows if r["none"]["total"]]
    out.append("")
    out.append("ASHA / none, GPU-seconds to the target: " + (f"median {statistics.median(ratios_to):.2f}"
                                                            if ratios_to else "not reached by both arms"))
    out.append("ASHA / none, GPU-seconds of the whole sweep: " + (f"median {statistics.median(ratios_total):.2f}"
                                                                 if ratios_total else "-"))
    frees = [x for arm in arms for x in arm["pause_to_free"]]
    out.append("a paused trial's GPU free (trial_paused -> its trainer's exit, the save done): " +
               (f"median {statistics.median(frees):.2f} s, max {max(frees):.2f} s over {len(frees)} pauses"
                if frees else "no pause"))
    text = "\n".join(out)
    print(text)
    res = HERE / "results"
    res.mkdir(exist_ok=True)
    (res / "issue39-asha-vs-none.txt").write_text(text + "\n")
    (res / "issue39-asha-vs-none.json").write_text(json.dumps({"args": vars(a), "rows": rows, "arms": arms},
                                                              indent=1, default=str))


if __name__ == "__main__":
    main()
