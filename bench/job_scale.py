#!/usr/bin/env python3
"""Issue 39's scale goal: with 1,000 jobs or trials (a few running, the rest queued), `isaacd submit`, `status` and
`sweep status` each answer in <= 0.3 s, and the supervisor uses <= 5 % of a core at rest; a 100-trial sweep is one
command.

    .venv/bin/python bench/job_scale.py                       # N = 20, 100, 300, 1000
    .venv/bin/python bench/job_scale.py --jobs 100,1000 --repeats 7 --rest 30

For each N, a real `isaacd run` on a scripted 8-GPU host (80 GiB H200s: GPUs 0-3 free, 4-7 full of another
process) with `[supervisor] jobs_dir`: N job files written into jobs_dir before it starts (each a `sleep` command
(isaacd's flags ignored) asking 80 GiB, so the queue places 4 of them on GPUs 0-3 and they run; the other N-4 wait behind a full host), then:

  sweep submit  one `isaacd sweep submit` of a 100-trial sweep (ASHA, concurrency 2; its trials queue too): timed
  rest          the supervisor's CPU, utime+stime of /proc/PID/stat over --rest seconds, nothing asked of it
  submit        `isaacd submit` of one more queued job (it answers once the queue's first pass has seen it)
  status        `isaacd status --json`
  sweep status  `isaacd sweep status NAME --json`
  sweeps        `isaacd sweeps`
  socket        {"cmd": "status"} on the control socket (no CLI start-up: the supervisor's part alone)

each --repeats times, median and max. The floor: `isaacd --version` (the CLI's Python start-up and argparse, no
supervisor) and `python -c pass` (the interpreter alone). The jobs column counts every job the supervisor holds when
the commands run (N + the sweep's trials). Figures depend on the machine and its load: compare runs made on the
same machine, in the same run. Only the standard library (nothing here imports isaacd).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _supervised import CLK_TCK, Checkout, HostSupervisor, ask, cpu_ticks, wait_until  # noqa: E402

GiB = 1 << 30
RUNNING = 4  # GPUs 0-3 free: the queue runs this many of the jobs
QUIET = "".join(f"\n[{{table}}.watchdogs.{w}]\nenabled = false\n" for w in (
    "no_progress", "duty_cycle", "loss_stagnation", "reward_plateau", "divergence", "gpu_temperature", "xid"))


def host_config(d: Path, tick: float) -> Path:
    busy = [{"t": 0, "gpu": g, "memory_used_bytes": 135 * GiB, "processes": [{"pid": 4242, "used_bytes": 135 * GiB}]}
            for g in range(RUNNING, 8)]
    (d / "gpu.json").write_text(json.dumps({"gpus": 8, "events": busy}))
    cfg = d / "isaacd.toml"
    cfg.write_text('jobs = []\n[supervisor]\nstate_dir = "state"\ncontrol_socket = "isaacd.sock"\njobs_dir = "jobs.d"\n'
                   f'log_format = "json"\ntick_interval = {tick}\n[metrics]\nenabled = false\n'
                   '[gpu]\nsource = "scripted"\nscript = "gpu.json"\nsample_interval = 0.5\n'
                   '[queue]\nmin_run_seconds = 1\n')
    return cfg


def quiet(table: str, watchdogs: str) -> str:
    """`off`: every watchdog disabled; `default`: no [watchdogs] table at all, what a user gets by default."""
    return QUIET.format(table=table) if watchdogs == "off" else ""


def job_text(name: str, logs: Path, watchdogs: str = "off") -> str:
    return (f'[[jobs]]\nname = "{name}"\ncommand = ["sh", "-c", "exec sleep 100000", "sleep"]\ngpu_memory = "80GiB"\ndevice = "cpu"\n'
            f'log_root = "{logs}"\nstop_timeout = 5.0\nspare = false\n' + quiet("jobs", watchdogs))


def sweep_text(name: str, trials: int, logs: Path, watchdogs: str = "off") -> str:
    return f"""
[sweep]
name = "{name}"
trials = {trials}
concurrency = 2
seed = 1
[sweep.objective]
tag = "Train/mean_reward"
mode = "max"
[sweep.scheduler]
kind = "asha"
reduction_factor = 3
grace_period = 10
[sweep.space]
"agent.algorithm.learning_rate" = {{ loguniform = [1e-5, 3e-2] }}
[job]
device = "cpu"
gpu_memory = "80GiB"
num_envs = 64
max_iterations = 90
save_interval = 5
stop_timeout = 10.0
spare = false
log_root = "{logs}"
""" + quiet("job", watchdogs)


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[3:])} -> exit {r.returncode}: {r.stderr.strip()[-300:]}")
    return dt, r.stdout


class Samples:
    """Each command's times; a command that fails (the client's 10 s timeout, a refusal) is a figure too: counted,
    its time kept apart, its first error printed."""

    def __init__(self, env: dict[str, str] | None = None, pid: int | None = None) -> None:
        self.env = env  # the clients' environment (PYTHONPATH of the arm measured)
        self.pid = pid  # the supervisor's: its CPU during each command (what a shared machine's load changes least)
        self.cpu: dict[str, list[float]] = {}
        self.ok: dict[str, list[float]] = {}
        self.failed: dict[str, list[float]] = {}
        self.errors: dict[str, str] = {}
        self.notes: dict[str, str] = {}

    def run(self, name: str, cmd: list[str]) -> str | None:
        t0 = time.monotonic()
        c0 = cpu_ticks(self.pid) if self.pid else 0
        try:
            dt, out = timed(cmd, self.env)
        except RuntimeError as exc:
            self.failed.setdefault(name, []).append(time.monotonic() - t0)
            self.errors.setdefault(name, str(exc).splitlines()[-1][:300])
            return None
        self.ok.setdefault(name, []).append(dt)
        if self.pid:  # (its ticks too: the tick's share is the same in both arms)
            self.cpu.setdefault(name, []).append((cpu_ticks(self.pid) - c0) / CLK_TCK)
        return out

    def cell(self, name: str) -> str:
        xs, bad = self.ok.get(name, []), self.failed.get(name, [])
        s = ms(xs) if xs else "-"
        return s + (f" {len(bad)}F" if bad else "")


def one_size(co: Checkout, n: int, a: argparse.Namespace, pythonpath: str | None = None) -> dict[str, Any]:
    d = Path(tempfile.mkdtemp(prefix=f"isaacd-bench-scale-{n}-"))
    cfg = host_config(d, a.tick)
    logs = d / "logs"
    jobs_d = d / "jobs.d"
    jobs_d.mkdir(mode=0o700)
    for i in range(n):
        (jobs_d / f"j{i:04d}.toml").write_text(job_text(f"j{i:04d}", logs, a.watchdogs))
    sock = d / "isaacd.sock"
    cli = [str(co.isaacd), "--config", str(cfg)]
    t0 = time.monotonic()
    extra = {"PYTHONPATH": pythonpath} if pythonpath else {}
    env = {**os.environ, **extra}
    sup = HostSupervisor(co, cfg, extra)
    out: dict[str, Any] = {"n": n}
    try:
        wait_until(lambda: ask(sock, {"cmd": "status"}, timeout=30), 120 + n / 5, "the control socket", interval=0.2)

        def settled() -> bool:
            jobs = ask(sock, {"cmd": "status"}, timeout=60)["jobs"]
            states = [j["state"] for j in jobs]
            bad = [j for j in jobs if j["state"] in ("failed", "completed")]
            if bad:
                raise SystemExit(f"{bad[0]['name']} is {bad[0]['state']}: {bad[0]['state_reason']} (see {d})")
            live = sum(1 for j in jobs if j["state"] in ("starting", "running") and j.get("pid"))  # no iteration: starting
            return len(jobs) == n and live == min(n, RUNNING) and \
                states.count("queued") == n - min(n, RUNNING)

        wait_until(settled, 120 + n / 2, f"{RUNNING} of {n} jobs running, the rest queued", interval=0.5)
        out["up"] = time.monotonic() - t0
        sfile = d / "sweep.toml"
        sfile.write_text(sweep_text("scale", a.trials, logs, a.watchdogs))
        sm = Samples(env, sup.pid)
        sm.run("sweep submit", cli + ["sweep", "submit", str(sfile)])
        try:
            wait_until(lambda: len(ask(sock, {"cmd": "status"}, timeout=60)["jobs"]) == n + a.trials, 300,
                       "the sweep's trials to be jobs")
        except TimeoutError as exc:
            sm.notes["sweep"] = str(exc)
        out["total"] = len(ask(sock, {"cmd": "status"}, timeout=60)["jobs"])
        time.sleep(a.warmup)
        c0, m0, w0 = cpu_ticks(sup.pid), cpu_ticks(sup.pid, sup.pid), time.monotonic()
        time.sleep(a.rest)
        c1, m1, w1 = cpu_ticks(sup.pid), cpu_ticks(sup.pid, sup.pid), time.monotonic()
        out["rest_cpu"] = (c1 - c0) / CLK_TCK / (w1 - w0)
        out["rest_main"] = (m1 - m0) / CLK_TCK / (w1 - w0)  # the main thread alone: the ticks
        for r in range(a.repeats):
            t = time.monotonic()
            ask(sock, {"cmd": "status"}, timeout=60)
            sm.ok.setdefault("socket", []).append(time.monotonic() - t)
            sm.run("status", cli + ["status", "--json"])
            sm.run("sweep status", cli + ["sweep", "status", "scale", "--json"])
            sm.run("sweeps", cli + ["sweeps"])
            f = d / f"extra{r}.toml"
            f.write_text(job_text(f"extra{r}", logs, a.watchdogs))
            said = sm.run("submit", cli + ["submit", str(f)])
            if said is not None and "queued" not in said:  # e.g. "added; the queue has not taken it up yet"
                sm.notes.setdefault("submit", said.strip().split(": ", 1)[-1][:200])
        out["samples"] = sm
        out["states"] = sorted({j["state"] for j in ask(sock, {"cmd": "status"}, timeout=60)["jobs"]})
    except BaseException:
        print(f"  N={n}: supervisor log: {d}/supervisor.log", file=sys.stderr)
        a.keep = True
        raise
    finally:
        sup.stop()
        if not a.keep:
            shutil.rmtree(d, ignore_errors=True)
    return out


def floor(co: Checkout, repeats: int) -> dict[str, list[float]]:
    return {"python -c pass": [timed([str(co.python), "-c", "pass"])[0] for _ in range(repeats)],
            "isaacd --version": [timed([str(co.isaacd), "--version"])[0] for _ in range(repeats)]}


def ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:6.0f} / {max(xs) * 1000:5.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", help="the checkout to run (its .venv/bin/isaacd); default: this script's checkout")
    ap.add_argument("--jobs", default="20,100,300,1000", help="job counts N (the sweep's trials come on top)")
    ap.add_argument("--trials", type=int, default=100, help="the sweep's trials, submitted in one command")
    ap.add_argument("--repeats", type=int, default=5, help="samples of each command per N")
    ap.add_argument("--rest", type=float, default=30.0, help="seconds of CPU measured at rest")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds after the sweep's submit, unmeasured")
    ap.add_argument("--tick", type=float, default=0.2, help="[supervisor] tick_interval (0.2 is the default)")
    ap.add_argument("--against", metavar="DIR", help="also measure a baseline at each N, just before this checkout: "
                    "DIR holds an `isaacd` link to the baseline's daemon/ (run through this venv, PYTHONPATH=DIR)")
    ap.add_argument("--watchdogs", choices=("off", "default"), default="off",
                    help="off: every watchdog disabled in each job (the figures before 2026-12-06 12:30); default: "
                    "no [watchdogs] table, the default config a user gets (the xid and gpu_temperature watchdogs on)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs (configs, supervisor logs)")
    args = ap.parse_args()

    co = Checkout(args.repo)
    print(f"checkout: {co.describe()}")
    where = subprocess.run([str(co.python), "-c", "import isaacd; print(isaacd.__file__)"], capture_output=True,
                           text=True).stdout.strip()
    print(f"isaacd imported from {where} (PYTHONPATH={os.environ.get('PYTHONPATH', '')!r}: a baseline checkout "
          "can be run through the same venv with PYTHONPATH=DIR holding an `isaacd` link to its daemon/)")
    print(f"scripted 8-GPU host ({RUNNING} free), `sleep` jobs asking 80 GiB ({RUNNING} run, the rest queue), plus a "
          f"{args.trials}-trial sweep; tick_interval {args.tick:g} s, {args.repeats} samples per command, "
          f"{args.rest:g} s at rest; watchdogs {args.watchdogs}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start", flush=True)
    fl = floor(co, max(args.repeats, 5))
    print("floor (no supervisor), median / max ms: " + ", ".join(f"{k} {ms(v)}" for k, v in fl.items()))
    print(f"median / max, ms ({args.repeats} samples each; nF: n failed); sweep submit: one command, its "
          f"{args.trials} trials; rest CPU = supervisor utime+stime over {args.rest:g} s, % of one core (main: its main thread alone, the ticks)",
          flush=True)
    cols = ("sweep submit", "submit", "status", "sweep status", "sweeps", "socket")
    head = f"{'N':>5} {'jobs':>5}  " + "  ".join(f"{c:>14}" for c in cols) + f"  {'rest CPU':>8}  {'main':>6}"
    lines = []
    arms: list[tuple[str, str | None]] = [("", None)]
    if args.against:  # the baseline first, then this checkout, at each N: both under the same load
        arms = [("before", args.against), ("after", None)]
        head = f"{'arm':<6} " + head
    for n, (arm, pp) in [(n, arm) for n in [int(x) for x in args.jobs.split(",")] for arm in arms]:
        r = one_size(co, n, args, pp)
        sm = r["samples"]
        lines.append((f"{arm:<6} " if args.against else "") + f"{r['n']:>5} {r['total']:>5}  "
                     + "  ".join(f"{sm.cell(c):>14}" for c in cols) + f"  {r['rest_cpu'] * 100:>7.1f}%"
                     + f"  {r['rest_main'] * 100:>5.1f}%")
        print(f"  N={n} {arm}: up and settled in {r['up']:.1f} s; states at the end {r['states']}", flush=True)
        print(head + "\n" + lines[-1], flush=True)
        print("    supervisor CPU during each command, median ms: " + ", ".join(
            f"{k} {statistics.median(v) * 1000:.0f}" for k, v in sm.cpu.items()), flush=True)
        for k, e in sm.errors.items():
            print(f"    {k} failed {len(sm.failed[k])}x ({', '.join(f'{x:.1f}' for x in sm.failed[k])} s), first: {e}")
        for k, e in sm.notes.items():
            print(f"    {k}: {e}")
    print("\n" + head + "\n" + "\n".join(lines))
    print(f"\ngoal (issue 39): submit, status, sweep status <= 300 ms at 1,000 jobs; rest CPU <= 5 %; load average "
          f"{os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
