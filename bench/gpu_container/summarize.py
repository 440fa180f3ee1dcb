#!/usr/bin/env python3
"""The figures of a bench/gpu_container/run.sh run, from its results folder (res/ in results.tar.gz).

    summarize.py RES_DIR
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path


def main() -> int:
    r = Path(sys.argv[1])
    out: dict = {}
    for name in ("probe-gpu0", "probe-uuid", "probe-none", "probe-gpu1"):
        f = r / f"{name}.txt"
        if f.exists():
            t = f.read_text()
            m = re.search(r"PROBE (\{.*\})", t)
            out[name] = json.loads(m.group(1)) if m else t.strip().splitlines()[-1:]
    st = json.loads((r / "status-training.json").read_text())
    j = st["jobs"][0]
    out["training"] = {"fps": j.get("fps"), "iteration": j.get("iteration"), "cgroup": j.get("cgroup"),
                       "container_id": (j.get("container_id") or "")[:12], "pid": j.get("pid"),
                       "gpus": st.get("gpus")}
    m = (r / "metrics-training.txt").read_text()
    out["metrics"] = [ln for ln in m.splitlines()
                      if ln.startswith(("isaacd_gpu_utilization_ratio", "isaacd_gpu_job_info",
                                        "isaacd_gpu_process_memory_used_bytes", "isaacd_job_env_steps_per_second"))]
    ev = json.loads((r / "events.json").read_text())
    kills = {}
    for ln in (r / "restart-times.txt").read_text().splitlines():
        if "kill_at=" in ln:
            k, v = ln.split()
            kills[k] = float(v.split("=")[1])
    restarts = []
    for label, t_kill in kills.items():
        nxt = [e for e in ev if e["time"] >= t_kill]
        ex = next(e for e in nxt if e["event"] == "exited")
        started = next(e for e in nxt if e["event"] == "started")
        rd = next(e for e in nxt if e["event"] == "run_dir")
        running = next(e for e in nxt if e["event"] == "state" and e.get("new") == "running")
        restarts.append({
            "what": label, "exit": ex.get("description"), "iteration_at_exit": ex.get("iteration"),
            "resumed_from": (started.get("resume_from") or {}).get("path"),
            "exit_seen_s": round(ex["time"] - t_kill, 2), "container_started_s": round(started["time"] - t_kill, 2),
            "new_run_dir_s": round(rd["time"] - t_kill, 2), "running_s": round(running["time"] - t_kill, 2),
        })
    out["restarts"] = restarts
    fb = r / "fallback.json"
    if fb.exists():
        d = json.loads(fb.read_text())
        u = d.get("gpu_util_samples") or [0]
        out["fallback"] = {k: d.get(k) for k in ("privileged", "notify", "mainpid_comm", "attributed_by_cgroup",
                                                 "proc_cgroup", "new_checkpoints", "fps_last", "iterations",
                                                 "execstop_rc", "container_gone")}
        out["fallback"]["resume_from"] = (d.get("resume_from") or {}).get("path")
        out["fallback"]["gpu_util_median"] = statistics.median(u)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
