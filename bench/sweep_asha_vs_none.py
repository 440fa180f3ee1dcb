"""ASHA against every trial to the end (what Isaac Lab's Ray tuner does): the same sweep file, the same seed (the
same sampled configurations), the same host, once with `[sweep.scheduler] kind = "asha"` and once with `"none"`
(issue 39's benchmark). A real `isaacd run` per arm on a scripted 8-GPU host (trials placed by gpu_memory, trained
by the built-in cart-pole, `Isaacd-Cartpole-v0`, on the CPU), the sweep's status polled twice a second.

    nice -n 10 .venv/bin/python bench/sweep_asha_vs_none.py [--trials 27] [--iterations 108] [--grace 12] \
        [--seeds 1 2 3] [--budget-min 55]

The measures (printed with the results):
- target: `--target` (90 %) of the `none` arm's final best in the same repeat (every trial to the end finds the truth);
- final best: the sweep's own best at its end (`sweep status`: its best trial, the one at the furthest rung as ASHA
  ranks, and that trial's smoothed objective there; for `none` the best trial's smoothed objective at its end);
- GPU-seconds to target: the GPU-seconds the sweep had spent (all its trials together, a gpu_memory trial counting
  its share of the GPU, the sweep's own `isaacd_sweep_gpu_seconds_total`, polled with its wall clock) at the first
  moment any trial's smoothed objective (the mean of its last `smooth` logged values, as the sweep smooths it) reached
  the target, read from the trials' TensorBoard files (each point's wall time);
- trial-iterations: the iterations all trials trained (TensorBoard steps), and trainer starts: the same cost without
  the machine's load in it (GPU-seconds are wall seconds; other engineers share this machine's 2 cores);
- a paused trial's GPU free: `trial_paused` to its trainer's exit (the save done), from the trials' journals.
Each repeat runs a different sweep seed (other sampled configurations), both arms with it, in alternating order.
Results: bench/results/issue39-asha-vs-none.{json,txt}, written after every repeat."""

from __future__ import annotations

import argparse
import bisect
import datetime
import json
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _supervised import Checkout, ask

HERE = Path(__file__).resolve().parent
TAG = "Train/mean_reward"
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


def sweep_text(kind: str, a: argparse.Namespace, seed: int, logs: Path) -> str:
    lo, hi = a.lr_range
    return f"""
[sweep]
name = "bench"
trials = {a.trials}
concurrency = {a.concurrency}
seed = {seed}
[sweep.objective]
tag = "{TAG}"
mode = "max"
smooth = {a.smooth}
[sweep.scheduler]
kind = "{kind}"
reduction_factor = {a.eta}
grace_period = {a.grace}
[sweep.space]
"agent.algorithm.learning_rate" = {{ loguniform = [{lo:g}, {hi:g}] }}
[job]
device = "cpu"
gpu_memory = "10GiB"
num_envs = {a.num_envs}
max_iterations = {a.iterations}
save_interval = 50
stop_timeout = 60.0
spare = false
seed = 1
log_root = "{logs}"
extra_args = ["agent.num_steps_per_env={a.steps}", "agent.algorithm.schedule=fixed"]
environment = {{ OMP_NUM_THREADS = "1" }}
{QUIET}
"""


def run_arm(co: Checkout, kind: str, seed: int, a: argparse.Namespace) -> dict[str, Any]:
    d = Path(tempfile.mkdtemp(prefix=f"isaacd-sweep-{kind}-"))
    cfg = host_config(d)
    (d / "bench.sweep.toml").write_text(sweep_text(kind, a, seed, d / "logs"))
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
        timeline: list[tuple[float, float]] = []  # (wall clock, the sweep's GPU-seconds so far)
        status: dict[str, Any] = {}
        while time.monotonic() - t0 < a.timeout:
            status = ask(sock, {"cmd": "sweep-status", "sweep": "bench"})
            timeline.append((time.time(), status["gpu_seconds"]))
            if status["state"] != "running":
                break
            time.sleep(0.5)
        series = read_series(d / "logs")
        arm = {"kind": kind, "seed": seed, "dir": str(d), "wall_seconds": round(time.monotonic() - t0, 1),
               "pause_to_free": pause_to_free(d / "state" / "jobs"),
               "pause_to_save": pause_to_free(d / "state" / "jobs", "trainer_saved_on_stop"),
               "gpu_seconds": status.get("gpu_seconds"), "final_best": status.get("best_objective"),
               "best_trial": status.get("best"), "state": status.get("state"), "timeline": timeline,
               "iterations": sum(len(s["points"]) for s in series.values()),
               "trainer_starts": sum(s["runs"] for s in series.values()),
               "series": {n: s["points"] for n, s in series.items()},
               "trials": [{k: t.get(k) for k in ("number", "state", "iteration", "objective", "rung_values",
                                                 "values", "gpu_seconds")} for t in status.get("trials", [])]}
        return arm
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)


def read_series(logs: Path) -> dict[int, dict[str, Any]]:
    """Each trial's objective points (step, value, wall time) from all its runs' TensorBoard files (a promoted trial
    has one run per start; a resume re-logs from its checkpoint: the later run's point wins, as the sweep keeps it)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[int, dict[str, Any]] = {}
    for f in sorted(logs.rglob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime):
        m = re.search(r"bench-t(\d+)", str(f.relative_to(logs)))
        if not m:
            continue
        ea = EventAccumulator(str(f), size_guidance={"scalars": 0})
        ea.Reload()
        if TAG not in ea.Tags().get("scalars", []):
            continue
        s = out.setdefault(int(m.group(1)), {"runs": 0, "by_step": {}})
        s["runs"] += 1
        for e in ea.Scalars(TAG):
            s["by_step"][e.step] = (e.step, e.value, e.wall_time)
    return {n: {"runs": s["runs"], "points": [s["by_step"][k] for k in sorted(s["by_step"])]}
            for n, s in sorted(out.items())}


def first_reach(series: dict[Any, list], target: float, smooth: int, only: Any = None) -> tuple[float, Any] | None:
    """The wall time at which any trial's (or trial `only`'s) smoothed objective first reached `target`, and that
    trial."""
    best: tuple[float, Any] | None = None
    for n, pts in series.items():
        if only is not None and n != only:
            continue
        vals = [v for _, v, _ in pts]
        for i in range(len(pts)):
            window = vals[max(0, i + 1 - smooth):i + 1]
            if sum(window) / len(window) >= target:
                if best is None or pts[i][2] < best[0]:
                    best = (pts[i][2], n)
                break
    return best


def gpu_seconds_at(timeline: list, wall: float) -> float:
    """The sweep's GPU-seconds at a wall time, interpolated between the two polls around it."""
    times = [t for t, _ in timeline]
    i = bisect.bisect_left(times, wall)
    if i == 0:
        return timeline[0][1]
    if i >= len(timeline):
        return timeline[-1][1]
    (t1, g1), (t2, g2) = timeline[i - 1], timeline[i]
    return g1 + (g2 - g1) * (wall - t1) / (t2 - t1) if t2 > t1 else g2


def pause_to_free(journals: Path, until: str = "exited") -> list[float]:
    """Seconds from each `trial_paused` to its trainer's exit (the save done, its GPU given back to the queue), or to
    another event of its (`trainer_saved_on_stop`: the checkpoint written, the process still alive)."""
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
            elif e.get("event") == until and paused_at is not None:
                out.append(round(e["time"] - paused_at, 2))
                paused_at = None
    return out


def lr_of(arm: dict[str, Any], number: Any) -> str:
    t = next((t for t in arm["trials"] if t["number"] == number), None)
    v = (t or {}).get("values", {}).get("agent.algorithm.learning_rate")
    return f"{float(v):.2g}" if v is not None else "?"


def compare(none: dict[str, Any], asha: dict[str, Any], a: argparse.Namespace) -> dict[str, Any]:
    target = a.target * none["final_best"]
    row: dict[str, Any] = {"seed": none["seed"], "target": round(target, 2)}
    for arm in (none, asha):
        hit = first_reach(arm["series"], target, a.smooth)
        mine = first_reach(arm["series"], target, a.smooth, only=arm["best_trial"])
        row[arm["kind"]] = {
            "to_target": round(gpu_seconds_at(arm["timeline"], hit[0]), 2) if hit else None,
            "iterations_to_target": sum(1 for pts in arm["series"].values() for p in pts if p[2] <= hit[0])
            if hit else None,
            "best_to_target": round(gpu_seconds_at(arm["timeline"], mine[0]), 2) if mine else None,
            "reached_by": hit[1] if hit else None, "total": arm["gpu_seconds"], "final_best": arm["final_best"],
            "best_trial": arm["best_trial"], "best_lr": lr_of(arm, arm["best_trial"]), "iterations": arm["iterations"],
            "trainer_starts": arm["trainer_starts"], "wall": arm["wall_seconds"]}
    # where ASHA left the configuration that every-trial-to-the-end found best
    t = next((t for t in asha["trials"] if t["number"] == none["best_trial"]), {})
    row["none_best_in_asha"] = {"trial": none["best_trial"], "state": t.get("state"), "iteration": t.get("iteration"),
                                "rung_values": t.get("rung_values")}
    return row


def fmt(x: float | None, spec: str = ".1f") -> str:
    return format(x, spec) if x is not None else "never"


def report(co: Checkout, a: argparse.Namespace, rows: list, arms: list, started: str, cmd: str,
           checkout: str | None = None) -> str:
    lo, hi = a.lr_range
    rungs, r = [], a.grace
    while r < a.iterations:
        rungs.append(r)
        r *= a.eta
    out = [f"bench/sweep_asha_vs_none.py on {checkout or co.describe()}",
           f"date {started} (UTC); command: {cmd}",
           f"task: the built-in cart-pole (Isaacd-Cartpole-v0) on the CPU, {a.num_envs} envs x {a.steps} steps per "
           f"iteration, PPO with a fixed learning rate, {a.iterations} iterations per trial",
           f"sweep: {a.trials} trials, learning_rate loguniform [{lo:g}, {hi:g}], {a.concurrency} at once, "
           f"objective {TAG} (max), smoothed over the last {a.smooth} logged iterations; ASHA eta {a.eta}, rungs at "
           f"{', '.join(map(str, rungs))} of {a.iterations}; repeats: sweep seeds {', '.join(map(str, a.seeds))}",
           f"target: {a.target:.0%} of the none arm's final best (same seed); GPU-s to target: the sweep's GPU-seconds "
           "(all trials, each its gpu_memory share) when any trial's smoothed objective first reached the target "
           "(TensorBoard wall times); final best: the sweep's best trial (furthest rung) and its smoothed objective",
           "this machine: 2 cores shared with other engineers' tests and trainers (run under nice -n 10): wall and "
           "GPU-seconds carry their load; trial-iterations do not", ""]
    out.append(f"{'seed':>4}  {'arm':>4}  {'target':>6}  {'GPU-s to target':>15}  {'its best to target':>18}  "
               f"{'GPU-s total':>11}  {'final best':>10}  {'best trial (lr)':>16}  {'trial-iters':>11}  "
               f"{'starts':>6}  {'wall s':>6}")
    for row in rows:
        for kind in ("none", "asha"):
            x = row[kind]
            reached = f"{fmt(x['to_target'])} (t{x['reached_by']})" if x["to_target"] is not None else "never"
            best = f"t{x['best_trial']} ({x['best_lr']})"
            out.append(f"{row['seed']:>4}  {kind:>4}  {row['target']:>6.1f}  {reached:>15}  "
                       f"{fmt(x.get('best_to_target')):>18}  {x['total']:>11.1f}  "
                       f"{fmt(x['final_best'], '.2f'):>10}  {best:>16}  {x['iterations']:>11}  "
                       f"{x['trainer_starts']:>6}  {x['wall']:>6.1f}")
        nb = row["none_best_in_asha"]
        rv = ", ".join(f"{v:.1f}" for v in nb["rung_values"] or [])
        out.append(f"{'':>4}  none's best trial t{nb['trial']} under ASHA: {nb['state']} at iteration "
                   f"{nb['iteration']}, its values at the rungs (and the end): {rv}")

    def med(xs: list[float]) -> str:
        return f"median {statistics.median(xs):.2f} ({', '.join(f'{x:.2f}' for x in xs)})" if xs else "-"

    to = [r["asha"]["to_target"] / r["none"]["to_target"] for r in rows
          if r["asha"]["to_target"] is not None and r["none"]["to_target"]]
    mine = [r["asha"]["best_to_target"] / r["none"]["best_to_target"] for r in rows
            if r["asha"].get("best_to_target") is not None and r["none"].get("best_to_target")]
    iters_to = [r["asha"]["iterations_to_target"] / r["none"]["iterations_to_target"] for r in rows
                if r["asha"].get("iterations_to_target") is not None and r["none"].get("iterations_to_target")]
    total = [r["asha"]["total"] / r["none"]["total"] for r in rows if r["none"]["total"]]
    iters = [r["asha"]["iterations"] / r["none"]["iterations"] for r in rows if r["none"]["iterations"]]
    never = sum(1 for r in rows if r["asha"]["to_target"] is None)
    out += ["", f"ASHA / none, GPU-seconds to the target: {med(to)}" + (f"; ASHA never reached it in {never} of "
                                                                         f"{len(rows)}" if never else ""),
            f"ASHA / none, trial-iterations to the target (the same moment, counted in iterations): {med(iters_to)}",
            f"ASHA / none, GPU-seconds until the trial each sweep ends up returning as its best reached the target: "
            f"{med(mine)}",
            f"ASHA / none, GPU-seconds of the whole sweep: {med(total)}",
            f"ASHA / none, trial-iterations of the whole sweep: {med(iters)}",
            "final best, ASHA - none: " + ", ".join(
                f"{r['asha']['final_best'] - r['none']['final_best']:+.1f}" for r in rows
                if r["asha"]["final_best"] is not None and r["none"]["final_best"] is not None)]
    frees = [x for arm in arms for x in arm["pause_to_free"]]
    out.append("a paused trial's GPU free (trial_paused -> its trainer's exit, the save done): " +
               (f"median {statistics.median(frees):.2f} s, max {max(frees):.2f} s over {len(frees)} pauses"
                if frees else "no pause"))
    saves = [x for arm in arms for x in arm.get("pause_to_save", [])]
    if saves:
        out.append(f"  of which trial_paused -> the trainer's checkpoint written: median "
                   f"{statistics.median(saves):.2f} s, max {max(saves):.2f} s over {len(saves)} pauses (the rest: the "
                   "trainer process ending)")
    return "\n".join(out)


def rerender(co: Checkout, paths: list[Path]) -> None:
    """The report of saved runs (their raw JSON, the same settings but the seeds), its rows computed again from the
    arms (series, timelines); several runs are one table."""
    raws = []
    for p in paths:
        raw = json.loads(p.read_text())
        raws += raw["runs"] if "runs" in raw else [raw]  # a file of several runs: {"runs": [...]}
    a = argparse.Namespace(**raws[0]["args"])
    a.seeds = [s for r in raws for s in r["args"]["seeds"] if any(arm["seed"] == s for arm in r["arms"])]
    for r in raws[1:]:
        other = {k: v for k, v in r["args"].items()
                 if k not in ("seeds", "budget_min", "from_json", "keep", "out_stem")}
        if any(getattr(a, k, None) != v for k, v in other.items()):
            sys.exit(f"{paths[0]} and another run differ in their settings: {other}")
    arms = [arm for r in raws for arm in r["arms"]]
    for arm in arms:
        arm["series"] = {int(n): pts for n, pts in arm["series"].items()}
    by_seed: dict[int, dict[str, Any]] = {}
    for arm in arms:
        by_seed.setdefault(arm["seed"], {})[arm["kind"]] = arm
    rows = [compare(x["none"], x["asha"], a) for x in by_seed.values()]
    print(report(co, a, rows, arms, "; ".join(r["date"] for r in raws), "; ".join(r["command"] for r in raws),
                 "; ".join(dict.fromkeys(r.get("checkout") or "?" for r in raws))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=27)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=108)
    ap.add_argument("--grace", type=int, default=12, help="the first rung's iteration (then x eta)")
    ap.add_argument("--eta", type=int, default=3)
    ap.add_argument("--smooth", type=int, default=10)
    ap.add_argument("--num-envs", type=int, default=256)
    ap.add_argument("--steps", type=int, default=32, help="agent.num_steps_per_env")
    ap.add_argument("--lr-range", type=float, nargs=2, default=(1e-6, 1e-2))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="one repeat per sweep seed")
    ap.add_argument("--target", type=float, default=0.9, help="the fraction of the none arm's final best")
    ap.add_argument("--budget-min", type=float, default=55, help="start no repeat that would end past this")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--keep", action="store_true", help="keep each arm's directory")
    ap.add_argument("--repo", default=None)
    ap.add_argument("--out-stem", default="issue39-asha-vs-none", help="bench/results/<stem>.{txt,json}")
    ap.add_argument("--from-json", type=Path, nargs="+", default=None,
                    help="print the report of saved runs again (several: one table), run nothing")
    a = ap.parse_args()
    co = Checkout(a.repo)
    if a.from_json:
        rerender(co, a.from_json)
        return
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    cmd = "nice -n 10 .venv/bin/python bench/sweep_asha_vs_none.py " + " ".join(sys.argv[1:])
    checkout = co.describe()  # at the start: others commit to this tree while it runs
    rows, arms, t_start, last = [], [], time.monotonic(), 0.0
    for i, seed in enumerate(a.seeds):
        if rows and (time.monotonic() - t_start + last) / 60 > a.budget_min:
            print(f"seed {seed}: not started (another repeat would pass --budget-min {a.budget_min:g})", flush=True)
            break
        t_rep = time.monotonic()
        order = ("none", "asha") if i % 2 == 0 else ("asha", "none")
        done = {k: run_arm(co, k, seed, a) for k in order}
        last = time.monotonic() - t_rep
        arms += [done["none"], done["asha"]]
        rows.append(compare(done["none"], done["asha"], a))
        text = report(co, a, rows, arms, started, cmd, checkout)
        print(text, flush=True)
        res = HERE / "results"
        res.mkdir(exist_ok=True)
        (res / f"{a.out_stem}.txt").write_text(text + "\n")
        raw = {"args": vars(a), "command": cmd, "date": started, "checkout": checkout, "rows": rows, "arms": arms}
        (res / f"{a.out_stem}.json").write_text(json.dumps(raw, default=str))


if __name__ == "__main__":
    main()
