#!/usr/bin/env python3
"""Issue 39's GPU benchmark: one sweep of the real Isaac Lab 3.0 cart-pole, its trials packed by `gpu_memory` on one
GPU, run by a real `isaacd run` (process runtime, `[gpu] source = "nvml"`), with ASHA or with every trial to the end.

The sweep file (written by this bench, printed into the results): `--trials` trials over
`agent.algorithm.learning_rate` (loguniform) and `agent.algorithm.entropy_coef` (uniform), a fixed learning-rate
schedule (rsl_rl's default "adaptive" would replace the searched rate after the first update), `--concurrency` at
once, `[sweep.scheduler] kind = --kind` (asha: eta `--eta`, rungs `--rungs`), objective `Train/mean_reward` smoothed
over `--smooth` iterations. Each trial is Isaac-Cartpole-Direct with upstream's own entry point (`<python> <shim> -m
isaaclab train --rl_library rsl_rl ...`, `launcher = [--python]`), `device = "cuda"` (the queue places it), no warm
spare, `gpu_memory = --gpu-memory` ("auto": the GPU's total / concurrency, rounded down to whole GiB, so exactly
`concurrency` trials fit and one more does not: a promoted trial waits for a paused one's memory).

Measured, from the supervisor's own records (events, shim events, the sweep's status) and each run's TensorBoard:
  - trials at once on the GPU: the most trainers alive at once (started -> exited), the most training at once
    (first iteration -> exited), the most compute processes NVML listed at once, the most GPU memory used
  - per-trial iteration throughput: each trial's iterations/s (TensorBoard wall times of rsl_rl's Perf/total_fps)
    while every first-launched trial trained at once (the packed window), and over each whole run; the sum over the
    trials (the GPU's aggregate); env-steps/s = it/s x num_envs x num_steps_per_env
  - GPU-seconds: the sweep's own count (trainer-alive seconds x the GPU share asked: gpu_memory / the GPU's total),
    the trainers' alive seconds unweighted, and the sweep's wall time on the one GPU
  - every pause and promotion (rung, rank of n, the rung's cut, the objective), and per pause: trial_paused ->
    its trainer saved (the shim's stop) -> its trainer exited -> NVML no longer lists its process (its GPU memory
    free) -> the next trial placed on the GPU -> that trial's first iteration
  - each trial's TensorBoard steps over its runs (a paused and promoted trial: 0 steps lost), and the learning rate
    each run logged first (Loss/learning_rate) against the sampled one
  - the sweep's best trial, its objective and hyperparameters

    python3 bench/sweep_gpu.py --python python3 --kind asha --out /tmp/asha.json --deadline 400      # on the GPU
    .venv/bin/python bench/sweep_gpu.py --python .venv-isaaclab3/bin/python --device cpu --trials 3 \\
        --concurrency 3 --num-envs 16 --max-iterations 12 --rungs 3,6 --out /tmp/dry.json    # a dry run on a CPU
    python3 bench/sweep_gpu.py --compare ASHA.json NONE.json     # the two arms' figures side by side, the ratios

`--device cpu` trains on the CPU while the queue places the trials on a scripted GPU (`--scripted-mib`, an H100's
81559 MiB by default). Needs isaacd and tensorboard importable by the interpreter that runs this.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from isaaclab3_recovery import (REPO, TASK, Bench, Deadline, launcher_path, table_footer,  # noqa: E402
                                tb_scalar_events, tb_scalars, tb_steps)
from isaacd.control import request  # noqa: E402

SWEEP = "il3gpu"
# the watchdogs that judge training, off: this measures the sweep (a small task leaves a GPU mostly idle: duty_cycle;
# a badly configured trial's value loss: divergence); the health ones (XID, heat) stay on
QUIET = ("no_progress", "duty_cycle", "loss_stagnation", "reward_plateau", "divergence")
GIB = 2**30


class SweepBench(Bench):
    """bench/isaaclab3_recovery.py's supervisor plumbing (start, waits under --deadline, save, cleanup), one sweep."""

    def __init__(self, a: argparse.Namespace):
        super().__init__(a)
        self.jobs_dir = self.w / "jobs.d"
        self.nvml: list[tuple[float, int | None, dict[int, int]]] = []  # (time, used bytes, {pid: bytes})
        self._stop_sampling = threading.Event()
        self.res.update({"timeline": [], "skipped": {}})

    def job(self) -> dict[str, Any]:  # Bench.wait's look for a failed job: a failed trial is the sweep's business
        return {}

    def trials(self) -> list[str]:
        return [f"{SWEEP}-t{n:03d}" for n in range(1, self.a.trials + 1)]

    # ---- config and the sweep file ---------------------------------------------------------------
    def write_config(self) -> None:
        a = self.a
        lines = ["jobs = []  # every trial comes from jobs_dir, written by `isaacd sweep submit`",
                 "[supervisor]", f'state_dir = "{self.state}"', f'control_socket = "{self.sock}"',
                 'log_format = "json"', f'jobs_dir = "{self.jobs_dir}"', "[metrics]", "enabled = false",
                 "[gpu]", f'source = "{a.gpu_source}"']
        if a.gpu_source == "scripted":
            script = self.w / "gpu.json"
            script.write_text(json.dumps({"gpus": 1, "defaults": {"memory_total_bytes": a.scripted_mib * 2**20}}) + "\n")
            lines.append(f'script = "{script}"')
        lines += ["[queue]", "min_run_seconds = 1"]
        self.cfg.write_text("\n".join(lines) + "\n")
        self.jobs_dir.mkdir(mode=0o700, exist_ok=True)

    def sweep_text(self) -> str:
        a = self.a
        env = {"ISAACSIM_ASSET_ROOT": str(Path(a.asset_root).resolve())}
        if os.environ.get("PYTHONPATH"):  # e.g. /tmp/site on the GPU machine: isaaclab and isaacd live there
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        if a.warp_cache:  # one Warp kernel cache for every trial: each would compile every kernel again (~2 min)
            env["WARP_CACHE_PATH"] = str(Path(a.warp_cache).expanduser().resolve())
        sched = [f'kind = "{a.kind}"']
        if a.kind == "asha":
            sched += [f"reduction_factor = {a.eta}", f"rungs = {json.dumps(a.rungs)}"]
        job: dict[str, Any] = {} if a.builtin else {"workflow": "rsl_rl", "launcher": [a.python], "task": TASK}
        job |= {
            "num_envs": a.num_envs,
            "max_iterations": a.max_iterations, "save_interval": a.save_interval, "seed": 42, "device": a.device,
            "gpu_memory": a.gpu_memory, "spare": False, "log_root": str(self.logs), "stop_timeout": 90.0,
            "extra_args": ["agent.algorithm.schedule=fixed"],
        }
        lines = ["[sweep]", f'name = "{SWEEP}"', f"trials = {a.trials}", f"concurrency = {a.concurrency}",
                 f"seed = {a.seed}", "[sweep.objective]", 'tag = "Train/mean_reward"', 'mode = "max"',
                 f"smooth = {a.smooth}", "[sweep.scheduler]", *sched, "[sweep.space]",
                 f'"agent.algorithm.learning_rate" = {{ loguniform = [{a.lr[0]:g}, {a.lr[1]:g}] }}',
                 f'"agent.algorithm.entropy_coef" = {{ uniform = [{a.ent[0]:g}, {a.ent[1]:g}] }}',
                 "[job]"] + [f"{k} = {json.dumps(v)}" for k, v in job.items()]
        lines += ["[job.environment]"] + [f"{k} = {json.dumps(v)}" for k, v in env.items()]
        for w in QUIET:
            lines += [f"[job.watchdogs.{w}]", "enabled = false"]
        return "\n".join(lines) + "\n"

    # ---- NVML, sampled beside the supervisor's own view ---------------------------------------------
    def start_sampling(self) -> None:
        if self.a.gpu_source != "nvml":
            return
        try:
            import pynvml
            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception as exc:  # noqa: BLE001 - a figure less, not a failure
            self.res["errors"].append(f"NVML sampler: {exc}")
            return

        def loop() -> None:
            while not self._stop_sampling.is_set():
                try:
                    used = pynvml.nvmlDeviceGetMemoryInfo(h).used
                    procs = {p.pid: p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
                    self.nvml.append((time.time(), used, procs))
                except Exception:  # noqa: BLE001
                    pass
                self._stop_sampling.wait(self.a.nvml_interval)
        threading.Thread(target=loop, daemon=True, name="nvml").start()

    def sweep_status(self) -> dict[str, Any]:
        return request(self.sock, {"cmd": "sweep-status", "sweep": SWEEP}, timeout=10)

    # ---- the run ---------------------------------------------------------------------------------
    def run_sweep(self) -> None:
        a = self.a
        f = self.w / "sweep.toml"
        f.write_text(self.sweep_text())
        self.res["sweep_file"] = f.read_text()
        self.start_sampling()
        t0 = time.time()
        r = self.cli("sweep", "submit", str(f))
        self.res["submit"] = {"at": t0, "cli_seconds": round(time.time() - t0, 3), "rc": r.returncode,
                              "out": (r.stdout + r.stderr).strip()[-600:]}
        self.log(f"isaacd sweep submit: rc {r.returncode} {self.res['submit']['out']!r}")
        if r.returncode != 0:
            raise RuntimeError(f"isaacd sweep submit failed ({r.returncode}): {self.res['submit']['out']}")
        last_log = 0.0
        st: dict[str, Any] = {}
        while True:
            if time.time() >= self.deadline:
                self.res["skipped"]["sweep"] = "the bench's --deadline came first: figures of the sweep so far"
                self.log("deadline: the sweep is not done; cancelling it (every trial saved) and reporting so far")
                r = self.cli("sweep", "cancel", SWEEP)
                self.res["cancel"] = (r.stdout + r.stderr).strip()[-300:]
                break
            if self.sup is not None and self.sup.poll() is not None:
                raise RuntimeError(f"the supervisor exited ({self.sup.returncode})")
            try:
                st = self.sweep_status()
                jobs = {j["name"]: j for j in self.status()["jobs"]}
            except (OSError, RuntimeError) as exc:
                self.log(f"status: {exc}")
                time.sleep(0.5)
                continue
            counts: dict[str, int] = {}
            for t in st["trials"]:
                counts[t["state"]] = counts.get(t["state"], 0) + 1
            row = {"t": round(time.time() - t0, 2), "gpu_seconds": st["gpu_seconds"], "best": st["best_objective"],
                   "trials": counts, "jobs_running": sum(j["state"] == "running" for n, j in jobs.items()
                                                         if n.startswith(SWEEP)),
                   "iterations": {t["number"]: t["iteration"] for t in st["trials"]},
                   # each trial's objective column as `isaacd sweep status` shows it now (smoothed, live)
                   "objectives": {t["number"]: t["objective"] for t in st["trials"]}}
            self.res["timeline"].append(row)
            if time.time() - last_log > 10:
                last_log = time.time()
                self.log(f"sweep {st['state']}: {counts}, {row['jobs_running']} jobs running, GPU-s "
                         f"{st['gpu_seconds']:.1f}, best {st['best_objective']}, iterations {row['iterations']}")
                self.save()
            if st["state"] != "running":
                break
            time.sleep(a.poll)
        self.res["t_submit"] = t0
        self.res["t_end"] = time.time()
        # a pause decided in the sweep's last tick (or the cancel) is still saving: its trainer's exit is a figure
        # (up to 40 s, past --deadline too: the shell script keeps 45 s for this and the collection)
        until = time.time() + 40
        while time.time() < until:
            try:
                if not any(j["state"] in ("starting", "running", "stopping") for j in self.status()["jobs"]
                           if j["name"].startswith(SWEEP)):
                    break
            except (OSError, RuntimeError):
                pass
            time.sleep(0.2)
        else:
            self.log("trainers still live 40 s after the sweep ended: their exits are missing from the figures")
        self.res["final_status"] = self.sweep_status()
        self.log(f"sweep {self.res['final_status']['state']} after {time.time() - t0:.1f} s: best trial "
                 f"{self.res['final_status']['best']} objective {self.res['final_status']['best_objective']}")

    # ---- the figures -----------------------------------------------------------------------------
    def measure(self, sweep_errors: tuple[type[BaseException], ...] = (Deadline, RuntimeError, OSError,
                                                                      KeyError)) -> None:
        """The sweep, then its figures; a failure of either is recorded in the results (what was measured is kept and
        saved), not raised: the body `Bench.run` runs for this bench and for bench/pbt_vs_independent.py's."""
        try:
            self.run_sweep()
        except sweep_errors as exc:
            self.res["errors"].append(f"sweep: {type(exc).__name__}: {exc}")
            self.log(f"sweep FAILED: {exc}")
        finally:
            self.save()
        try:
            self.collect()
            self.figures()
        except Exception as exc:  # noqa: BLE001 - report, keep what was measured
            import traceback
            self.res["errors"].append(f"figures: {type(exc).__name__}: {exc}: {traceback.format_exc()[-800:]}")
            self.log(f"figures FAILED: {exc}")

    def collect(self) -> None:
        """Every trial's events, shim events and TensorBoard, then the figures (run after the sweep, before the
        supervisor goes: events come over its socket)."""
        per: dict[str, Any] = {}
        for name in self.trials():
            evs = self.events(job=name)
            attempts = []
            for s in (e for e in evs if e["event"] == "started"):
                n = s["attempt"]
                ex = next((e for e in evs if e["event"] == "exited" and e.get("attempt") == n), None)
                fi = self.shim_event(n, "first_iteration", job=name)
                stop = self.shim_event(n, "stopped", job=name)
                attempts.append({"attempt": n, "pid": s.get("pid"), "started": s["time"],
                                 "first_iteration": fi["time"] if fi else None,
                                 "shim_stopped": stop["time"] if stop else None,
                                 "exited": ex["time"] if ex else None, "code": ex.get("code") if ex else None,
                                 "resume_from": (s.get("resume_from") or {}).get("iteration")})
            runs = []
            for d in self.run_dirs(name):
                steps = tb_steps(d)
                perf = [(e.step, e.wall_time) for e in tb_scalar_events(d, "Perf/total_fps")]
                lr = tb_scalars(d, "Loss/learning_rate")
                runs.append({"run_dir": str(d), "steps": [steps[0], steps[-1], len(steps)] if steps else None,
                             "perf": perf, "first_lr": lr[0][1] if lr else None, "last_lr": lr[-1][1] if lr else None,
                             "num_steps_per_env": steps_per_env(d), "all_steps": steps})
            per[name] = {"events": [{k: v for k, v in e.items() if k not in ("argv",)} for e in evs],
                         "attempts": attempts, "runs": runs}
        self.res["per_trial"] = per

    def figures(self) -> None:
        a, res = self.a, self.res
        per, st = res.get("per_trial") or {}, res.get("final_status") or {}
        if not per or not st:
            return
        f: dict[str, Any] = {}
        res["figures"] = f
        atts = [x for p in per.values() for x in p["attempts"]]
        end = res.get("t_end") or time.time()
        # trials at once: trainers alive, and training
        f["max_alive_at_once"] = max_overlap([(x["started"], x["exited"] or end) for x in atts])
        f["max_training_at_once"] = max_overlap([(x["first_iteration"], x["exited"] or end) for x in atts
                                                if x["first_iteration"]])
        mine = {x["pid"] for x in atts}
        if self.nvml:
            f["nvml_max_processes_at_once"] = max(len(set(p) & mine) for _, _, p in self.nvml)
            f["nvml_max_used_gib"] = round(max(u or 0 for _, u, _ in self.nvml) / GIB, 2)
            per_proc = [b for _, _, p in self.nvml for pid, b in p.items() if pid in mine and b]
            f["nvml_trainer_memory_gib"] = ({"median": round(statistics.median(per_proc) / GIB, 2),
                                             "max": round(max(per_proc) / GIB, 2)} if per_proc else None)
            f["nvml_pids_matched"] = bool(per_proc)
        # throughput: the packed window (the first `concurrency` launches all training, none exited or paused yet)
        pw = packed_window(per, end, a.concurrency, a.num_envs)
        if pw:
            f["packed_window"] = pw
        whole = {}
        for name, p in per.items():
            for i, r in enumerate(p["runs"]):
                if len(r["perf"]) >= 2:
                    whole[f"{name}#{i + 1}"] = (len(r["perf"]) - 1) / (r["perf"][-1][1] - r["perf"][0][1])
        if whole:
            f["whole_runs"] = rate_summary(whole, a.num_envs, spe_of(per))
        # GPU-seconds
        alive = sum((x["exited"] or end) - x["started"] for x in atts)
        t_first = min((x["started"] for x in atts), default=None)
        t_last = max((x["exited"] or end for x in atts), default=None)
        f["gpu_seconds"] = {"sweep_count": st.get("gpu_seconds"),
                            "trainer_alive_seconds": round(alive, 1),
                            "iterations_trained": sum(len(r["all_steps"]) for p in per.values() for r in p["runs"]),
                            "sweep_wall_seconds": round((res.get("t_end") or end) - res["t_submit"], 1),
                            "gpu_busy_wall_seconds": round(t_last - t_first, 1) if t_first else None}
        # pauses and promotions
        placed = sorted((e["time"], n) for n, p in per.items() for e in p["events"] if e["event"] == "placed")
        pauses, promotions = [], []
        for name, p in per.items():
            for e in p["events"]:
                if e["event"] == "trial_paused":
                    pauses.append(self.pause_row(name, p, e, placed, per))
                elif e["event"] == "trial_promoted":
                    promotions.append(promotion_row(name, p, e))
        f["pauses"] = sorted(pauses, key=lambda r: r["at"])
        f["promotions"] = sorted(promotions, key=lambda r: r["at"])
        for key in ("to_saved_s", "to_exited_s", "to_nvml_free_s", "to_next_placed_s", "to_next_first_iteration_s"):
            v = [r[key] for r in f["pauses"] if isinstance(r.get(key), (int, float))]
            f.setdefault("pause_medians", {})[key] = ({"median": round(statistics.median(v), 2), "max": round(max(v), 2),
                                                       "n": len(v)} if v else None)
        # steps lost across pause and promotion; the learning rate each run logged first, against the sampled one
        f["trials"] = []
        for t in st.get("trials", []):
            p = per.get(t["job"]) or {"runs": []}
            union = set().union(*[set(r["all_steps"]) for r in p["runs"]]) if p["runs"] else set()
            top = max(union) if union else -1
            lr = t["values"].get("agent.algorithm.learning_rate")
            f["trials"].append({
                "trial": t["number"], "job": t["job"], "values": t["values"], "state": t["state"],
                "iteration": t["iteration"], "objective": t["objective"], "rung_values": t["rung_values"],
                "gpu_seconds": t["gpu_seconds"], "runs": len(p["runs"]),
                "steps_missing": len(set(range(top + 1)) - union),
                "first_lr_logged": [r["first_lr"] for r in p["runs"]],
                "lr_in_effect": all(r["first_lr"] is not None and lr and abs(r["first_lr"] - lr) <= 1e-6 * lr
                                    for r in p["runs"]) if p["runs"] else None})
        best = next((t for t in st.get("trials", []) if t["number"] == st.get("best")), None)
        f["best"] = {"trial": st.get("best"), "objective": st.get("best_objective"),
                     "values": best["values"] if best else None, "state": best["state"] if best else None}
        f["state"], f["reason"] = st.get("state"), st.get("reason")

    def pause_row(self, name: str, p: dict[str, Any], e: dict[str, Any], placed: list[tuple[float, str]],
                  per: dict[str, Any]) -> dict[str, Any]:
        t0 = e["time"]
        att = next((x for x in reversed(p["attempts"]) if x["started"] <= t0), None)
        row: dict[str, Any] = {"trial": name, "at": t0, "rung": e.get("rung"), "milestone": e.get("milestone"),
                               "rank": e.get("rank"), "of": e.get("of"), "cut": e.get("cut"),
                               "objective": e.get("objective")}
        saved = next((x for x in p["events"] if x["event"] == "trainer_saved_on_stop" and x["time"] >= t0), None)
        if saved:
            row["saved_iteration"] = saved.get("iteration")
        if att:
            row["attempt"] = att["attempt"]
            if att["shim_stopped"]:
                row["to_saved_s"] = round(att["shim_stopped"] - t0, 2)
            if att["exited"]:
                row["to_exited_s"] = round(att["exited"] - t0, 2)
                row["exit_code"] = att["code"]
            gone = next((t for t, _, procs in self.nvml if t >= t0 and att["pid"] not in procs), None)
            if gone is not None and self.res["figures"].get("nvml_pids_matched"):
                row["to_nvml_free_s"] = round(gone - t0, 2)
        nxt = next(((t, n) for t, n in placed if t >= t0), None)
        if nxt:
            row["next_placed"] = nxt[1]
            row["to_next_placed_s"] = round(nxt[0] - t0, 2)
            a2 = next((x for x in per[nxt[1]]["attempts"] if x["started"] >= nxt[0] - 0.5), None)
            if a2 and a2["first_iteration"]:
                row["to_next_first_iteration_s"] = round(a2["first_iteration"] - t0, 2)
        return row

    def summarize(self) -> None:
        self.res["load_avg_end"] = os.getloadavg()
        f = self.res.get("figures") or {}
        self.res["ok"] = bool(not self.res["errors"] and f.get("state") == "done")

    def cleanup(self) -> None:
        self._stop_sampling.set()
        super().cleanup()


def packed_window(per: dict[str, Any], end: float, concurrency: int, num_envs: int) -> dict[str, Any] | None:
    """Each trial's iterations/s from the moment the first `concurrency` launches all train to the first exit or
    pause among them (TensorBoard wall times of Perf/total_fps), and their sum: the GPU's aggregate when packed."""
    firsts = sorted(((p["attempts"][0], n) for n, p in per.items() if p["attempts"]),
                    key=lambda x: x[0]["started"])[:concurrency]
    if not firsts or not all(x["first_iteration"] for x, _ in firsts):
        return None
    w0 = max(x["first_iteration"] for x, _ in firsts)
    w1 = min([x["exited"] or end for x, _ in firsts] + [e["time"] for _, n in firsts for e in per[n]["events"]
                                                        if e["event"] == "trial_paused"] + [end])
    out: dict[str, Any] = {"seconds": round(w1 - w0, 2), "trials": len(firsts)}
    rates = {}
    for _, n in firsts:
        runs = per[n]["runs"]
        ws = [t for _, t in runs[0]["perf"]] if runs else []
        ws = [t for t in ws if w0 <= t <= w1]
        if len(ws) >= 2:
            rates[n] = (len(ws) - 1) / (ws[-1] - ws[0])
    if rates:
        out.update(rate_summary(rates, num_envs, spe_of(per)))
    return out


def max_overlap(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    n = best = 0
    for _, d in edges:
        n += d
        best = max(best, n)
    return best


def spe_of(per: dict[str, Any]) -> int | None:
    return next((r["num_steps_per_env"] for p in per.values() for r in p["runs"] if r["num_steps_per_env"]), None)


def rate_summary(rates: dict[str, float], num_envs: int, spe: int | None) -> dict[str, Any]:
    v = list(rates.values())
    agg = sum(v)
    return {"it_per_s": {k: round(x, 3) for k, x in rates.items()}, "median_it_per_s": round(statistics.median(v), 3),
            "min_it_per_s": round(min(v), 3), "max_it_per_s": round(max(v), 3),
            "sum_it_per_s": round(agg, 3),
            "median_env_steps_per_s": round(statistics.median(v) * num_envs * spe) if spe else None,
            "sum_env_steps_per_s": round(agg * num_envs * spe) if spe else None}


def promotion_row(name: str, p: dict[str, Any], e: dict[str, Any]) -> dict[str, Any]:
    t0 = e["time"]
    row = {"trial": name, "at": t0, "rung": e.get("rung"), "milestone": e.get("milestone"), "rank": e.get("rank"),
           "of": e.get("of")}
    att = next((x for x in p["attempts"] if x["started"] >= t0 - 0.5), None)
    if att:
        row["resume_from"] = att["resume_from"]
        row["to_started_s"] = round(att["started"] - t0, 2)
        if att["first_iteration"]:
            row["to_first_iteration_s"] = round(att["first_iteration"] - t0, 2)
    return row


def steps_per_env(run_dir: Path) -> int | None:
    import re
    try:
        m = re.search(r"^num_steps_per_env:\s*(\d+)", (run_dir / "params" / "agent.yaml").read_text(), re.M)
    except OSError:
        return None
    return int(m.group(1)) if m else None


def gpu_total_bytes(a: argparse.Namespace) -> int | None:
    if a.gpu_source == "scripted":
        return a.scripted_mib * 2**20
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total
    except Exception:  # noqa: BLE001
        return None


# ---- the table -----------------------------------------------------------------------------------------
def fmt(x: Any, spec: str = ".2f") -> str:
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def table(res: dict[str, Any]) -> str:
    a, env, f = res["args"], res["environment"], res.get("figures") or {}
    L = [f"isaacd sweep on one GPU: real Isaac Lab {env.get('isaaclab')} {TASK} (rsl_rl {env.get('rsl-rl-lib')}), "
         f"scheduler {a['kind']}" + (f" (eta {a['eta']}, rungs {a['rungs']} of {a['max_iterations']})"
                                     if a["kind"] == "asha" else f" ({a['max_iterations']} iterations each)"),
         f"  {a['trials']} trials (seed {a['seed']}), concurrency {a['concurrency']}, {a['num_envs']} envs, gpu_memory "
         f"{a['gpu_memory']} each, device {a['device']}, [gpu] source {a['gpu_source']}; lr loguniform {a['lr']}, "
         f"entropy_coef uniform {a['ent']}, schedule fixed; objective Train/mean_reward smoothed over {a['smooth']}",
         f"  gpu {env.get('gpu')}, python {env.get('python')}, torch {env.get('torch')}, isaacd {env.get('isaacd_rev')}, "
         f"{env.get('date')}"]
    if not f:
        return "\n".join(L + ["(no figures)"] + table_footer(res))
    L.append(f"state {f.get('state')} ({f.get('reason')}); best trial {f['best']['trial']}: objective "
             f"{fmt(f['best']['objective'])}, {f['best']['values']}")
    L.append(f"trials at once: {f.get('max_alive_at_once')} trainers alive, {f.get('max_training_at_once')} training; "
             f"NVML: {f.get('nvml_max_processes_at_once', '-')} of our processes at once, {f.get('nvml_max_used_gib', '-')}"
             f" GiB used at most, a trainer {f.get('nvml_trainer_memory_gib', '-')} GiB")
    pw = f.get("packed_window")
    if pw and "median_it_per_s" in pw:
        L.append(f"packed window ({pw['trials']} trials training, {pw['seconds']} s): per trial median "
                 f"{pw['median_it_per_s']} it/s (min {pw['min_it_per_s']}, max {pw['max_it_per_s']}), "
                 f"{fmt(pw['median_env_steps_per_s'], '.0f')} env-steps/s; all trials together {pw['sum_it_per_s']} it/s, "
                 f"{fmt(pw['sum_env_steps_per_s'], '.0f')} env-steps/s")
    wr = f.get("whole_runs")
    if wr:
        L.append(f"whole runs ({len(wr['it_per_s'])}): median {wr['median_it_per_s']} it/s (min {wr['min_it_per_s']}, "
                 f"max {wr['max_it_per_s']})")
    g = f.get("gpu_seconds") or {}
    L.append(f"GPU-seconds: the sweep's count {fmt(g.get('sweep_count'), '.1f')} (share-weighted), trainers alive "
             f"{g.get('trainer_alive_seconds')} s in all, {g.get('iterations_trained')} iterations trained, sweep wall "
             f"{g.get('sweep_wall_seconds')} s, GPU busy {g.get('gpu_busy_wall_seconds')} s")
    if f.get("pauses"):
        L.append("pauses: trial  rung(it)  rank/of  objective  cut  -> saved  exited  NVML free  next placed  "
                 "next first it  (s after trial_paused)")
        for r in f["pauses"]:
            L.append(f"  {r['trial']}  {r['rung']}({r['milestone']})  {r['rank']}/{r['of']}  {fmt(r['objective'])}  "
                     f"{fmt(r['cut'])}  -> {fmt(r.get('to_saved_s'))}  {fmt(r.get('to_exited_s'))} (code "
                     f"{r.get('exit_code')}, saved it {r.get('saved_iteration')})  {fmt(r.get('to_nvml_free_s'))}  "
                     f"{fmt(r.get('to_next_placed_s'))} ({r.get('next_placed', '-')})  "
                     f"{fmt(r.get('to_next_first_iteration_s'))}")
        for k, v in (f.get("pause_medians") or {}).items():
            L.append(f"  {k}: {v}")
    if f.get("promotions"):
        L.append("promotions: trial  rung(it)  rank/of  resumed from  -> started  first iteration (s after "
                 "trial_promoted)")
        for r in f["promotions"]:
            L.append(f"  {r['trial']}  {r['rung']}({r['milestone']})  {r['rank']}/{r['of']}  {r.get('resume_from')}  "
                     f"-> {fmt(r.get('to_started_s'))}  {fmt(r.get('to_first_iteration_s'))}")
    L.append("trials (best first): trial  lr  entropy_coef  state  iteration  objective  rung values  runs  steps "
             "missing  lr logged = sampled  GPU-s")
    for t in f.get("trials", []):
        v = t["values"]
        L.append(f"  {t['job']}  {v.get('agent.algorithm.learning_rate')}  {v.get('agent.algorithm.entropy_coef')}  "
                 f"{t['state']}  {t['iteration']}  {fmt(t['objective'])}  {[round(x, 2) for x in t['rung_values']]}  "
                 f"{t['runs']}  {t['steps_missing']}  {t['lr_in_effect']}  {fmt(t['gpu_seconds'], '.1f')}")
    for k, why in (res.get("skipped") or {}).items():
        L.append(f"SKIPPED {k}: {why}")
    return "\n".join(L + table_footer(res))


def compare(asha_path: str, none_path: str) -> str:
    """The two arms side by side (same sweep file but the scheduler, same seed, same GPU kind) and ASHA's ratios."""
    A, N = json.loads(Path(asha_path).read_text()), json.loads(Path(none_path).read_text())
    fa, fn = A.get("figures") or {}, N.get("figures") or {}
    ga, gn = fa.get("gpu_seconds") or {}, fn.get("gpu_seconds") or {}
    L = [f"ASHA ({asha_path}) against every trial to the end ({none_path}); GPUs {A['environment'].get('gpu')} / "
         f"{N['environment'].get('gpu')}"]
    for k in ("sweep_count", "trainer_alive_seconds", "iterations_trained", "sweep_wall_seconds"):
        x, y = ga.get(k), gn.get(k)
        ratio = f"{x / y:.2f}" if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y else "-"
        L.append(f"  {k:<24} asha {fmt(x, '.1f'):>9}  none {fmt(y, '.1f'):>9}  asha/none {ratio}")
    # GPU-seconds (the sweep's count) until its best so far first reached the target: 90 % of the none arm's final
    # best, as bench/sweep_asha_vs_none.py reads it (the sweep's best at the furthest rung, the highest seen so far)
    truth = (fn.get("best") or {}).get("objective")
    if isinstance(truth, (int, float)):
        target = 0.9 * truth if truth > 0 else truth
        # the sweep's best objective as a user watches `isaacd sweep status`: the highest value in its objective
        # column (each trial's smoothed objective, live); the target reached when it first is >= the target
        # (declared before any 27-trial run: 90 % the primary target, 98 % a second, near the best)
        for frac in (0.9, 0.98):
            tgt = frac * truth if truth > 0 else truth
            for what, key in (("GPU-seconds, the sweep's count", "gpu_seconds"), ("wall s of the one GPU", "t")):
                to = {k: live_to(R, tgt, key) for k, R in (("asha", A), ("none", N))}
                ratio = f"{to['asha'][0] / to['none'][0]:.2f}" if to["asha"] and to["none"] else "-"
                who = {k: f"t{v[1]}" if v else "-" for k, v in to.items()}
                x, y = (fmt(to[k] and to[k][0], ".1f") for k in ("asha", "none"))
                L.append(f"  to {frac:.0%} {tgt:.3f}  asha {x:>7} ({who['asha']})  none {y:>7} ({who['none']})  "
                         f"asha/none {ratio}  "
                         f"({what}, until a trial's live objective reached {frac:.0%} of none's final best)")
        to = {k: gpu_seconds_to(R, target) for k, R in (("asha", A), ("none", N))}
        ratio = f"{to['asha'] / to['none']:.2f}" if to["asha"] and to["none"] else "-"
        L.append(f"  to target, status best   asha {fmt(to['asha'], '.1f'):>9}  none {fmt(to['none'], '.1f'):>9}  "
                 f"asha/none {ratio}  (the status's best_objective: rung values only, none's only at a trial's end)")
    ba, bn = (fa.get("best") or {}), (fn.get("best") or {})
    L.append(f"  final best               asha {fmt(ba.get('objective'))} (trial {ba.get('trial')})  none "
             f"{fmt(bn.get('objective'))} (trial {bn.get('trial')})")
    # where ASHA's best of the none arm stood: the none arm's best trial, what ASHA did with it
    nb = bn.get("trial")
    at = next((t for t in fa.get("trials", []) if t["trial"] == nb), None)
    if at:
        L.append(f"  the none arm's best trial {nb} in the ASHA arm: {at['state']} at iteration {at['iteration']}, "
                 f"rung values {[round(x, 2) for x in at['rung_values']]}")
    return "\n".join(L)


def live_to(res: dict[str, Any], target: float, key: str) -> tuple[float, str] | None:
    """`key` (gpu_seconds or t) of the first poll at which a trial's live objective was >= target (max mode), and
    that trial's number."""
    for row in res.get("timeline") or []:
        vals = [(v, n) for n, v in (row.get("objectives") or {}).items() if isinstance(v, (int, float))]
        if vals and max(vals)[0] >= target:
            return row[key], max(vals)[1]
    return None


def gpu_seconds_to(res: dict[str, Any], target: float) -> float | None:
    seen = None
    for row in res.get("timeline") or []:
        if row.get("best") is not None:
            seen = row["best"] if seen is None else max(seen, row["best"])
        if seen is not None and seen >= target:
            return row["gpu_seconds"]
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compare", nargs=2, metavar=("ASHA_JSON", "NONE_JSON"), help="print the two arms' ratios")
    ap.add_argument("--python", help="the interpreter that has isaaclab (the trials' launcher)")
    ap.add_argument("--kind", choices=["asha", "none"], default="asha")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--gpu-source", choices=["nvml", "scripted"], default=None,
                    help="default nvml on cuda; scripted on cpu (one GPU of --scripted-mib)")
    ap.add_argument("--scripted-mib", type=int, default=81559, help="the scripted GPU's memory (an H100's NVML total)")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--num-envs", type=int, default=2048)
    ap.add_argument("--max-iterations", type=int, default=160)
    ap.add_argument("--rungs", default="20,40,80", help="ASHA's milestones (iterations)")
    ap.add_argument("--eta", type=int, default=2)
    ap.add_argument("--smooth", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7, help="the sampler's seed (the same trials in both arms)")
    ap.add_argument("--lr", default="1e-5,1e-2", help="learning_rate's loguniform bounds")
    ap.add_argument("--ent", default="0,0.02", help="entropy_coef's uniform bounds")
    ap.add_argument("--save-interval", type=int, default=50)
    ap.add_argument("--gpu-memory", default="auto", help='each trial\'s gpu_memory ("auto": total / concurrency)')
    ap.add_argument("--asset-root", default=str(REPO / "tests/isaaclab3/asset_root"))
    ap.add_argument("--warp-cache", default="~/.cache/warp", help="one Warp kernel cache for every trial ('' none)")
    ap.add_argument("--builtin", action="store_true",
                    help="the built-in cart-pole instead of Isaac Lab (a quick check of this bench's logic on a CPU)")
    ap.add_argument("--poll", type=float, default=0.5)
    ap.add_argument("--nvml-interval", type=float, default=0.2)
    ap.add_argument("--deadline", type=float, default=0.0, help="stop after this many seconds in all (0: none)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", help="results JSON")
    a = ap.parse_args(argv)
    if a.compare:
        print(compare(*a.compare))
        return 0
    if not a.python or not a.out:
        ap.error("--python and --out are needed (or --compare)")
    a.gpu_source = a.gpu_source or ("nvml" if a.device == "cuda" else "scripted")
    a.rungs = [int(x) for x in a.rungs.split(",") if x]
    a.lr = [float(x) for x in a.lr.split(",")]
    a.ent = [float(x) for x in a.ent.split(",")]
    if a.gpu_memory == "auto":
        total = gpu_total_bytes(a)
        if not total:
            ap.error("--gpu-memory auto: no GPU total to divide (NVML unreadable): give --gpu-memory")
        a.gpu_total_gib = round(total / GIB, 2)
        a.gpu_memory = f"{int(total / GIB / a.concurrency)}GiB"
    a.runtime = "process"  # Bench's plumbing reads it
    a.python = launcher_path(a.python)

    b = SweepBench(a)
    b.begin()
    return b.run(b.measure, table)


if __name__ == "__main__":
    sys.exit(main())
