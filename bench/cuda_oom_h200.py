#!/usr/bin/env python3
"""Issue 23 on a real GPU: a real CUDA out-of-memory at start-up, caused by a neighbour holding the GPU's memory.

    python3 bench/cuda_oom_h200.py [--leave-gib 1.5] [--num-envs 1000000] [--out results.json]

A neighbour process takes all but `--leave-gib` of GPU 0's free memory, then two jobs of isaacd's built-in trainer
(real rsl_rl, real torch CUDA allocations) start on cuda:0 with more environments than fit, one after the other:
- `stepdown`: `[jobs.oom] step_down = 0.5, min_num_envs = 4096`: each torch.OutOfMemoryError at start-up relaunches
  with half the environments until it trains; the figures are the num_envs path and the seconds per step;
- `default`: no [jobs.oom]: retried once, then `failed` with one line naming the GPU, who holds its memory (NVML:
  the neighbour's pid) and the fix.
Prints a table and writes a JSON. Needs isaacd, rsl-rl-lib, hydra-core, pydantic, structlog, nvidia-ml-py on the path.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from isaacd.control import request

NEIGHBOUR = """
import sys, time, torch
free, total = torch.cuda.mem_get_info(0)
hold = free - int(float(sys.argv[1]) * 2**30)
x = torch.empty(hold, dtype=torch.uint8, device="cuda:0")
print(f"neighbour holds {hold / 2**30:.1f} GiB of {total / 2**30:.1f} GiB", flush=True)
time.sleep(3600)
"""


def job(name: str, num_envs: int, oom: str) -> str:
    return textwrap.dedent(f"""
        [[jobs]]
        name = "{name}"
        device = "cuda:0"
        gpus = [0]
        num_envs = {num_envs}
        max_iterations = 20
        save_interval = 5
        log_root = "logs/{name}"
        spare = false
        extra_args = ["agent.num_steps_per_env=16"]
        [jobs.restart]
        backoff_initial = 1.0
        """) + oom


def run_one(work: Path, name: str, num_envs: int, oom: str, deadline: float) -> dict:
    d = work / name
    d.mkdir()
    cfg = d / "isaacd.toml"
    cfg.write_text(textwrap.dedent("""
        [supervisor]
        state_dir = "state"
        control_socket = "isaacd.sock"
        tick_interval = 0.2
        [metrics]
        enabled = false
        [gpu]
        source = "nvml"
        """) + job(name, num_envs, oom))
    log = open(d / "supervisor.log", "wb")
    sup = subprocess.Popen([sys.executable, "-m", "isaacd", "run", "--config", str(cfg)], stdout=log,
                           stderr=subprocess.STDOUT, start_new_session=True)
    t0 = time.time()
    out: dict = {"job": name, "num_envs": num_envs}
    try:
        while time.time() - t0 < deadline:
            time.sleep(0.5)
            try:
                st = request(d / "isaacd.sock", {"cmd": "status"}, timeout=5)
            except Exception:  # noqa: BLE001 - still starting
                continue
            j = next(x for x in st["jobs"] if x["name"] == name)
            if j["state"] == "failed" or (j["state"] == "running" and j.get("iteration") is not None):
                out.update(state=j["state"], reason=j.get("state_reason"), seconds=round(time.time() - t0, 1),
                           num_envs_now=j.get("num_envs"), iteration=j.get("iteration"))
                break
        evs = request(d / "isaacd.sock", {"cmd": "events", "job": name}, timeout=5)
        out["events"] = [{k: e.get(k) for k in ("event", "time", "num_envs", "from_num_envs", "to_num_envs",
                                                 "phase", "line", "reason", "delay_seconds")}
                         for e in evs if e["event"] in ("started", "exited", "cuda_oom", "num_envs_stepped_down",
                                                        "failed", "restart_scheduled")]
        starts = [e for e in evs if e["event"] == "started"]
        out["launches"] = [{"t": round(e["time"] - t0, 1) if isinstance(e.get("time"), (int, float)) else None,
                            "num_envs": (e.get("argv") or [])[(e.get("argv") or []).index("--num_envs") + 1]
                            if "--num_envs" in (e.get("argv") or []) else None} for e in starts]
    finally:
        sup.send_signal(signal.SIGTERM)
        try:
            sup.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(sup.pid, signal.SIGKILL)
        log.close()
    out["log_tail"] = (d / "state" / "logs" / f"{name}.log").read_text(errors="replace")[-1500:] \
        if (d / "state" / "logs" / f"{name}.log").exists() else None
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--leave-gib", type=float, default=1.5)
    ap.add_argument("--num-envs", type=int, default=1_000_000)
    ap.add_argument("--deadline", type=float, default=200)
    ap.add_argument("--out", default="cuda-oom-h200.json")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="isaacd-oom-", dir=os.environ.get("WORK", "/var/tmp")))
    nb = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(a.leave_gib)], stdout=subprocess.PIPE, text=True)
    print(nb.stdout.readline().strip(), f"(pid {nb.pid})", flush=True)
    res = {"neighbour_pid": nb.pid, "leave_gib": a.leave_gib}
    try:
        res["stepdown"] = run_one(work, "stepdown", a.num_envs,
                                  "[jobs.oom]\nstep_down = 0.5\nmin_num_envs = 4096\n", a.deadline)
        res["default"] = run_one(work, "default", a.num_envs, "", a.deadline)
    finally:
        nb.kill()
    Path(a.out).write_text(json.dumps(res, indent=1, default=str))
    for name in ("stepdown", "default"):
        r = res[name]
        print(f"\n== {name}: {r.get('state')} after {r.get('seconds')} s; num_envs {r['num_envs']} -> "
              f"{r.get('num_envs_now')}; iteration {r.get('iteration')}")
        print("   launches:", r.get("launches"))
        for e in r["events"]:
            print("  ", {k: v for k, v in e.items() if v is not None})
        if r.get("reason"):
            print("   reason:", r["reason"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
