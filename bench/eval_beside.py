#!/usr/bin/env python3
"""Issue 41's benchmark: training throughput with checkpoint evaluations running beside it, against none, and the time
from a checkpoint's write to its evaluation's result.

One real `isaacd run` trains ONE job for a fixed number of iterations (`--iterations`, never reached: the bench stops
the job after its last window). Its `[jobs.eval]` table is switched between windows of `--window` seconds by
rewriting the host config and `isaacd reload` (the eval keeper reads the job's config in force each tick; the trainer
is not restarted: a job's keys apply at its next start, [jobs.eval] at the keeper's next tick), arms alternating:

    none  no [jobs.eval] (a running evaluation is killed: eval_stopped)
    gpu   [jobs.eval] gpu_memory = --gpu-memory: evaluations on the job's own GPU (NVML shows the room)
    cpu   [jobs.eval] device = "cpu" (a CPU job: [jobs.eval] with no device)

in the order `--arms` x `--repeats`, a `none` window before each eval window and one more at the end (each eval
window has a `none` window on both sides). An arm is `gpu` or `cpu`, optionally with its `every`: `gpu4` evaluates
every 4th checkpoint (plain `gpu`: `every = 1`, [jobs.eval]'s default, each checkpoint the keeper can reach; the
design's "newest 3 when behind" skips the others: counted). At `every = 1` an evaluation runs most of the time (its
duty is printed): the worst case. A sparser arm needs windows long enough to hold its evaluations
(`--arm-window gpu4=70`): each window's duty says what share of it an evaluation ran.

Per window, from the job's own TensorBoard (`--tag`, rsl_rl's Perf/total_fps, written at each iteration's end) over
the points whose wall time lies in [switch + --settle, next switch] (the boot is before the first window):
iterations/s (steps / wall time between the first and last point), the median of the tag itself (rsl_rl's env-steps
per second of collection + learning), each iteration's time split by whether an evaluation ran at its midpoint
(eval_started -> eval_done/failed/stopped in the journal) and by what the evaluation was doing then (its start, its
CPU part: boot or CPU stepping, its GPU part: from its pid's first NVML SM sample on), host CPU busy (cores, /proc/stat), the trainer's and the
evaluations' CPU, and on a GPU the GPU's utilisation and the processes' SM shares (NVML). Each eval window's ratio is
against the mean of the `none` windows on either side. Per evaluated checkpoint: result JSON mtime - checkpoint
mtime (the goal: <= 2 minutes for the cart-pole), with the result's own duration_seconds, device, video and
video_reason. The JSON keeps the 0.5 s samples, the journal and every iteration's wall time, for later analysis.

    nice -n 10 .venv/bin/python bench/eval_beside.py --builtin --arms cpu --repeats 3        # CPU host, built-in
    nice -n 10 .venv/bin/python bench/eval_beside.py --isaaclab --arms cpu --repeats 3 \\
        --num-envs 16 --episodes 16 --window 90 --save-interval 10                          # CPU, Isaac Lab 3.0
    python3 bench/eval_beside.py --isaaclab --python python3 --device cuda:0 --gpu-source nvml \\
        --arms gpu cpu --repeats 3 --out /tmp/x                                             # the GPU (.sh wrapper)

`--render RESULT.json ...` prints the report of saved runs again.
Results: `--out NAME` -> bench/results/NAME.txt (earlier runs kept above) and NAME.json (this run), or a path.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

from helpers import SupervisorProc, wait_for  # noqa: E402

RESULTS = HERE / "results"
JOB = "cp"
IL3_VENV = Path(os.environ.get("ISAACLAB3_VENV", REPO / ".venv-isaaclab3"))
ASSET_ROOT = REPO / "tests" / "isaaclab3" / "asset_root"
QUIET = ("no_progress", "duty_cycle", "loss_stagnation", "reward_plateau", "divergence")  # judge training: off
TERMINAL = ("eval_done", "eval_failed", "eval_stopped")


def tb_points(run_dir: Path, tag: str) -> dict[int, tuple[float, float]]:
    """{step: (value, wall_time)} of `tag` in the run dir's own event files (not eval/'s)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util.tensor_util import make_ndarray

    out: dict[int, tuple[float, float]] = {}
    for f in sorted(run_dir.glob("events.out.tfevents.*")):
        for ev in EventFileLoader(str(f)).Load():
            for v in ev.summary.value:
                if v.tag == tag:
                    val = float(make_ndarray(v.tensor)) if v.HasField("tensor") else v.simple_value
                    out[ev.step] = (val, ev.wall_time)
    return out


# ---- the host config, one per arm ------------------------------------------------------------------------------
ARM = re.compile(r"(gpu|cpu|video|none)(\d*)(?:@(0?\.\d+|0))?")


def arm_parts(arm: str) -> tuple[str, int]:
    """'gpu4' -> ('gpu', 4): where the evaluations run and their `every`; 'gpu' -> ('gpu', 1); 'cpu@0.01' -> ('cpu',
    1) with max_training_cost = 0.01 (arm_cost)."""
    m = ARM.fullmatch(arm)
    if not m:
        raise ValueError(f"arm {arm!r}: gpu, cpu, or either with its every (gpu4) and a max_training_cost (cpu@0.01)")
    return m.group(1), int(m.group(2) or 1)


def arm_cost(arm: str) -> float | None:
    """The arm's [jobs.eval] max_training_cost ('gpu@0.01'), or None: isaacd's default (0.5 % on the GPU, 0 on the CPU)."""
    m = ARM.fullmatch(arm)
    return float(m.group(3)) if m and m.group(3) is not None else None


def paced(arm: str) -> bool:
    """Whether the arm's evaluations are paced by max_training_cost: a GPU arm unless @0, a CPU arm only with @x > 0."""
    where, _ = arm_parts(arm)
    cost = arm_cost(arm)
    return (where in ("gpu", "video") and cost is None) or bool(cost)


def cycle_end(status: dict[str, Any], done_at_switch: int, cycles: int) -> float | None:
    """With --cycles N, a paced window's end: once N evaluations have finished in it and the keeper says when the next
    may start (status' evals.paced_until), that moment, so that the window holds whole cycles of the pacing (an
    evaluation and its pause). A shorter window holding one evaluation overweights it: on the H100 of session 23,
    62 s windows at 1 % measured 0.986 x, one ~81 s cycle 0.990 x by the keeper's own measure."""
    ev = status.get("evals") or {}
    if (ev.get("done") or 0) - done_at_switch < cycles or ev.get("running") is not None:
        return None
    return ev.get("paced_until")


def window_most(a: argparse.Namespace, arm: str) -> float:
    """The longest the arm's window may run: its --arm-window (or --window), or with --cycles its --cycle-limit."""
    fixed = a.arm_window.get(arm, a.window)
    return max(fixed, a.cycle_limit) if a.cycles and paced(arm) else fixed


def config_text(a: argparse.Namespace, d: Path, arm: str) -> str:
    lines = ["[supervisor]", f'state_dir = "{d / "state"}"', f'control_socket = "{d / "isaacd.sock"}"',
             'log_format = "json"', "[metrics]", "enabled = false", "[gpu]", f'source = "{a.gpu_source}"', "",
             "[[jobs]]", f'name = "{JOB}"']
    job: dict[str, Any] = {"num_envs": a.num_envs, "max_iterations": a.iterations, "save_interval": a.save_interval,
                           "seed": 42, "device": a.device, "spare": False, "log_root": str(d / "logs"),
                           "stop_timeout": 60.0}
    env: dict[str, str] = {}
    if a.isaaclab:
        job |= {"workflow": "rsl_rl", "task": "Isaac-Cartpole-Direct", "launcher": [a.python]}
        env = {"ISAACSIM_ASSET_ROOT": str(ASSET_ROOT), "WARP_CACHE_PATH": str(Path.home() / ".cache" / "warp")}
        if os.environ.get("PYTHONPATH"):  # the device machine: isaaclab and isaacd in /tmp/site
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    if a.extra_args:
        job["extra_args"] = a.extra_args
    if a.omp_threads:
        env["OMP_NUM_THREADS"] = str(a.omp_threads)
    lines += [f"{k} = {json.dumps(v)}" for k, v in job.items()]
    if env:
        lines += ["[jobs.environment]"] + [f"{k} = {json.dumps(v)}" for k, v in env.items()]
    where, every = arm_parts(arm)
    if where != "none":
        ev: dict[str, Any] = {"every": every, "episodes": a.episodes, "num_envs": a.eval_num_envs or a.episodes,
                              "seed": 42, "video": a.video, "video_length": a.video_length,
                              "deadline_seconds": a.eval_deadline}
        if (cost := arm_cost(arm)) is not None:
            ev["max_training_cost"] = cost
        if where in ("gpu", "video"):
            ev |= {"gpu_memory": a.gpu_memory, "video": where == "video" or a.video}
        elif a.device != "cpu":
            ev |= {"device": "cpu"}
        lines += ["[jobs.eval]"] + [f"{k} = {json.dumps(v)}" for k, v in ev.items()]
    for w in QUIET:
        lines += [f"[jobs.watchdogs.{w}]", "enabled = false"]
    return "\n".join(lines) + "\n"


def pin(pid: int, cpus: str) -> list[int]:
    """`--pin-trainer CPUS`: every thread of the trainer's process tree on CPUS, once it trains (a measurement choice,
    not isaacd's: on a VM whose vCPUs run at different speeds, an unpinned trainer's main thread migrates between
    them, and its speed with it, window to window, by more than the 1 % the goal asks). Done from outside, after the
    start, so that the evaluations (started with the job's own launcher) are not pinned with it: each keeps off the
    trainer's CPUs by itself (trainer/shim_eval.py). Threads made later inherit their maker's set. The threads pinned."""
    want = {int(c) for c in cpus.split(",")}
    done = []
    for p in _tree(pid):
        for tid in os.listdir(f"/proc/{p}/task") if Path(f"/proc/{p}/task").is_dir() else []:
            try:
                os.sched_setaffinity(int(tid), want)
                done.append(int(tid))
            except OSError:
                pass
    return done


# ---- samples beside the run: host CPU, the trainer's and the evaluation's CPU, NVML --------------------------------
def _ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = stat[stat.rindex(")") + 2:].split()
    return int(f[11]) + int(f[12])  # utime stime


def _cpu_of(pid: int | None) -> int | None:
    """The CPU a process's main thread last ran on (/proc/PID/stat field 39)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[36])
    except (OSError, ValueError, IndexError, TypeError):
        return None


def smt_siblings() -> dict[int, list[int]]:
    """{cpu: its core's hardware threads} from sysfs (empty where absent)."""
    out: dict[int, list[int]] = {}
    for cpu in sorted(os.sched_getaffinity(0)):
        try:
            text = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text()
        except OSError:
            continue
        out[cpu] = sorted({c for part in text.strip().split(",") if part
                           for c in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)})
    return out


def _tree(pid: int) -> list[int]:
    """pid and its descendants (the shim's trainer may be a child)."""
    kids: dict[int, list[int]] = {}
    for e in os.scandir("/proc"):
        if e.name.isdigit():
            try:
                s = Path(f"/proc/{e.name}/stat").read_text()
                kids.setdefault(int(s[s.rindex(")") + 2:].split()[1]), []).append(int(e.name))
            except (OSError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


class Sampler:
    """Every `interval` s: (wall, host busy cores, trainer cores, eval cores, GPU util %, {pid: sm %})."""

    def __init__(self, interval: float, nvml: bool):
        self.interval, self.rows = interval, []
        self.trainer_pid: int | None = None
        self.eval_pid: int | None = None
        self._stop = threading.Event()
        self._h = None
        if nvml:
            try:
                import pynvml
                pynvml.nvmlInit()
                self._nv, self._h = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
            except Exception as exc:  # noqa: BLE001 - a figure less
                print(f"NVML sampler off: {exc}", flush=True)
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    @staticmethod
    def _cpu() -> tuple[int, int, int]:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(f) - f[3] - f[4], sum(f), f[7]  # busy, total (idle and iowait out), steal (the hypervisor's)

    @staticmethod
    def _waited(pid: int | None) -> int | None:
        """Nanoseconds the trainer's main thread has waited on a run queue (/proc/PID/schedstat's second field): what
        another process on its CPU costs it, whatever the window's drift."""
        try:
            return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) if pid else None
        except (OSError, ValueError, IndexError):
            return None

    @staticmethod
    def _procs(pid: int | None) -> dict[int, int]:
        return {p: t for p in _tree(pid) if (t := _ticks(p)) is not None} if pid else {}

    @staticmethod
    def _delta(now: dict[int, int], before: dict[int, int]) -> int:
        """CPU ticks the tree spent since `before` (a process new since then: its whole life so far)."""
        return sum(t - before.get(p, 0) for p, t in now.items())

    def _loop(self) -> None:
        clk = os.sysconf("SC_CLK_TCK")
        ncpu = os.cpu_count() or 1
        t_prev, (b_prev, tot_prev, st_prev) = time.time(), self._cpu()
        tr_prev, ev_prev = self._procs(self.trainer_pid), self._procs(self.eval_pid)
        w_prev = self._waited(self.trainer_pid)
        last_seen = 0
        while not self._stop.wait(self.interval):
            now, (busy, tot, steal) = time.time(), self._cpu()
            tr, evp = self._procs(self.trainer_pid), self._procs(self.eval_pid)
            waited = self._waited(self.trainer_pid)
            dt = now - t_prev
            row: dict[str, Any] = {"t": now, "host": round((busy - b_prev) / max(1, tot - tot_prev) * ncpu, 3),
                                   "steal": round((steal - st_prev) / max(1, tot - tot_prev) * ncpu, 3),
                                   "wait": (round((waited - w_prev) / 1e9 / dt, 4)
                                            if waited is not None and w_prev is not None else None),
                                   "trainer": round(self._delta(tr, tr_prev) / clk / dt, 3) if tr else None,
                                   "eval": round(self._delta(evp, ev_prev) / clk / dt, 3) if evp else None,
                                   "tcpu": _cpu_of(self.trainer_pid), "ecpu": _cpu_of(self.eval_pid) if evp else None}
            if self._h is not None:
                try:
                    row["gpu"] = self._nv.nvmlDeviceGetUtilizationRates(self._h).gpu
                    row["mem_used"] = self._nv.nvmlDeviceGetMemoryInfo(self._h).used
                    sm: dict[int, int] = {}
                    for s in self._nv.nvmlDeviceGetProcessUtilization(self._h, last_seen):
                        sm[s.pid] = max(sm.get(s.pid, 0), s.smUtil)
                        last_seen = max(last_seen, s.timeStamp)
                    row["sm"] = {str(k): v for k, v in sm.items()}
                except Exception:  # noqa: BLE001 - no samples in this interval (NVML_ERROR_NOT_FOUND)
                    pass
            self.rows.append(row)
            t_prev, b_prev, tot_prev, st_prev, tr_prev, ev_prev, w_prev = now, busy, tot, steal, tr, evp, waited

    def stop(self) -> None:
        self._stop.set()
        self._t.join(5)


# ---- the run ---------------------------------------------------------------------------------------------------
def med(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 4) if xs else None


def eval_intervals(evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each evaluation process: started -> its terminal event (done / failed / stopped), in journal order."""
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for e in evs:
        if e["event"] == "eval_started":
            cur = {"start": e["time"], "iteration": e.get("iteration"), "pid": e.get("pid"), "end": None}
            out.append(cur)
        elif e["event"] in TERMINAL and cur is not None and cur["end"] is None:
            cur["end"], cur["outcome"] = e["time"], e["event"]
            cur["reason"] = e.get("reason")
    return out


def run(a: argparse.Namespace, work: Path) -> dict[str, Any]:
    d = work / "run"
    d.mkdir(parents=True)
    cfg = d / "isaacd.toml"
    cfg.write_text(config_text(a, d, "none"))
    sampler = Sampler(a.sample_interval, a.gpu_source == "nvml")
    sp = SupervisorProc(cfg).start()
    res: dict[str, Any] = {"windows": [], "errors": [], "config_none": cfg.read_text(),
                           "smt": {str(k): v for k, v in smt_siblings().items()}}
    order = [arm for _ in range(a.repeats) for eval_arm in a.arms for arm in ("none", eval_arm)] + ["none"]
    if a.video_window:  # a last window with video = true (not a measured arm: whether Isaac Lab renders here)
        order.append("video")
    try:
        j = wait_for(lambda: (x := sp.job(JOB))["state"] == "running" and (x.get("iteration") or 0) >= a.warmup
                     and x, a.boot_limit, interval=0.5, what=f"the job's iteration {a.warmup}")
        sampler.trainer_pid = j.get("pid")
        if a.pin_trainer and j.get("pid"):
            res["pinned_threads"] = len(pin(j["pid"], a.pin_trainer))
            print(f"pinned {res['pinned_threads']} threads of the trainer to CPUs {a.pin_trainer}", flush=True)
        res["boot_done"] = time.time()
        for i, arm in enumerate(order):
            if a.time_limit and arm not in ("none", "video") and time.time() + window_most(a, arm) + (
                    a.none_window or a.window) + 15 > res["boot_done"] + a.time_limit:
                # no room for this window and the none after it: the none window just run is the last
                res["errors"].append(f"--time-limit {a.time_limit:.0f} s: stopped before window {i} ({arm})")
                print(f"time limit: stopped before window {i} ({arm})", flush=True)
                break
            cfg.write_text(config_text(a, d, arm))
            if arm != "none":
                res.setdefault(f"config_{arm}", cfg.read_text())
            t0 = time.time()
            r = sp.cli("reload", check=False)
            w = {"n": i, "arm": arm, "switch": t0, "reload_rc": r.returncode,
                 "reload_out": (r.stdout + r.stderr).strip()[-300:]}
            res["windows"].append(w)
            print(f"[{datetime.datetime.now():%T}] window {i} {arm}: reload rc {r.returncode}", flush=True)
            end = t0 + (a.none_window if arm == "none" and a.none_window else
                        a.video_window if arm == "video" else a.arm_window.get(arm, a.window))
            by_cycles = bool(a.cycles) and arm not in ("none", "video") and paced(arm)
            if by_cycles:  # whole pacing cycles, --arm-window (or --window) only as the limit
                end = t0 + window_most(a, arm)
                done_at_switch = ((sp.job(JOB).get("evals") or {}).get("done") or 0)
            while time.time() < end:
                try:
                    x = sp.job(JOB)
                except Exception:  # noqa: BLE001 - the socket busy for a moment
                    time.sleep(0.5)
                    continue
                if x["state"] != "running":
                    raise RuntimeError(f"the job is {x['state']} in window {i}: {x.get('reason') or ''}")
                if by_cycles and (until := cycle_end(x, done_at_switch, a.cycles)) is not None:
                    w["cycles"] = a.cycles
                    # before the next evaluation would start (the reload to the next arm takes ~0.5-1 s: at 0.3 s
                    # before, the keeper started it in 2 of 2 windows on a 2-core host, and the reload killed it)
                    end = min(end, until - 1.5)
                ev = x.get("evals") or {}
                sampler.eval_pid = _eval_pid(sp) if ev.get("running") is not None else None
                w["evals_status"] = ev
                time.sleep(0.5)
            w["end"] = time.time()
        res["final_status"] = sp.job(JOB)
    except Exception as exc:  # noqa: BLE001 - report what was measured
        res["errors"].append(f"{type(exc).__name__}: {exc}")
        print("ERROR", exc, flush=True)
    finally:
        sampler.stop()
        res["samples"] = sampler.rows
        try:
            res["events"] = sp.events(JOB)
            sp.cli("stop", JOB, check=False)
            wait_for(lambda: sp.job(JOB)["state"] in ("stopped", "completed", "failed"), 90, interval=0.5,
                     what="the job's stop")
        except Exception as exc:  # noqa: BLE001
            res["errors"].append(f"stop: {exc}")
        res.setdefault("events", [])
        sp.stop()
        for line in os.popen(f"pgrep -f {d}").read().split():  # trainers/evaluations a dead supervisor left
            try:
                os.kill(int(line), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    res["run_dirs"] = list(dict.fromkeys(e["run_dir"] for e in res["events"] if e["event"] == "run_dir"))
    res["eval_log_tail"] = _tail(d / "state" / "logs" / f"{JOB}.eval.log")
    return res


def _eval_pid(sp: SupervisorProc) -> int | None:
    starts = [e for e in sp.events(JOB)[-50:] if e["event"] == "eval_started"]
    return starts[-1].get("pid") if starts else None


def _tail(p: Path, n: int = 3000) -> str:
    try:
        return p.read_text(errors="replace")[-n:]
    except OSError:
        return ""


# ---- the figures -----------------------------------------------------------------------------------------------
def figures(a: argparse.Namespace, res: dict[str, Any]) -> None:
    pts: dict[int, tuple[float, float]] = {}
    for rd in res["run_dirs"]:
        pts |= tb_points(Path(rd), a.tag)
    steps = sorted(pts)
    evals = eval_intervals(res["events"])
    for e in evals:  # when the evaluation's process first shows in NVML's per-process SM samples (its GPU phase)
        seen = [r["t"] for r in res["samples"] if e["start"] <= r["t"] <= (e["end"] or float("inf"))
                and (r.get("sm") or {}).get(str(e["pid"]), 0) > 0]
        e["gpu_from"] = min(seen) - a.sample_interval if seen else None
    res["evals"] = evals
    res["iterations"] = [[st, round(pts[st][1], 3)] for st in steps]  # every iteration's wall time, for later analysis
    for k, w in enumerate(res["windows"]):
        lo, hi = w["switch"] + a.settle, w.get("end", w["switch"])
        inside = [s for s in steps if lo <= pts[s][1] <= hi]
        if len(inside) < 3:
            w["iterations"] = len(inside)
            continue
        s0, s1 = inside[0], inside[-1]
        w["steps"] = [s0, s1]
        w["it_per_s"] = round((s1 - s0) / (pts[s1][1] - pts[s0][1]), 4)
        w["tag_median"] = med([pts[s][0] for s in inside[1:]])
        during, outside = [], []
        by_phase: dict[str, list[float]] = {}
        for s in inside[1:]:
            if s - 1 not in pts:
                continue
            t_a, t_b = pts[s - 1][1], pts[s][1]
            mid = (t_a + t_b) / 2
            ph = phase(evals, mid, hi)
            (outside if ph == "none" else during).append(t_b - t_a)
            by_phase.setdefault(ph, []).append(t_b - t_a)
        w["iter_s_during_eval"], w["iter_s_no_eval"] = med(during), med(outside)
        w["iter_s_by_phase"] = {k: [med(v), len(v)] for k, v in by_phase.items()}
        w["n_during"], w["n_no_eval"] = len(during), len(outside)
        busy = sum(max(0.0, min(hi, e["end"] or hi) - max(lo, e["start"])) for e in evals)
        w["eval_duty"] = round(busy / (hi - lo), 3)
        rows = [r for r in res["samples"] if lo <= r["t"] <= hi]
        for key in ("host", "trainer", "eval", "gpu", "steal", "wait"):
            w[f"{key}_mean"] = _mean([r[key] for r in rows if r.get(key) is not None])
        both = [r for r in rows if r.get("tcpu") is not None and r.get("ecpu") is not None]
        sib = res.get("smt") or {}
        w["eval_on_trainer_core"] = (round(sum(1 for r in both if r["ecpu"] in sib.get(str(r["tcpu"]), [r["tcpu"]]))
                                           / len(both), 3) if both else None)
        w["trainer_cpus"] = sorted({r["tcpu"] for r in rows if r.get("tcpu") is not None})
        tp = str(res["final_status"].get("pid")) if res.get("final_status") else None
        w["sm_trainer_mean"] = _mean([r["sm"].get(tp, 0) for r in rows if "sm" in r and tp])
        w["sm_eval_mean"] = _mean([v for r in rows if "sm" in r for p, v in r["sm"].items() if p != tp])
    wins = res["windows"]
    for k, w in enumerate(wins):  # ratio against the mean of the none windows either side
        if w["arm"] == "none" or "it_per_s" not in w:
            continue
        nb = [x for x in (wins[k - 1] if k else None, wins[k + 1] if k + 1 < len(wins) else None)
              if x and x["arm"] == "none" and "it_per_s" in x]
        if nb:
            w["ratio"] = round(w["it_per_s"] / statistics.mean(x["it_per_s"] for x in nb), 4)
            tn = [x["tag_median"] for x in nb if x.get("tag_median")]
            if tn and w.get("tag_median"):
                w["tag_ratio"] = round(w["tag_median"] / statistics.mean(tn), 4)
    res["checkpoints"] = latencies(res)


START = 1.0  # seconds after eval_started counted as the evaluation's start (its process spawn and first imports)


def phase(evals: list[dict[str, Any]], t: float, hi: float) -> str:
    """What the evaluation beside training was doing at wall time t: none, start (its first START s), gpu (from its
    first NVML SM sample on: stepping on the GPU), else cpu (its boot, or stepping on the CPU)."""
    for e in evals:
        if e["start"] <= t <= (e["end"] or hi):
            if t <= e["start"] + START:
                return "start"
            return "gpu" if e.get("gpu_from") is not None and t >= e["gpu_from"] else "cpu"
    return "none"


def _mean(xs: list[float]) -> float | None:
    return round(statistics.mean(xs), 3) if xs else None


def latencies(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Every model_N.pt of the run: its mtime, its result JSON's mtime (if evaluated) and what the result says, and
    the window (arm) it was written in."""
    out = []
    for rd in res["run_dirs"]:
        for ck in Path(rd).glob("model_*.pt"):
            try:
                it = int(ck.stem.split("_")[1])
            except ValueError:
                continue
            row: dict[str, Any] = {"iteration": it, "written": ck.stat().st_mtime}
            win = [w for w in res["windows"] if w["switch"] <= row["written"]]
            row["arm_at_write"] = win[-1]["arm"] if win else "boot"
            rj = ck.with_name(ck.name + ".eval.json")
            if rj.exists():
                row["result_at"] = rj.stat().st_mtime
                row["latency"] = round(row["result_at"] - row["written"], 2)
                won = [w for w in res["windows"] if w["switch"] <= row["result_at"]]
                row["arm_at_result"] = won[-1]["arm"] if won else "boot"
                try:
                    r = json.loads(rj.read_text())
                except ValueError:
                    r = {"error": "unreadable"}
                row |= {k: r.get(k) for k in ("return_mean", "return_std", "length_mean", "episodes",
                                              "duration_seconds", "device", "video", "gif", "video_reason", "error")}
            out.append(row)
    return sorted(out, key=lambda r: r["iteration"])


def stalls(res: dict[str, Any], slow: float = 1.25, before: float = 1.0, after: float = 0.2) -> str | None:
    """Where the trainer's slow iterations fall (longer than `slow` x the none windows' median): ending within
    [-before, +after] s of an evaluation's result write (its JSON's mtime: the end of its stepping, before its
    teardown) or elsewhere, with the time they lost (above that median) in each place, per evaluated checkpoint."""
    its = res.get("iterations") or []
    t = {s: w for s, w in its}
    base = med([w["iter_s_no_eval"] for w in res["windows"] if w["arm"] == "none" and w.get("iter_s_no_eval")])
    written = sorted(c["result_at"] for c in res.get("checkpoints", []) if c.get("result_at"))
    if not base or not written:
        return None
    lo, hi = res["windows"][0]["switch"], res["windows"][-1].get("end", float("inf"))
    near = far = 0
    lost_near = lost_far = 0.0
    for s, w in its:
        if s - 1 not in t or not lo <= w <= hi or (d := w - t[s - 1]) <= slow * base:
            continue
        if any(-before <= w - r <= after for r in written):
            near, lost_near = near + 1, lost_near + d - base
        else:
            far, lost_far = far + 1, lost_far + d - base
    return (f"trainer iterations over {slow} x the none median ({base:.3f} s): {near} ending within -{before}..+{after} s "
            f"of an evaluation's result write, losing {lost_near:.2f} s ({lost_near / len(written):.3f} s per result, "
            f"{len(written)} results), {far} elsewhere, losing {lost_far:.2f} s")


def report(meta: dict[str, Any], res: dict[str, Any]) -> str:
    a = meta["args"]
    lines = [f"Issue 41: training throughput with evaluations beside it, {meta['what']}, {meta['when']}",
             f"checkout: {meta['checkout']}; daemon/ or trainer/ modified: {meta['modified']}",
             f"host: {meta['host']}; load average before {meta['load_before']}, after {meta.get('load_after')}",
             f"settings: {json.dumps(a)}"]
    sib = res.get("smt") or {}
    if sib:
        pairs = sorted({tuple(v) for v in sib.values()})
        smt = ("no SMT (one hardware thread a core)" if all(len(x) == 1 for x in pairs)
               else f"SMT siblings {pairs[:4]}{' ...' if len(pairs) > 4 else ''}")
        tc = sorted({c for w in res["windows"] for c in w.get("trainer_cpus", [])})
        lines.append(f"CPU topology: {len(sib)} CPUs, {smt}; the trainer's main thread ran on CPUs {tc}")
    lines.append("")
    lines.append(f"{'win':>3} {'arm':<5} {'it/s':>7} {'ratio':>6} {a['tag'].split('/')[-1]:>9} {'ratio':>6} "
                 f"{'duty':>5} {'it_s eval':>9} {'it_s none':>9} {'host':>5} {'train':>5} {'evalc':>5} "
                 f"{'gpu%':>5} {'smT':>4} {'smE':>4} {'steal':>5} {'wait':>5}  steps")
    f = lambda v, n=7, p=3: f"{v:>{n}.{p}f}" if isinstance(v, (int, float)) else f"{'-':>{n}}"  # noqa: E731
    for w in res["windows"]:
        lines.append(f"{w['n']:>3} {w['arm']:<5} {f(w.get('it_per_s'))} {f(w.get('ratio'), 6)} "
                     f"{f(w.get('tag_median'), 9, 0)} {f(w.get('tag_ratio'), 6)} {f(w.get('eval_duty'), 5, 2)} "
                     f"{f(w.get('iter_s_during_eval'), 9)} {f(w.get('iter_s_no_eval'), 9)} {f(w.get('host_mean'), 5, 2)} "
                     f"{f(w.get('trainer_mean'), 5, 2)} {f(w.get('eval_mean'), 5, 2)} {f(w.get('gpu_mean'), 5, 0)} "
                     f"{f(w.get('sm_trainer_mean'), 4, 0)} {f(w.get('sm_eval_mean'), 4, 0)} {f(w.get('steal_mean'), 5, 2)} "
                     f"{f(w.get('wait_mean'), 5, 3)}  {w.get('steps')}"
                     + ("" if w.get("reload_rc") == 0 else f"  reload rc {w.get('reload_rc')}: {w.get('reload_out')}"))
    lines.append("(it/s: iterations per second from the TensorBoard wall times; ratio: against the mean of the none "
                 "windows either side; duty: share of the window an evaluation process ran; it_s eval / none: median "
                 "iteration time whose midpoint fell in / outside an evaluation; host: busy cores; train / evalc: "
                 "cores of the trainer's / the evaluation's process tree; gpu%: NVML utilisation; smT / smE: NVML SM "
                 "% of the trainer / the other processes; steal: cores the hypervisor took (/proc/stat); wait: share of "
                 "the time the trainer's main thread waited on a run queue (/proc/PID/schedstat))")
    lines.append("")
    for arm in ["none", *a["arms"]]:
        ws = [w for w in res["windows"] if w["arm"] == arm and "it_per_s" in w]
        if not ws:
            continue
        line = f"{arm}: {len(ws)} windows, median it/s {med([w['it_per_s'] for w in ws])}"
        if arm != "none":
            rs = [w["ratio"] for w in ws if "ratio" in w]
            ts = [w["tag_ratio"] for w in ws if "tag_ratio" in w]
            line += (f", ratio vs none median {med(rs)} (each: {rs}); {a['tag']} ratio median {med(ts)}; eval duty "
                     f"median {med([w['eval_duty'] for w in ws])} (each: {[w['eval_duty'] for w in ws]})")
            if any("cycles" in w for w in ws):  # --cycles: each window whole pacing cycles, its length theirs
                line += (f"; windows of {ws[0].get('cycles')} pacing cycle(s), seconds each: "
                         f"{[round(w['end'] - w['switch'], 1) for w in ws]}")
            if rs:
                line += (f"; GOAL >= 0.99x: {'met' if med(rs) >= 0.99 else 'missed'} at the median "
                         f"({sum(1 for r in rs if r >= 0.99)} of {len(rs)} windows)")
            if len(rs) >= 3:  # how sure: the ratios' mean and its standard error (windows as independent pairs)
                line += (f"; mean {statistics.mean(rs):.4f} +- {statistics.stdev(rs) / len(rs) ** 0.5:.4f} (s.e.), "
                         f"window sd {statistics.stdev(rs):.4f}")
            dr = [w["iter_s_during_eval"] / w["iter_s_no_eval"] for w in ws
                  if w.get("iter_s_during_eval") and w.get("iter_s_no_eval")]
            if dr:
                line += f"; an iteration during an evaluation takes {med(dr)} x one outside (median)"
            oc = [w["eval_on_trainer_core"] for w in ws if w.get("eval_on_trainer_core") is not None]
            if oc:
                line += (f"; the evaluation's main thread on the trainer's core (or its SMT sibling) in {med(oc)} "
                         "of samples (window median)")
            base = med([w["iter_s_no_eval"] for w in res["windows"] if w["arm"] == "none" and w.get("iter_s_no_eval")])
            ph = {k: [x["iter_s_by_phase"][k][0] for x in ws if k in x.get("iter_s_by_phase", {})]
                  for k in ("start", "cpu", "gpu")}
            if base and any(ph.values()):
                line += ("; iteration time against the none windows' median by what the evaluation was doing: " +
                         ", ".join(f"{k} {med(v) / base:.3f}x (n={sum(x['iter_s_by_phase'][k][1] for x in ws if k in x.get('iter_s_by_phase', {}))})"
                                   for k, v in ph.items() if v))
        lines.append(line)
    cks = res.get("checkpoints", [])
    done = [c for c in cks if c.get("latency") is not None and not c.get("error")]
    lines.append("")
    lines.append(f"checkpoints: {len(cks)} written, {len(done)} evaluated, "
                 f"{sum(1 for c in cks if c.get('error'))} with an error result")
    for arm in dict.fromkeys(arm_parts(x)[0] for x in a["arms"]):
        xs = [c["latency"] for c in done if c["device"] and (c["device"] == "cpu") == (arm == "cpu")
              and c.get("arm_at_result") != "video"]
        fresh = [c["latency"] for c in done if c["arm_at_write"] != "boot" and c["arm_at_write"] != "none"
                 and arm_parts(c["arm_at_write"])[0] == arm]
        if xs:
            lines.append(f"  {arm}: write -> result median {med(xs)} s, max {max(xs)} s (n={len(xs)}); of checkpoints "
                         f"written in a {arm} window: median {med(fresh)} s, max {max(fresh) if fresh else None} s "
                         f"(n={len(fresh)}); the evaluation itself (duration_seconds) median "
                         f"{med([c['duration_seconds'] for c in done if (c['device'] == 'cpu') == (arm == 'cpu')])} s")
    lines.append("  evaluated (iteration@arm when written -> arm when the result came: latency, device, return): " + "; ".join(
        f"{c['iteration']}@{c['arm_at_write']}->{c.get('arm_at_result')}: " +
        (f"{c['latency']} s {c['device']} {c['return_mean']:.1f}" if c in done else (c.get("error") or "?"))
        for c in cks if c.get("latency") is not None))
    st = stalls(res)
    if st:
        lines.append(st)
    costs = [e for e in res["events"] if e["event"] == "eval_cost"]
    if costs:  # pacing (max_training_cost): each measured evaluation's cost to the training and the wait it set
        lines.append(f"eval_cost (pacing) x{len(costs)}: lost median {med([c['lost_seconds'] for c in costs])} s "
                     f"(each {[c['lost_seconds'] for c in costs]}), share median {med([c['share'] for c in costs])}, "
                     f"pause median {med([c['pause_seconds'] for c in costs])} s, budgets "
                     f"{sorted({c['budget'] for c in costs})}")
    reasons = {c.get("video_reason") for c in done if c.get("video_reason")}
    videos = [c["video"] for c in done if c.get("video")]
    if a.get("video") or a.get("video_window"):
        lines.append(f"video: {len(videos)} produced {videos[:2]}; video_reason {sorted(reasons)}")
    outs = {}
    for e in res.get("evals", []):
        outs[e.get("outcome") or "running at the end"] = outs.get(e.get("outcome") or "running at the end", 0) + 1
    lines.append(f"evaluation processes: {len(res.get('evals', []))} {outs}")
    fails = sorted({(e.get("reason") or "")[:200] for e in res["events"] if e["event"] == "eval_failed"})
    if fails:
        lines.append(f"eval_failed reasons: {fails}")
    skipped = [e.get("iterations") for e in res["events"] if e["event"] == "eval_skipped"]
    if skipped:
        lines.append(f"eval_skipped (newest 3 when behind): {skipped}")
    if res["errors"]:
        lines.append(f"ERRORS: {res['errors']}")
    return "\n".join(lines) + "\n"


def main() -> None:
    if sys.argv[1:2] == ["--render"]:  # the report again from a saved JSON (e.g. after a change of the report)
        for f in sys.argv[2:]:
            doc = json.loads(Path(f).read_text())
            for saved in doc.get("runs", [doc]):  # a results file may keep several runs of one session
                print(report(saved["meta"], saved["result"]))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--builtin", action="store_true", help="isaacd's built-in trainer (cart-pole)")
    g.add_argument("--isaaclab", action="store_true", help="the real Isaac Lab 3.0 Isaac-Cartpole-Direct (rsl_rl)")
    p.add_argument("--arms", nargs="+", default=["cpu"], type=_arm,
                   help="the eval arms, gpu or cpu with an optional every (gpu4); none is always in")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--window", type=float, default=60.0, help="seconds per window")
    p.add_argument("--none-window", type=float, default=None, help="seconds per none window (default: --window)")
    p.add_argument("--arm-window", nargs="*", default=[], metavar="ARM=SECONDS",
                   help="an arm's own window (a sparse every needs a longer one): gpu4=70")
    p.add_argument("--cycles", type=int, default=0, metavar="N",
                   help="a paced arm's window (max_training_cost > 0) ends when N evaluations have finished in it and "
                        "their pause has run out: whole cycles of the pacing, not a fixed time (0: --window)")
    p.add_argument("--cycle-limit", type=float, default=400.0, help="the longest a --cycles window may run (s)")
    p.add_argument("--time-limit", type=float, default=0.0, metavar="SECONDS",
                   help="from the trainer's boot: no eval window starts that could not end, with the none window "
                        "after it, within this (the run keeps its last none window and reports what it measured)")
    p.add_argument("--settle", type=float, default=3.0, help="seconds left out at each window's start")
    p.add_argument("--warmup", type=int, default=5, help="the first window starts at this iteration (boot left out)")
    p.add_argument("--boot-limit", type=float, default=400.0)
    p.add_argument("--iterations", type=int, default=100000, help="max_iterations (the bench stops the job first)")
    p.add_argument("--save-interval", type=int, default=20)
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--device", default="cpu", help="the job's device (cuda:0 on a GPU host)")
    p.add_argument("--python", default=str(IL3_VENV / "bin" / "python"), help="Isaac Lab's interpreter")
    p.add_argument("--gpu-source", choices=["none", "nvml"], default="none")
    p.add_argument("--episodes", type=int, default=100)
    p.add_argument("--eval-num-envs", type=int, default=None)
    p.add_argument("--gpu-memory", default="4GiB")
    p.add_argument("--video", action="store_true")
    p.add_argument("--video-window", type=float, default=0.0,
                   help="seconds of a last window evaluating on the GPU with video = true (0: none)")
    p.add_argument("--video-length", type=int, default=200)
    p.add_argument("--eval-deadline", type=float, default=600.0)
    p.add_argument("--extra-args", nargs="*", default=[], help="the job's extra_args (e.g. agent.num_steps_per_env=8)")
    p.add_argument("--omp-threads", type=int, default=0, help="OMP_NUM_THREADS for the job (0: unset)")
    p.add_argument("--pin-trainer", default="", metavar="CPUS",
                   help="run the trainer under taskset -c CPUS (a steadier measurement on a VM; default: unpinned)")
    p.add_argument("--tag", default="Perf/total_fps")
    p.add_argument("--sample-interval", type=float, default=0.5)
    p.add_argument("--out", default=None)
    p.add_argument("--keep", action="store_true")
    a = p.parse_args()
    try:
        a.arm_window = {k: float(v) for k, _, v in (x.partition("=") for x in a.arm_window)}
    except ValueError:
        p.error("--arm-window takes ARM=SECONDS")
    if any(arm_parts(x)[0] == "gpu" for x in a.arms) and a.device == "cpu":
        sys.exit("the gpu arm needs a GPU job: --device cuda:0 --gpu-source nvml")
    what = ("the real Isaac Lab 3.0 Isaac-Cartpole-Direct (rsl_rl)" if a.isaaclab else "the built-in trainer's "
            "cart-pole") + f" on {a.device}, {a.num_envs} envs, save_interval {a.save_interval}"
    git = lambda *x: subprocess.run(["git", "-C", str(REPO), *x], capture_output=True, text=True).stdout.strip()  # noqa: E731
    meta = {"what": what, "when": datetime.datetime.now().isoformat(timespec="seconds"),
            "checkout": git("log", "-1", "--format=%h %s")[:90], "modified": bool(git("status", "--porcelain", "--",
                                                                                        "daemon", "trainer")),
            "host": f"{os.cpu_count()} cores" + _gpu_name(), "load_before": os.getloadavg(), "args": vars(a)}
    work = Path(tempfile.mkdtemp(prefix="eval-beside-"))
    try:
        res = run(a, work)
        try:
            figures(a, res)
        except Exception as exc:  # noqa: BLE001
            import traceback
            res["errors"].append(f"figures: {exc}: {traceback.format_exc()[-600:]}")
        meta["load_after"] = os.getloadavg()
        text = report(meta, res)
        print(text, flush=True)
        (work / "result.json").write_text(json.dumps({"meta": meta, "result": res}, default=str))
        if a.out:
            out = Path(a.out) if "/" in a.out else RESULTS / a.out
            txt, js = out.with_suffix(".txt"), out.with_suffix(".json")
            before = txt.read_text() if txt.exists() else ""
            txt.write_text(before + ("\n" + "=" * 100 + "\n" if before else "") + text)
            js.write_text(json.dumps({"meta": meta, "result": res}, indent=1, default=str))
    finally:
        if a.keep:
            print("work dir:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)


def _arm(text: str) -> str:
    try:
        where, _ = arm_parts(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if where not in ("gpu", "cpu"):
        raise argparse.ArgumentTypeError(f"arm {text!r}: gpu or cpu (none is always in)")
    return text


def _gpu_name() -> str:
    try:
        return ", " + subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                     text=True, timeout=10).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return ""


if __name__ == "__main__":
    main()
