#!/usr/bin/env python3
"""PBT against the same members trained independently (issue 40's outcome benchmark): one sweep file, the same
population, the same seed (the same initial hyperparameters: the sampler draws them by the seed whatever the
scheduler), the same budget (`population` x `max_iterations`), once with `[sweep.scheduler] kind = "pbt"` and once
with `kind = "none"` (every member trains to the end and none copies another: the PBT keys stay in the file, which
`kind = "none"` accepts, so the two files differ by that one word). A real `isaacd run` per arm (bench/sweep_gpu.py's
SweepBench: the members are jobs placed by `gpu_memory` on one GPU), the sweep's status polled twice a second.

    # the built-in cart-pole on the CPU (a scripted 80 GiB GPU the members are packed on), several seeds:
    nice -n 10 .venv/bin/python bench/pbt_vs_independent.py --builtin --device cpu --python .venv/bin/python \\
        --population 8 --max-iterations 100 --interval 10 --num-envs 256 --seeds 1 2 3 --tag cpu
    # the real Isaac Lab 3.0 cart-pole, 8 members on one GPU ([gpu] source nvml), one arm per call
    # (bench/isaaclab3_pbt_gpu.sh runs it on the device machine):
    python3 bench/pbt_vs_independent.py --python python3 --device cuda --arms pbt --seeds 7 --out /tmp/pbt.json
    python3 bench/pbt_vs_independent.py --python python3 --device cuda --arms independent --seeds 7 --out /tmp/ind.json
    python3 bench/pbt_vs_independent.py --report /tmp/pbt.json /tmp/ind.json [--tag gpu]   # the two side by side

Measured per arm, from the sweep's status and each member's TensorBoard (every run of it: an exploited member has a
run per start), wall times counted from `isaacd sweep submit`:
  - the best member's objective at the end: the sweep's own (`sweep status` best, smoothed as the sweep smooths it),
    and from TensorBoard the best over the members of the mean of each member's last `smooth` logged values;
  - the time to a target: the first moment any member's smoothed objective (the mean of its last `smooth` points,
    its runs' points in wall-time order) reached the target, in wall seconds, in the sweep's GPU-seconds (its own
    count, interpolated between polls) and in member-iterations trained until then (every member's TensorBoard
    points up to that moment); the target is `--target` (90 %) of the independent arm's final best of the same seed,
    and, where PBT's final best is higher, also 90 % of PBT's;
  - the exploits: how many, each decision -> the member's next first iteration, the lineage of the best member.
Results: bench/results/issue40-pbt-vs-independent-<tag>.{txt,json}: each invocation's report is appended to the
text file and its arms to the JSON's "runs" (old figures are kept)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from isaaclab3_recovery import REPO, launcher_path, tb_scalar_events  # noqa: E402
from sweep_gpu import GIB, QUIET, SWEEP, SweepBench, gpu_total_bytes  # noqa: E402

TAG = "Train/mean_reward"
RESULTS = Path(__file__).resolve().parent / "results"
ARM_KIND = {"pbt": "pbt", "independent": "none"}


class PbtBench(SweepBench):
    """One arm: the population as a PBT sweep or as independent trials (kind = "none") of the same file."""

    def sweep_text(self) -> str:
        a = self.a
        env: dict[str, str] = {}
        job: dict[str, Any] = {}
        if a.builtin:
            env["OMP_NUM_THREADS"] = "1"  # 8 members on 2 shared cores: one thread each, as the ASHA bench
        else:
            job = {"workflow": "rsl_rl", "launcher": [a.python], "task": a.task}
            env["ISAACSIM_ASSET_ROOT"] = str(Path(a.asset_root).resolve())
            if a.warp_cache:  # one Warp kernel cache for every member (each would compile every kernel: ~2 min)
                env["WARP_CACHE_PATH"] = str(Path(a.warp_cache).expanduser().resolve())
        if os.environ.get("PYTHONPATH"):  # e.g. /tmp/site on the GPU machine: isaaclab and isaacd live there
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        spare: Any = {"false": False, "true": True}.get(a.spare, a.spare)
        job |= {"num_envs": a.num_envs, "max_iterations": a.max_iterations, "save_interval": a.save_interval,
                "seed": a.job_seed, "device": a.device, "gpu_memory": a.gpu_memory, "spare": spare,
                "log_root": str(self.logs), "stop_timeout": 90.0, "extra_args": a.extra_args}
        lines = ["[sweep]", f'name = "{SWEEP}"', f"trials = {a.trials}", f"seed = {a.seed}",
                 "[sweep.objective]", f'tag = "{TAG}"', 'mode = "max"', f"smooth = {a.smooth}",
                 "[sweep.scheduler]", f'kind = "{a.kind}"  # the other arm: the same file with the other kind',
                 f"interval = {a.interval}", f"quantile = {a.quantile}", f"factors = {json.dumps(a.factors)}",
                 f"resample_probability = {a.resample_probability}", "[sweep.space]",
                 f'"agent.algorithm.learning_rate" = {{ loguniform = [{a.lr[0]:g}, {a.lr[1]:g}] }}']
        if a.ent:
            lines.append(f'"agent.algorithm.entropy_coef" = {{ uniform = [{a.ent[0]:g}, {a.ent[1]:g}] }}')
        lines += ["[job]"] + [f"{k} = {json.dumps(v)}" for k, v in job.items()]
        lines += ["[job.environment]"] + [f"{k} = {json.dumps(v)}" for k, v in env.items()]
        for w in QUIET:
            lines += [f"[job.watchdogs.{w}]", "enabled = false"]
        return "\n".join(lines) + "\n"

    def collect(self) -> None:
        super().collect()
        for name, p in (self.res.get("per_trial") or {}).items():
            p["objective"] = [[[e.step, e.value, e.wall_time] for e in tb_scalar_events(Path(r["run_dir"]), TAG)]
                              for r in p["runs"]]

    def figures(self) -> None:
        try:
            super().figures()
        except Exception as exc:  # noqa: BLE001 - the packing figures are sweep_gpu's; the outcome is ours
            self.res["errors"].append(f"sweep_gpu figures: {type(exc).__name__}: {exc}")
        self.res["outcome"] = outcome(self.res)

    def summarize(self) -> None:
        super().summarize()
        st = self.res.get("final_status") or {}
        self.res["ok"] = bool(st.get("state") == "done" and self.res.get("outcome"))


# ---- the figures of one arm ------------------------------------------------------------------------------------
def member_points(p: dict[str, Any]) -> list[tuple[float, float, int]]:
    """(wall, value, step) of every point of every run of a member, in wall-time order (a later run's re-logged
    steps after a copy or a resume are points of its timeline as trained)."""
    return sorted(((w, v, s) for run in p.get("objective") or [] for s, v, w in run), key=lambda x: x[0])


def smoothed(points: list[tuple[float, float, int]], smooth: int) -> list[tuple[float, float]]:
    vals = [v for _, v, _ in points]
    return [(points[i][0], sum(vals[max(0, i + 1 - smooth):i + 1]) / len(vals[max(0, i + 1 - smooth):i + 1]))
            for i in range(len(points))]


def outcome(res: dict[str, Any]) -> dict[str, Any]:
    a, st, per = res["args"], res.get("final_status") or {}, res.get("per_trial") or {}
    t0 = res.get("t_submit")
    members: dict[str, Any] = {}
    for t in st.get("trials", []):
        p = per.get(t["job"]) or {}
        pts = member_points(p)
        lineage = t.get("lineage") or []
        first = dict(lineage[0]["old"]) if lineage else dict(t["values"])
        exploit_rows = []
        for e in p.get("events") or []:
            if e["event"] != "member_exploit":
                continue
            nxt = next((x for x in p.get("attempts") or [] if x["started"] >= e["time"] - 0.5
                        and x["first_iteration"]), None)
            exploit_rows.append({"at": e.get("iteration"), "source": e.get("source"), "t": round(e["time"] - t0, 2),
                                 "to_first_iteration_s": round(nxt["first_iteration"] - e["time"], 2) if nxt else None,
                                 "warm_spare": next((x.get("warm_spare") for x in p.get("events") or []
                                                     if x["event"] == "started" and nxt
                                                     and x.get("attempt") == nxt["attempt"]), None)})
        members[t["job"]] = {
            "number": t["number"], "state": t["state"], "iteration": t["iteration"], "objective": t["objective"],
            "initial": first, "final_values": t["values"], "lineage": lineage, "exploits": exploit_rows,
            "final_tb": (sum(v for _, v, _ in pts[-a["smooth"]:]) / len(pts[-a["smooth"]:])) if pts else None,
            "iterations": sum(len(r) for r in p.get("objective") or []), "runs": len(p.get("objective") or []),
            "points": [[round(w - t0, 3), round(v, 4), s] for w, v, s in pts]}
    finals = [m["final_tb"] for m in members.values() if m["final_tb"] is not None]
    return {"t_submit": t0, "best_trial": st.get("best"), "best_objective": st.get("best_objective"),
            "best_tb": max(finals) if finals else None, "members": members,
            "exploits": sum(len(m["exploits"]) for m in members.values()),
            "wall_s": round((res.get("t_end") or t0) - t0, 1) if t0 else None,
            "gpu_seconds": st.get("gpu_seconds"), "state": st.get("state"),
            "timeline": [[r["t"], r["gpu_seconds"]] for r in res.get("timeline") or []]}


def to_target(o: dict[str, Any], target: float, smooth: int) -> dict[str, Any] | None:
    """When any member's smoothed objective first reached `target`: wall s since the submit, the sweep's
    GPU-seconds then, member-iterations trained until then, and the member."""
    hit: tuple[float, str] | None = None
    for name, m in o["members"].items():
        pts = [(w, v, s) for w, v, s in m["points"]]
        for w, v in smoothed(pts, smooth):
            if v >= target:
                if hit is None or w < hit[0]:
                    hit = (w, name)
                break
    if hit is None:
        return None
    m = o["members"][hit[1]]
    # the member that reached it: at which of its iterations, and whether an exploit (a copy) had come before
    step = next((s for w, _, s in reversed(m["points"]) if w <= hit[0]), None)
    copies = sum(1 for e in m["lineage"] if e.get("time", 0) - o.get("t_submit", 0) <= hit[0])
    return {"wall_s": round(hit[0], 1), "gpu_s": round(interp(o["timeline"], hit[0]), 1), "by": hit[1],
            "step": step, "copies_before": copies,
            "member_iterations": sum(1 for m in o["members"].values() for w, _, _ in m["points"] if w <= hit[0])}


def interp(timeline: list[list[float]], t: float) -> float:
    if not timeline:
        return float("nan")
    for (t1, g1), (t2, g2) in zip(timeline, timeline[1:]):
        if t1 <= t <= t2:
            return g1 + (g2 - g1) * (t - t1) / (t2 - t1) if t2 > t1 else g2
    return timeline[0][1] if t < timeline[0][0] else timeline[-1][1]


# ---- the report ------------------------------------------------------------------------------------------------
def fmt(x: Any, spec: str = ".1f") -> str:
    return format(x, spec) if isinstance(x, (int, float)) else "never" if x is None else str(x)


def short(values: dict[str, Any]) -> str:
    return ", ".join(f"{k.rsplit('.', 1)[-1]} {v:.3g}" if isinstance(v, float) else f"{k.rsplit('.', 1)[-1]} {v}"
                     for k, v in values.items())


def compare(pbt: dict[str, Any], ind: dict[str, Any], a: dict[str, Any]) -> dict[str, Any]:
    op, oi = pbt["outcome"], ind["outcome"]
    truth = oi["best_objective"]
    row: dict[str, Any] = {"seed": a["seed"], "pbt": {k: op[k] for k in ("best_objective", "best_tb", "best_trial",
                                                                          "exploits", "wall_s", "gpu_seconds")},
                           "independent": {k: oi[k] for k in ("best_objective", "best_tb", "best_trial", "wall_s",
                                                              "gpu_seconds")}, "targets": []}
    for who in ("independent", "pbt"):
        final = (oi if who == "independent" else op)["best_objective"]
        if not isinstance(final, (int, float)) or (who == "pbt" and isinstance(truth, (int, float))
                                                     and final <= truth):
            continue
        target = a["target"] * final if final > 0 else final
        row["targets"].append({"of": who, "target": round(target, 3),
                               "pbt": to_target(op, target, a["smooth"]),
                               "independent": to_target(oi, target, a["smooth"])})
    return row


def arm_lines(name: str, r: dict[str, Any]) -> list[str]:
    o = r.get("outcome") or {}
    L = [f"  {name}: {o.get('state')} in {fmt(o.get('wall_s'))} s, GPU-s {fmt(o.get('gpu_seconds'))}, best "
         f"member t{o.get('best_trial')}: {fmt(o.get('best_objective'), '.2f')} (sweep's), "
         f"{fmt(o.get('best_tb'), '.2f')} (TensorBoard, last {r['args']['smooth']}); exploits {o.get('exploits', 0)}; "
         f"{sum(m['iterations'] for m in (o.get('members') or {}).values())} member-iterations logged in all (a copy "
         "goes on at its source's iteration: an exploited member may skip or redo some)"]
    for job, m in sorted((o.get("members") or {}).items(), key=lambda x: -(x[1]["objective"] or -1e9)):
        ex = m["exploits"]
        cost = [x["to_first_iteration_s"] for x in ex if x["to_first_iteration_s"] is not None]
        L.append(f"    {job}: start {short(m['initial'])} -> end {short(m['final_values'])}; {m['state']} at "
                 f"{m['iteration']}, objective {fmt(m['objective'], '.2f')}, {m['iterations']} iterations logged in "
                 f"{m['runs']} runs" + (f"; {len(ex)} exploits (decision -> first iteration median "
                                        f"{statistics.median(cost):.1f} s)" if cost else ""))
        for e in m["lineage"]:
            L.append(f"      at {e.get('at')}: copied t{e.get('from'):03d}'s iteration {e.get('from_iteration')}; "
                     f"{short(e.get('new') or {})}")
    return L


def report(pairs: list[tuple[dict[str, Any], dict[str, Any]]], cmd: str) -> tuple[str, list[dict[str, Any]]]:
    a0 = (pairs[0][0] or pairs[0][1])["args"]
    env = (pairs[0][0] or pairs[0][1]).get("environment") or {}
    task = "the built-in cart-pole (Isaacd-Cartpole-v0)" if a0["builtin"] else \
        f"the real Isaac Lab {env.get('isaaclab')} {a0['task']} (rsl_rl {env.get('rsl-rl-lib')})"
    L = [f"bench/pbt_vs_independent.py, {time.strftime('%Y-%m-%d %H:%M %Z')}; command: {cmd}",
         f"task: {task} on {a0['device']} ({env.get('gpu') or 'CPU'}; {env.get('cpus')} cores, load average at the "
         f"start {[round(x, 1) for x in env.get('load_avg') or []]}), isaacd {env.get('isaacd_rev')}",
         f"population {a0['trials']} (all at once, gpu_memory {a0['gpu_memory']} each on one "
         f"{'scripted ' if a0['gpu_source'] == 'scripted' else ''}GPU), {a0['max_iterations']} iterations each, "
         f"{a0['num_envs']} envs, save_interval {a0['save_interval']}, spare {a0['spare']}, job seed {a0['job_seed']}; "
         f"lr loguniform {a0['lr']}" + (f", entropy_coef uniform {a0['ent']}" if a0["ent"] else "") +
         f"; extra_args {a0['extra_args']}",
         f"PBT: interval {a0['interval']}, quantile {a0['quantile']}, factors {a0['factors']}, resample_probability "
         f"{a0['resample_probability']}; independent: the same file with kind = \"none\" (same sweep seed: the same "
         f"initial values); objective {TAG} smoothed over {a0['smooth']}",
         f"target: {a0['target']:.0%} of the independent arm's final best (and of PBT's where higher); to target: the "
         "first moment any member's smoothed objective reached it (TensorBoard wall times since the submit)", ""]
    rows = []
    for pbt, ind in pairs:
        a = (pbt or ind)["args"]
        L.append(f"sweep seed {a['seed']}:")
        for name, r in (("pbt", pbt), ("independent", ind)):
            L += arm_lines(name, r) if r else [f"  {name}: not run"]
        if pbt and ind and pbt.get("outcome") and ind.get("outcome"):
            row = compare(pbt, ind, a)
            rows.append(row)
            for t in row["targets"]:
                cells = []
                for who in ("pbt", "independent"):
                    x = t[who]
                    copies = f", after {x['copies_before']} copies" if x and x["copies_before"] else ""
                    cells.append(f"{who} " + (f"{x['wall_s']} s / {x['gpu_s']} GPU-s / {x['member_iterations']} "
                                              f"member-iterations (t{x['by'][-3:]} at its iteration {x['step']}"
                                              f"{copies})" if x else "never"))
                L.append(f"  to {t['target']:.2f} ({a['target']:.0%} of {t['of']}'s final best): " + "; ".join(cells))
            for name, r in (("pbt", pbt), ("independent", ind)):
                objs = [m["objective"] for m in r["outcome"]["members"].values()
                        if isinstance(m["objective"], (int, float))]
                if objs and row["targets"]:
                    tgt = row["targets"][0]["target"]
                    row[name]["at_target"] = sum(1 for x in objs if x >= tgt)
                    row[name]["population_median"] = statistics.median(objs)
                    L.append(f"  {name}: the population at its end: mean objective {statistics.mean(objs):.1f}, "
                             f"median {statistics.median(objs):.1f}, {row[name]['at_target']} of {len(objs)} members "
                             f"at or above {tgt:.2f}")
        L.append("")
    if rows:
        def med(xs: list[float]) -> str:
            return f"median {statistics.median(xs):.2f} ({', '.join(f'{x:.2f}' for x in xs)})" if xs else "-"
        diff = [r["pbt"]["best_objective"] - r["independent"]["best_objective"] for r in rows
                if isinstance(r["pbt"]["best_objective"], (int, float))
                and isinstance(r["independent"]["best_objective"], (int, float))]
        ratio = [t["pbt"]["wall_s"] / t["independent"]["wall_s"] for r in rows for t in r["targets"][:1]
                 if t["pbt"] and t["independent"] and t["independent"]["wall_s"]]
        iters = [t["pbt"]["member_iterations"] / t["independent"]["member_iterations"] for r in rows
                 for t in r["targets"][:1] if t["pbt"] and t["independent"] and t["independent"]["member_iterations"]]
        never = sum(1 for r in rows for t in r["targets"][:1] if not t["pbt"])
        L += [f"over {len(rows)} seed(s): best member's objective, PBT - independent: {med(diff)}",
              f"  PBT / independent, wall seconds to 90 % of the independent final best: {med(ratio)}"
              + (f"; PBT never reached it in {never}" if never else ""),
              f"  PBT / independent, member-iterations to it: {med(iters)}",
              "  members at or above it at the end, PBT vs independent: " + ", ".join(
                  f"{r['pbt'].get('at_target')} vs {r['independent'].get('at_target')}" for r in rows),
              "  the population's median objective at the end, PBT vs independent: " + ", ".join(
                  f"{fmt(r['pbt'].get('population_median'))} vs {fmt(r['independent'].get('population_median'))}"
                  for r in rows)]
    return "\n".join(L), rows


def save(text: str, arms: list[dict[str, Any]], rows: list[dict[str, Any]], tag: str, cmd: str) -> None:
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / f"issue40-pbt-vs-independent-{tag}.txt", "a") as f:
        f.write(text + "\n\n")
    jp = RESULTS / f"issue40-pbt-vs-independent-{tag}.json"
    raw = json.loads(jp.read_text()) if jp.exists() else {"runs": []}
    # each arm's settings, sweep file and outcome (every member's objective points: a report can be made again
    # from them); the raw per-trial records and status polls stay in the arms' own JSON (--out)
    slim = [{k: r.get(k) for k in ("args", "environment", "sweep_file", "outcome", "errors", "ok")} for r in arms]
    raw["runs"].append({"command": cmd, "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "rows": rows, "arms": slim})
    jp.write_text(json.dumps(raw, default=str) + "\n")


def arm_args(a: argparse.Namespace, arm: str, seed: int) -> argparse.Namespace:
    b = argparse.Namespace(**vars(a))
    b.kind, b.seed, b.arm = ARM_KIND[arm], seed, arm
    b.out = str(Path(a.out).with_name(f"{Path(a.out).stem}-{arm}-s{seed}.json")) if a.seeds[1:] or a.arms[1:] \
        else a.out
    b.rungs, b.eta = [], 2  # SweepBench's table reads them
    return b


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", nargs="+", metavar="ARM_JSON", help="the report of saved arms (pairs by seed)")
    ap.add_argument("--python", help="the interpreter the members run (Isaac Lab's; the built-in: this one)")
    ap.add_argument("--arms", nargs="+", choices=list(ARM_KIND), default=["pbt", "independent"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[7], help="sweep seeds: one repeat each, arms alternating")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--gpu-source", choices=["nvml", "scripted"], default=None)
    ap.add_argument("--scripted-mib", type=int, default=81559)
    ap.add_argument("--builtin", action="store_true", help="the built-in cart-pole (on the CPU)")
    ap.add_argument("--task", default="Isaac-Cartpole-Direct")
    ap.add_argument("--population", type=int, default=8)
    ap.add_argument("--max-iterations", type=int, default=160)
    ap.add_argument("--interval", type=int, default=20)
    ap.add_argument("--quantile", type=float, default=0.25)
    ap.add_argument("--factors", default="0.8,1.2")
    ap.add_argument("--resample-probability", type=float, default=0.25)
    ap.add_argument("--save-interval", type=int, default=10)
    ap.add_argument("--num-envs", type=int, default=2048)
    ap.add_argument("--job-seed", type=int, default=42, help="every member's environment/torch seed")
    ap.add_argument("--lr", default="1e-5,1e-2")
    ap.add_argument("--ent", default="0,0.02", help="entropy_coef's uniform bounds ('' none)")
    ap.add_argument("--extra-args", default="agent.algorithm.schedule=fixed",
                    help="the base job's extra_args, comma-separated")
    ap.add_argument("--smooth", type=int, default=5)
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--spare", default="false", help="the members' spare: false, booted, auto")
    ap.add_argument("--gpu-memory", default="auto")
    ap.add_argument("--asset-root", default=str(REPO / "tests/isaaclab3/asset_root"))
    ap.add_argument("--warp-cache", default="~/.cache/warp")
    ap.add_argument("--poll", type=float, default=0.5)
    ap.add_argument("--nvml-interval", type=float, default=0.5)
    ap.add_argument("--deadline", type=float, default=0.0, help="seconds per arm (0: none); past it the sweep is "
                                                                "cancelled and reported so far")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default="/tmp/pbt-vs-independent.json", help="each arm's JSON (-<arm>-s<seed>)")
    ap.add_argument("--tag", default=None, help="append the report to bench/results/issue40-pbt-vs-independent-TAG.*")
    a = ap.parse_args(argv)
    cmd = " ".join(["bench/pbt_vs_independent.py"] + (argv if argv is not None else sys.argv[1:]))
    if a.report:
        arms = [json.loads(Path(p).read_text()) for p in a.report]
    else:
        if not a.python:
            ap.error("--python is needed")
        a.gpu_source = a.gpu_source or ("nvml" if a.device == "cuda" else "scripted")
        a.trials = a.concurrency = a.population
        a.lr = [float(x) for x in a.lr.split(",")]
        a.ent = [float(x) for x in a.ent.split(",")] if a.ent else []
        a.factors = [float(x) for x in a.factors.split(",")]
        a.extra_args = [x for x in a.extra_args.split(",") if x]
        if a.gpu_memory == "auto":
            total = gpu_total_bytes(a)
            if not total:
                ap.error("--gpu-memory auto: no GPU total to divide (NVML unreadable): give --gpu-memory")
            a.gpu_memory = f"{int(total / GIB / a.population)}GiB"
        a.runtime = "process"
        a.python = launcher_path(a.python)
        arms = []
        for i, seed in enumerate(a.seeds):
            for arm in (a.arms if i % 2 == 0 else a.arms[::-1]):
                b = PbtBench(arm_args(a, arm, seed))
                b.begin()
                b.run(lambda b=b: b.measure(sweep_errors=(Exception,)),  # any failure: report what was measured
                      lambda r: "\n".join(arm_lines(r["args"]["arm"], r) + [f"errors: {r['errors']}"]))
                arms.append(b.res)
    by_seed: dict[int, dict[str, Any]] = {}
    for r in arms:
        by_seed.setdefault(r["args"]["seed"], {})[r["args"]["arm"]] = r
    pairs = [(x.get("pbt"), x.get("independent")) for _, x in sorted(by_seed.items())]
    text, rows = report(pairs, cmd)
    print(text, flush=True)
    if a.tag:
        save(text, arms, rows, a.tag, cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
