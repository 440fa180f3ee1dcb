#!/usr/bin/env python3
"""The host's queue (issue 31) on one real GPU: three real Isaac Lab 3.0 jobs packed by memory, then a preemption.

A real `isaacd run` (process runtime) with `[supervisor] jobs_dir` and `[queue] min_run_seconds` (default 1); every
job is submitted with `isaacd submit FILE` and trains Isaac-Cartpole-Direct with upstream's own entry point
(`<python> <shim> -m isaaclab train --rl_library rsl_rl ...`, `launcher = [--python]`, pip form), no warm spare,
`gpu_memory = --gpu-memory` (40GiB), device "cuda" placed by the queue (`--device cuda:<its GPU>`). On the H200
`[gpu] source = "nvml"`: 3 x 40 GiB fit on its 140 GiB, a 4th does not. Measured:

  (1) alone    job a (priority 0, preemptible): submit -> placed -> launch -> first iteration, then its training rate
               over --window iterations, from iteration --window-from on
  (2) packed   jobs b and c (the same config, other seeds) submitted: the queue places them beside a; each job's
               rate over --window iterations while all three train (b and c over the same iterations a was
               measured alone at, a over later ones), and its ratio to a's alone rate
  (3) preempt  job urgent (priority 10, --gpu-memory, --urgent-iterations) submitted: it fits only if one of a/b/c
               stops. Submit -> urgent's first iteration, split at each event in the order it happens (the
               supervisor took the file in, the victim preempted, its shim saved, it was requeued, urgent placed,
               launched, first iteration); which job was preempted and the iteration it saved (= the last one it
               logged: nothing lost at the stop)
  (4) complete every job runs to the end: each completed at exactly max_iterations (its last TensorBoard step
               max_iterations - 1, no step past it); the victim's TensorBoard steps over its two runs are exactly
               0..max_iterations-1: iterations lost (missing steps) = 0, and the one step logged twice is the saved
               one (rsl_rl re-runs the iteration it loads: on_policy_runner.py sets current_learning_iteration =
               loaded "iter" and learn() starts range() there), checked against the save

Issue 42 (the GPU handed over at the victim's save): `--until preempt` stops after (3); `--fast-exit off` runs a, b
and c with ISAACD_SHIM_FAST_EXIT=0 (Isaac Lab's own teardown after a stop's save, which isaacd now ends at the save);
(3) then also says when isaacd killed the victim (`stop_saved_kill`), submit -> urgent's launch, saved -> urgent placed
and whether submit -> urgent's first iteration <= its own launch -> first iteration + 1 s (bench/issue42_handover_gpu.sh).

The rate is read from each run's TensorBoard file, as the throughput mode of bench/isaaclab3_recovery.py reads it:
iterations/s from the wall times of the `Perf/total_fps` scalar rsl_rl logs once per iteration (window iterations
over the seconds between the steps that bound it: logging, saves and the shim included), env-steps/s as that times
num_envs x num_steps_per_env (from the run's params/agent.yaml), and the median of rsl_rl's own `Perf/total_fps`
(the throughput mode's figure: collection + learning time only).

Writes --out (JSON, rewritten after every phase so a call cut short still leaves its figures) and prints a table.
A phase that the time left under --deadline cannot hold (estimated from what was measured so far) is skipped, and
so are those after it (each needs the one before).

    python3 bench/queue_h200.py --python python3 --device cuda --out /tmp/q.json --deadline 500     # the H200
    .venv/bin/python bench/queue_h200.py --python .venv-isaaclab3/bin/python --device cpu --num-envs 16 \\
        --max-iterations 30 --window 3 --urgent-iterations 3 --out /tmp/q.json     # a dry run on a CPU host

`--device cpu` trains on the CPU while the queue places the jobs on a scripted H200 (`--gpu-source scripted`: one GPU
of 143771 MiB, as NVML reports an H200, the scripted source's built-in size), as tests/test_queue_e2e.py does; there a
job could finish before the others boot, so a is frozen (SIGSTOP) while b and c boot (`--hold auto`: on for cpu,
off for cuda). Needs isaacd and tensorboard importable by the interpreter that runs this; pytest is not used.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from isaaclab3_recovery import (REPO, TASK, Bench, Deadline, launcher_path, table_footer,  # noqa: E402
                                tb_scalar_events, tb_steps)

PACKED = ("a", "b", "c")
URGENT = "urgent"
SEEDS = {"a": 42, "b": 43, "c": 44, URGENT: 45}
# the watchdogs that judge training, off: this measures the queue, and a small task on an H200 trips duty_cycle,
# a freshly resumed cart-pole's value-loss spike the divergence rollback (the health ones, XID and heat, stay on)
QUIET = ("no_progress", "duty_cycle", "loss_stagnation", "reward_plateau", "divergence")
H200_MEMORY = 143771 * 2**20  # NVML's memory.total of an H200 (the scripted source's built-in GPU)


class QueueBench(Bench):
    """bench/isaaclab3_recovery.py's supervisor plumbing (start, waits under --deadline, save, cleanup), 4 jobs."""

    def __init__(self, a: argparse.Namespace):
        super().__init__(a)
        self.jobs_dir = self.w / "jobs.d"
        self.submit_dir = self.w / "submit"
        self.res.update({"skipped": {}, "jobs": {}})
        self.hold = a.hold == "on" or (a.hold == "auto" and a.device == "cpu")

    def job(self, name: str | None = None) -> dict[str, Any]:
        """One job's status. Without a name (Bench.wait's look for a failure), the first of ours that failed, or {}:
        a failed job ends any wait at once."""
        jobs = self.status()["jobs"]
        if name is not None:
            return next(j for j in jobs if j["name"] == name)
        failed = [j for j in jobs if j["state"] == "failed"]
        return {**failed[0], "state_reason": f"{failed[0]['name']}: {failed[0].get('state_reason')}"} if failed else {}

    def ev(self, name: str, kind: str) -> list[dict[str, Any]]:
        return self.events(kind, job=name)

    # ---- config and job files --------------------------------------------------------------------
    def write_config(self) -> None:
        a = self.a
        lines = ["jobs = []  # every job comes from jobs_dir, through `isaacd submit`",
                 "[supervisor]", f'state_dir = "{self.state}"', f'control_socket = "{self.sock}"',
                 'log_format = "json"', f'jobs_dir = "{self.jobs_dir}"', "[metrics]", "enabled = false",
                 "[gpu]", f'source = "{a.gpu_source}"']
        if a.gpu_source == "scripted":  # one idle H200, as NVML would show it
            script = self.w / "gpu.json"
            script.write_text(json.dumps({"gpus": 1, "defaults": {"memory_total_bytes": H200_MEMORY}}) + "\n")
            lines.append(f'script = "{script}"')
        lines += ["[queue]", f"min_run_seconds = {a.min_run_seconds:g}"]
        self.cfg.write_text("\n".join(lines) + "\n")
        self.jobs_dir.mkdir(mode=0o700, exist_ok=True)
        self.submit_dir.mkdir(exist_ok=True)

    def job_file(self, name: str, priority: int, max_iterations: int) -> Path:
        a = self.a
        env = {"ISAACSIM_ASSET_ROOT": str(Path(a.asset_root).resolve())}
        if os.environ.get("PYTHONPATH"):  # e.g. /tmp/site on the H200: isaaclab and isaacd live there
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        if a.warp_cache:  # one Warp kernel cache for every job: each would compile every kernel again (~2 min)
            env["WARP_CACHE_PATH"] = str(Path(a.warp_cache).expanduser().resolve())
        if a.fast_exit == "off" and name in PACKED:  # issue 42: the victim runs Isaac Lab's own teardown after its save
            env["ISAACD_SHIM_FAST_EXIT"] = "0"
        job: dict[str, Any] = {
            "workflow": "rsl_rl", "launcher": [a.python], "task": TASK, "num_envs": a.num_envs,
            "max_iterations": max_iterations, "save_interval": a.save_interval, "seed": SEEDS[name],
            "device": a.device, "gpu_memory": a.gpu_memory, "priority": priority, "preemptible": True,
            "spare": False, "log_root": str(self.logs / name), "stop_timeout": 90.0,
        }
        lines = ["[[jobs]]", f'name = "{name}"'] + [f"{k} = {json.dumps(v)}" for k, v in job.items()]
        lines += ["[jobs.environment]"] + [f"{k} = {json.dumps(v)}" for k, v in env.items()]
        for w in QUIET:
            lines += [f"[jobs.watchdogs.{w}]", "enabled = false"]
        path = self.submit_dir / f"{name}.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def submit(self, name: str, priority: int, max_iterations: int) -> dict[str, Any]:
        """`isaacd submit FILE`; the time it was called and how long the command took."""
        path = self.job_file(name, priority, max_iterations)
        t0 = time.time()
        r = self.cli("submit", str(path))
        row = {"submitted_at": t0, "cli_seconds": round(time.time() - t0, 3), "cli_rc": r.returncode,
               "cli_out": (r.stdout + r.stderr).strip()[-300:]}
        self.res["jobs"].setdefault(name, {}).update(row)
        self.log(f"isaacd submit {path.name}: rc {r.returncode} {row['cli_out']!r}")
        if r.returncode != 0:
            raise RuntimeError(f"isaacd submit {path} failed ({r.returncode}): {row['cli_out']}")
        return row

    # ---- measuring -------------------------------------------------------------------------------
    def first_iteration(self, name: str, attempt: int) -> dict[str, Any]:
        """The launch of `attempt` and its shim's first_iteration, with their times."""
        s = self.wait(lambda: next((e for e in self.ev(name, "started") if e["attempt"] == attempt), None),
                      self.a.boot_timeout, f"{name}: launch {attempt}", interval=0.1)
        fi = self.wait(lambda: self.shim_event(attempt, "first_iteration", job=name), self.a.boot_timeout,
                       f"{name}: first iteration of attempt {attempt}", interval=0.1)
        return {"started": s, "first_iteration_at": fi["time"]}

    def at_iteration(self, names: dict[str, int], what: str) -> dict[str, dict[str, Any]]:
        """Wait until each job's status shows at least its iteration; their status rows."""
        def ready() -> dict[str, dict[str, Any]] | None:
            jobs = {j["name"]: j for j in self.status()["jobs"]}
            ok = all(jobs[n]["state"] == "running" and jobs[n]["iteration"] is not None and jobs[n]["iteration"] >= it
                     for n, it in names.items())
            return jobs if ok else None
        return self.wait(ready, self.a.boot_timeout + max(names.values()) * self.a.iteration_timeout, what,
                         interval=0.1)

    def rate(self, name: str, lo: int, hi: int) -> dict[str, Any]:
        """The job's training rate over iterations lo..hi of its current run (TensorBoard wall times)."""
        run = self.run_dirs(name)[-1]
        perf = tb_perf(run)
        if lo not in perf or hi not in perf:
            raise RuntimeError(f"{name}: TensorBoard of {run} lacks step {lo} or {hi} (has {min(perf, default=None)}.."
                               f"{max(perf, default=None)})")
        seconds = perf[hi][0] - perf[lo][0]
        its = (hi - lo) / seconds
        spe = steps_per_env(run)
        fps = [perf[s][1] for s in range(lo + 1, hi + 1) if s in perf]
        return {"iterations": [lo, hi], "seconds": round(seconds, 3), "iterations_per_s": round(its, 4),
                "env_steps_per_s": round(its * self.a.num_envs * spe, 1) if spe else None,
                "num_steps_per_env": spe, "median_total_fps": round(statistics.median(fps), 1) if fps else None,
                "run_dir": str(run)}

    def placement(self, name: str) -> list[int]:
        return list((self.job(name).get("queue") or {}).get("placement") or [])

    # ---- the phases ------------------------------------------------------------------------------
    def phase_alone(self) -> None:
        a = self.a
        row: dict[str, Any] = {}
        self.res["alone"] = row
        sub = self.submit("a", 0, a.max_iterations)
        placed = self.wait(lambda: self.ev("a", "placed"), 60, "a placed", interval=0.1)[0]
        boot = self.first_iteration("a", 1)
        row.update({"gpus": placed["gpus"], "submit_to_placed_s": round(placed["time"] - sub["submitted_at"], 2),
                    "launch_to_first_iteration_s": round(boot["first_iteration_at"] - boot["started"]["time"], 2),
                    "submit_to_first_iteration_s": round(boot["first_iteration_at"] - sub["submitted_at"], 2),
                    "argv": boot["started"]["argv"]})
        self.log(f"a placed on GPU {placed['gpus']}, first iteration {row['launch_to_first_iteration_s']} s after "
                 f"its launch ({row['submit_to_first_iteration_s']} s after the submit)")
        lo, hi = a.window_from, a.window_from + a.window
        self.at_iteration({"a": hi}, f"a alone: iteration {hi}")
        row["rate"] = self.rate("a", lo, hi)
        self.log(f"alone: {row['rate']}")

    def phase_packed(self) -> None:
        a = self.a
        alone = self.res["alone"]
        self.need("packed", alone["launch_to_first_iteration_s"]
                  + (a.window_from + a.window) * self.seconds_per_iteration(alone) * 3 + 15)
        row: dict[str, Any] = {"held": self.hold}
        self.res["packed"] = row
        trainer = self.job("a")
        held_pid = None
        if self.hold:  # a would finish before the others boot on a slow host: frozen while they do
            held_pid = trainer["pid"]
            os.kill(held_pid, signal.SIGSTOP)
            row["a_held_at_iteration"] = trainer["iteration"]
            self.log(f"a (pid {held_pid}) frozen at iteration {trainer['iteration']} while b and c boot")
        try:
            subs = {n: self.submit(n, 0, a.max_iterations) for n in ("b", "c")}
            for n in ("b", "c"):
                placed = self.wait(lambda n=n: self.ev(n, "placed"), 60, f"{n} placed", interval=0.1)[0]
                boot = self.first_iteration(n, 1)
                row[n] = {"gpus": placed["gpus"],
                          "submit_to_placed_s": round(placed["time"] - subs[n]["submitted_at"], 2),
                          "launch_to_first_iteration_s": round(boot["first_iteration_at"] - boot["started"]["time"], 2)}
                self.log(f"{n} placed on GPU {placed['gpus']}, first iteration "
                         f"{row[n]['launch_to_first_iteration_s']} s after its launch")
        finally:
            if held_pid is not None:
                os.kill(held_pid, signal.SIGCONT)
                row["a_released_at"] = time.time()
        # the window opens once b and c are past their first iterations (as a's alone window) and a trains again
        after_hold = (row.get("a_held_at_iteration") or 0) + 1
        jobs = self.at_iteration({"a": after_hold, "b": a.window_from, "c": a.window_from},
                                 "a, b and c all training")
        t0 = time.time()
        start = {n: jobs[n]["iteration"] + 1 for n in PACKED}
        row["window_opened_at"] = t0
        self.log(f"packed window from iterations {start}")
        end = self.at_iteration({n: start[n] + a.window for n in PACKED}, f"packed: {a.window} iterations each")
        row["gpus_of"] = {n: end[n]["queue"]["placement"] for n in PACKED}
        row["one_gpu"] = len({tuple(g) for g in row["gpus_of"].values()}) == 1
        row["gpu_status"] = self.status().get("gpus")
        base = alone["rate"]
        for n in PACKED:
            r = self.rate(n, start[n], start[n] + a.window)
            r["x_alone_iterations_per_s"] = round(r["iterations_per_s"] / base["iterations_per_s"], 3)
            if r["median_total_fps"] and base["median_total_fps"]:
                r["x_alone_total_fps"] = round(r["median_total_fps"] / base["median_total_fps"], 3)
            row.setdefault(n, {})["rate"] = r
            self.log(f"packed {n}: {r}")

    def phase_preempt(self) -> None:
        a = self.a
        alone = self.res["alone"]
        packed_it = max(self.seconds_per_iteration(self.res["packed"][n]) for n in PACKED)
        self.need("preempt", 2 * packed_it + alone["launch_to_first_iteration_s"] * 1.5 + 15)
        row: dict[str, Any] = {}
        self.res["preempt"] = row
        row["iterations_at_submit"] = {n: self.job(n)["iteration"] for n in PACKED}
        sub = self.submit(URGENT, 10, a.urgent_iterations)
        t0 = sub["submitted_at"]

        def preempted() -> tuple[str, dict[str, Any]] | None:
            hits = [(n, e) for n in PACKED for e in self.ev(n, "preempted")]
            return hits[0] if hits else None
        victim, pre = self.wait(preempted, 60 + 3 * packed_it, "a preemption", interval=0.05)
        row["victim"], row["preempted_by"], row["reason"] = victim, pre.get("by"), pre.get("reason")
        self.log(f"{victim} preempted by {pre.get('by')}: {pre.get('reason')}")
        attempt = self.ev(victim, "started")[-1]["attempt"]
        self.wait(lambda: self.job(victim)["state"] == "queued", a.stop_wait, f"{victim} saved and back in the queue",
                  interval=0.05)
        saved = self.ev(victim, "trainer_saved_on_stop")[-1]
        exited = [e for e in self.ev(victim, "exited") if e.get("attempt") == attempt]
        requeued = self.ev(victim, "requeued")[-1]
        killed = self.ev(victim, "stop_saved_kill")  # issue 42: isaacd ended it at its save (its cleanup skipped)
        shim_stop = self.shim_event(attempt, "stopped", job=victim)
        first_run = self.run_dirs(victim)[0]
        logged = tb_steps(first_run)
        row.update({"saved_iteration": saved.get("iteration"), "checkpoint": saved.get("checkpoint"),
                    "last_step_logged": logged[-1] if logged else None, "exit_code": exited[-1].get("code") if exited
                    else None, "others": {n: self.job(n)["state"] for n in PACKED if n != victim},
                    "exit": exited[-1].get("description") if exited else None, "killed_at_save": bool(killed),
                    "cleanup": (shim_stop or {}).get("cleanup"), "quick_exit": (shim_stop or {}).get("exit_now")})
        row["saved_is_last_logged"] = row["saved_iteration"] == row["last_step_logged"]
        placed = self.wait(lambda: self.ev(URGENT, "placed"), 60, "urgent placed", interval=0.05)[0]
        boot = self.first_iteration(URGENT, 1)
        marks = [("urgent queued (the supervisor took the file in)", self.ev(URGENT, "queued")[0]["time"]),
                 (f"{victim} preempted (the queue's decision)", pre["time"]),
                 (f"{victim} saved (its shim: checkpoint on disk)", shim_stop["time"] if shim_stop else None),
                 (f"{victim} killed at its save (issue 42: its script's cleanup skipped)",
                  killed[-1]["time"] if killed else None),
                 (f"{victim}'s trainer exited ({row['exit']})", exited[-1]["time"] if exited else None),
                 (f"{victim} requeued (its GPU memory given back)", requeued["time"]),
                 (f"urgent placed on GPU {placed['gpus']}", placed["time"]),
                 ("urgent launched", boot["started"]["time"]),
                 ("urgent's first iteration", boot["first_iteration_at"])]
        marks.sort(key=lambda m: m[1] if m[1] is not None else float("inf"))  # as it happened
        row["timeline_after_submit_s"] = [[what, round(t - t0, 2) if t else None] for what, t in marks]
        row["submit_to_first_iteration_s"] = round(boot["first_iteration_at"] - t0, 2)
        row["submit_to_placed_s"] = round(placed["time"] - t0, 2)
        row["placed_to_first_iteration_s"] = round(boot["first_iteration_at"] - placed["time"], 2)
        row["urgent_gpus"] = placed["gpus"]
        # issue 42's goal: submit -> first iteration <= urgent's own launch -> first iteration + 1 s
        row["launch_to_first_iteration_s"] = round(boot["first_iteration_at"] - boot["started"]["time"], 2)
        row["submit_to_launch_s"] = round(boot["started"]["time"] - t0, 2)
        row["saved_to_placed_s"] = round(placed["time"] - shim_stop["time"], 2) if shim_stop else None
        row["goal_met"] = row["submit_to_first_iteration_s"] <= row["launch_to_first_iteration_s"] + 1.0
        self.log(f"urgent's first iteration {row['submit_to_first_iteration_s']} s after its submit; {victim} saved "
                 f"iteration {row['saved_iteration']} (last logged {row['last_step_logged']})")

    def phase_complete(self) -> None:
        a = self.a
        packed_it = max(self.seconds_per_iteration(self.res["packed"][n]) for n in PACKED)
        left = {n: a.max_iterations - 1 - (self.job(n)["iteration"] or 0) for n in PACKED}
        left[self.res["preempt"]["victim"]] = a.max_iterations - (self.res["preempt"]["saved_iteration"] or 0)
        self.need("complete", max(left.values()) * packed_it + self.res["alone"]["launch_to_first_iteration_s"] + 20)
        row: dict[str, Any] = {}
        self.res["complete"] = row
        names = (*PACKED, URGENT)
        self.wait(lambda: all(self.job(n)["state"] in ("completed", "failed", "stopped") for n in names),
                  a.boot_timeout + a.max_iterations * a.iteration_timeout, "every job done", interval=0.5)
        victim = self.res["preempt"]["victim"]
        for n in names:
            j = self.job(n)
            total = a.urgent_iterations if n == URGENT else a.max_iterations
            runs = [tb_steps(d) for d in self.run_dirs(n)]
            union = set().union(*map(set, runs)) if runs else set()
            twice = sorted(s for s in union if sum(s in r for r in runs) > 1)
            row[n] = {"state": j["state"], "state_reason": j.get("state_reason"), "final_iteration": j["iteration"],
                      "max_iterations": total, "restarts": j["restarts"],
                      "preemptions": (j.get("queue") or {}).get("preemptions"),
                      "runs": [[r[0], r[-1], len(r)] if r else None for r in runs],
                      "iterations_lost": len(set(range(total)) - union),
                      "steps_past_total": sorted(union - set(range(total))),
                      "steps_logged_twice": twice}
            row[n]["exact"] = (j["state"] == "completed" and j["iteration"] == total - 1
                               and not row[n]["iterations_lost"] and not row[n]["steps_past_total"])
        v = row[victim]
        starts = self.ev(victim, "started")
        saved = self.res["preempt"]["saved_iteration"]
        resumed = starts[-1] if len(starts) > 1 else {}
        argv = resumed.get("argv") or []
        placed = self.ev(victim, "placed")
        v.update({"resume_from_iteration": (resumed.get("resume_from") or {}).get("iteration"),
                  "resume_argv_max_iterations": argv[argv.index("--max_iterations") + 1]
                  if "--max_iterations" in argv else None,
                  "resumed_on_gpus": placed[-1]["gpus"] if len(placed) > 1 else None,
                  "waited_in_queue_s": placed[-1].get("waited_seconds") if len(placed) > 1 else None})
        if len(starts) > 1:
            fi = self.shim_event(resumed["attempt"], "first_iteration", job=victim)
            v["resume_placed_to_first_iteration_s"] = round(fi["time"] - placed[-1]["time"], 2) if fi else None
        # the only repeat allowed: the saved step, which the resumed run trains again from its checkpoint
        v["victim_ok"] = bool(v["exact"] and len(starts) == 2 and v["resume_from_iteration"] == saved
                              and v["runs"][-1] and v["runs"][-1][0] == saved and v["steps_logged_twice"] == [saved]
                              and v["restarts"] == 0 and v["preemptions"] == 1)
        self.log(f"complete: {json.dumps(row)}")

    # ---- time --------------------------------------------------------------------------------------
    @staticmethod
    def seconds_per_iteration(row: dict[str, Any]) -> float:
        return 1.0 / row["rate"]["iterations_per_s"]

    def need(self, phase: str, seconds: float) -> None:
        left = self.deadline - time.time()
        if left < seconds:
            self.res["skipped"][phase] = f"{left:.0f} s left under --deadline, it needs about {seconds:.0f} s"
            raise Skip(f"{phase}: {self.res['skipped'][phase]}")

    def summarize(self) -> None:
        self.res["load_avg_end"] = os.getloadavg()
        c = self.res.get("complete") or {}
        p = self.res.get("preempt") or {}
        victim = p.get("victim")
        until_preempt = self.a.until == "preempt"  # issue 42's runs: the hand-over only, no job to the end
        self.res["ok"] = bool(not self.res["errors"] and not [k for k in self.res["skipped"]
                                                              if not (until_preempt and k == "complete")]
                              and (self.res.get("packed") or {}).get("one_gpu") and p.get("saved_is_last_logged")
                              and (p.get("exit_code") == 0 or p.get("killed_at_save"))
                              and (until_preempt or all((c.get(n) or {}).get("exact") for n in (*PACKED, URGENT))
                                   and (c.get(victim) or {}).get("victim_ok")))


class Skip(Exception):
    pass


def tb_perf(run_dir: Path) -> dict[int, tuple[float, float]]:
    """step -> (wall time, value) of rsl_rl's Perf/total_fps, which its logger adds once per iteration."""
    return {e.step: (e.wall_time, e.value) for e in tb_scalar_events(run_dir, "Perf/total_fps")}


def steps_per_env(run_dir: Path) -> int | None:
    """The agent's num_steps_per_env, from the params/agent.yaml Isaac Lab's train script writes into the run dir."""
    try:
        m = re.search(r"^num_steps_per_env:\s*(\d+)", (run_dir / "params" / "agent.yaml").read_text(), re.M)
    except OSError:
        return None
    return int(m.group(1)) if m else None


def table(res: dict[str, Any]) -> str:
    a, env = res["args"], res["environment"]

    def rate(r: dict[str, Any] | None) -> str:
        if not r:
            return "-"
        return (f"it {r['iterations'][0]:>4}..{r['iterations'][1]:<4} {r['iterations_per_s']:>8.3f} it/s "
                f"{r['env_steps_per_s'] or 0:>10.0f} env-steps/s  total_fps {r['median_total_fps'] or 0:>9.0f}")

    L = [f"isaacd's queue on one GPU, real Isaac Lab {env.get('isaaclab')} {TASK} (rsl_rl), process runtime, device "
         f"{a['device']}, [gpu] source {a['gpu_source']}, {a['num_envs']} envs, max_iterations {a['max_iterations']}, "
         f"gpu_memory {a['gpu_memory']} each, window {a['window']} iterations from {a['window_from']}",
         f"  python {env.get('python')} torch {env.get('torch')} gpu {env.get('gpu')} isaacd {env.get('isaacd_rev')}"]
    al = res.get("alone") or {}
    L.append(f"(1) alone   a on GPU {al.get('gpus')}: submit -> placed {al.get('submit_to_placed_s')} s, launch -> "
             f"first iteration {al.get('launch_to_first_iteration_s')} s (submit -> "
             f"{al.get('submit_to_first_iteration_s')} s)")
    L.append(f"            a  {rate(al.get('rate'))}")
    pk = res.get("packed") or {}
    if pk:
        L.append(f"(2) packed  a, b, c on GPU(s) {pk.get('gpus_of')} (one GPU: {pk.get('one_gpu')}; a frozen while b "
                 f"and c booted: {pk.get('held')}); b, c launch -> first iteration "
                 f"{(pk.get('b') or {}).get('launch_to_first_iteration_s')} / "
                 f"{(pk.get('c') or {}).get('launch_to_first_iteration_s')} s")
        for n in PACKED:
            r = (pk.get(n) or {}).get("rate")
            x = (f"  {r.get('x_alone_iterations_per_s')} x alone's it/s, {r.get('x_alone_total_fps')} x its total_fps"
                 if r else "")
            L.append(f"            {n}  {rate(r)}{x}")
        for d in (pk.get("gpu_status") or {}).get("devices") or []:  # NVML's view (a scripted GPU: its script)
            L.append(f"            GPU {d.get('index')} ({d.get('model')}): {(d.get('memory_used_bytes') or 0) / 2**30:.1f} "
                     f"of {(d.get('memory_total_bytes') or 0) / 2**30:.1f} GiB used, utilisation "
                     f"{d.get('utilization_ratio')}, jobs {d.get('assigned')}")
    pr = res.get("preempt") or {}
    if pr:
        L.append(f"(3) preempt urgent (priority 10) submitted at iterations {pr.get('iterations_at_submit')}: victim "
                 f"{pr.get('victim')}, saved iteration {pr.get('saved_iteration')} (= its last logged step: "
                 f"{pr.get('saved_is_last_logged')}), exit: {pr.get('exit')}; its shim's quick exit: "
                 f"{pr.get('quick_exit')} ({pr.get('cleanup') or 'no cleanup'}); killed at its save by isaacd: "
                 f"{pr.get('killed_at_save')}")
        L.append(f"            issue 42: submit -> urgent launched {pr.get('submit_to_launch_s')} s, urgent's launch -> "
                 f"first iteration {pr.get('launch_to_first_iteration_s')} s; victim saved -> urgent placed "
                 f"{pr.get('saved_to_placed_s')} s; goal (submit -> first iteration <= launch + 1 s) met: "
                 f"{pr.get('goal_met')}")
        L.append(f"            submit -> urgent's first iteration {pr.get('submit_to_first_iteration_s')} s "
                 f"(-> placed {pr.get('submit_to_placed_s')} s, placed -> first iteration "
                 f"{pr.get('placed_to_first_iteration_s')} s):")
        for what, t in pr.get("timeline_after_submit_s", []):
            L.append(f"              +{t!s:>7} s  {what}")
    co = res.get("complete") or {}
    if co:
        L.append("(4) complete  job     state      final it  exact  lost  runs [first..last]  logged twice")
        for n in (*PACKED, URGENT):
            r = co.get(n) or {}
            runs = " ".join(f"[{x[0]}..{x[1]}]" for x in r.get("runs", []) if x)
            L.append(f"              {n:<7} {r.get('state')!s:<10} {r.get('final_iteration')!s:>8}  "
                     f"{r.get('exact')!s:<5}"
                     f"  {r.get('iterations_lost')!s:>4}  {runs:<18}  {r.get('steps_logged_twice')}")
        v = co.get(pr.get("victim")) or {}
        L.append(f"            victim {pr.get('victim')}: resumed from iteration {v.get('resume_from_iteration')} "
                 f"(--max_iterations {v.get('resume_argv_max_iterations')}) on GPU {v.get('resumed_on_gpus')} after "
                 f"{v.get('waited_in_queue_s')} s in the queue, first iteration "
                 f"{v.get('resume_placed_to_first_iteration_s')} s after placed; iterations lost "
                 f"{v.get('iterations_lost')}, the saved step trained twice (rsl_rl resumes at the loaded iteration): "
                 f"ok {v.get('victim_ok')}")
    for phase, why in res.get("skipped", {}).items():
        L.append(f"SKIPPED {phase}: {why}")
    return "\n".join(L + table_footer(res))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True, help="the interpreter that has isaaclab (the jobs' launcher)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="the jobs' device: cuda (placed by the queue) or cpu (trains on the CPU, placed all the same)")
    ap.add_argument("--num-envs", type=int, default=None, help="default 1024 on cuda, 16 on cpu")
    ap.add_argument("--max-iterations", type=int, default=None,
                    help="a, b and c (default 500 on cuda, 30 on cpu): a must still train when b and c are measured")
    ap.add_argument("--window", type=int, default=None, help="iterations per rate window (default 40 cuda, 3 cpu)")
    ap.add_argument("--window-from", type=int, default=5, help="a run's first iteration measured (warm-up before)")
    ap.add_argument("--urgent-iterations", type=int, default=20, help="urgent's max_iterations")
    ap.add_argument("--save-interval", type=int, default=25)
    ap.add_argument("--gpu-memory", default="40GiB", help="each job's gpu_memory")
    ap.add_argument("--min-run-seconds", type=float, default=1.0, help="[queue] min_run_seconds")
    ap.add_argument("--gpu-source", choices=["nvml", "scripted"], default=None,
                    help="[gpu] source (default nvml on cuda; scripted on cpu: one H200, 143771 MiB)")
    ap.add_argument("--hold", choices=["auto", "on", "off"], default="auto",
                    help="freeze a (SIGSTOP) while b and c boot (auto: on for cpu, where a would outrun them)")
    ap.add_argument("--asset-root", default=str(REPO / "tests/isaaclab3/asset_root"))
    ap.add_argument("--warp-cache", default="~/.cache/warp", help="one Warp kernel cache for every job ('' for none)")
    ap.add_argument("--boot-timeout", type=float, default=400.0,
                    help="seconds a launch may take to its first iteration")
    ap.add_argument("--iteration-timeout", type=float, default=30.0, help="seconds one iteration may take")
    ap.add_argument("--stop-wait", type=float, default=150.0)
    ap.add_argument("--deadline", type=float, default=0.0, help="stop waiting after this many seconds in all (0: none)")
    ap.add_argument("--workdir", default=None, help="where the run's temp dir goes (kept afterwards)")
    ap.add_argument("--out", required=True, help="results JSON")
    ap.add_argument("--fast-exit", choices=["on", "off"], default="on",
                    help="off: a, b and c (the victims) run with ISAACD_SHIM_FAST_EXIT=0, Isaac Lab's own teardown "
                         "after a stop's save (issue 42: isaacd kills it at the save instead)")
    ap.add_argument("--until", choices=["preempt", "complete"], default="complete",
                    help="preempt: stop after phase (3), no job trained to the end (issue 42's hand-over runs)")
    a = ap.parse_args(argv)
    cuda = a.device == "cuda"
    a.num_envs = a.num_envs or (1024 if cuda else 16)
    a.max_iterations = a.max_iterations or (500 if cuda else 30)
    a.window = a.window or (40 if cuda else 3)
    a.gpu_source = a.gpu_source or ("nvml" if cuda else "scripted")
    a.runtime = "process"  # Bench's plumbing reads it
    if a.window_from + a.window >= a.max_iterations or a.urgent_iterations < 1:
        ap.error("--window-from + --window must stay under --max-iterations, and --urgent-iterations be 1 or more")
    a.python = launcher_path(a.python)

    b = QueueBench(a)
    b.begin()
    phases: list[tuple[str, Callable[[], None]]] = [("alone", b.phase_alone), ("packed", b.phase_packed),
                                                    ("preempt", b.phase_preempt), ("complete", b.phase_complete)]
    if a.until == "preempt":
        phases = phases[:3]
        b.res["skipped"]["complete"] = "--until preempt"

    def body() -> None:
        for i, (name, fn) in enumerate(phases):
            try:
                fn()
            except Skip as exc:
                b.log(f"SKIP {exc} (and the phases after it)")
                b.res["skipped"].update({later: f"after {name}" for later, _ in phases[i + 1:]})
                break
            except (Deadline, RuntimeError, OSError, StopIteration, KeyError, IndexError, TypeError) as exc:
                b.res["errors"].append(f"{name}: {type(exc).__name__}: {exc}")
                b.log(f"{name} FAILED: {exc}")
                break  # each phase needs the one before
            finally:
                b.save()
        try:  # every job's events, for the record
            b.res["events"] = {n: b.events(job=n) for n in (*PACKED, URGENT)
                               if n in {j["name"] for j in b.status()["jobs"]}}
        except Exception:  # noqa: BLE001 - a description, not a figure
            pass
    return b.run(body, table)


if __name__ == "__main__":
    sys.exit(main())
