#!/usr/bin/env python3
"""Container killed -> trainer iterating again, for runtime = "systemd" (Quadlet) in the testbed.

Boots the systemd testbed (systemd 257 + Podman 5.4, see tests/testbed/tb.py), installs the
supervisor unit, runs the built-in cart-pole trainer as a Quadlet container, then kills the
container N times and splits each recovery into:

  detection      container died (Podman's `died` event)       -> isaacd recorded the exit
  unit restart   isaacd recorded the exit                      -> the new container started
                 (checkpoint choice, unit file, daemon-reload, systemctl start, podman run)
  trainer start  the new container started                    -> isaacd saw a new TensorBoard
                 step (Python + torch import, env/policy build, checkpoint load, one iteration)

Backoff is set to 0 so the figures are the mechanism; the default policy adds backoff_initial
(1 s) to the first restart and doubles it for quick repeats.

    sudo .venv/bin/python bench/container-recovery.py [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "testbed"))
import harness as H  # noqa: E402


def podman_events(tb, since: float, cid: str | None = None) -> list[dict]:
    flt = f"--filter container={cid}" if cid else f"--filter label=isaacd.job={H.JOB}"
    r = tb.shx(f"podman events --stream=false --since {int(since) - 1} --until 0s {flt} --format json", check=False)
    out = []
    for line in r.stdout.splitlines():
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            continue
        t = e.get("timeNano") or e.get("time")
        if isinstance(t, str):
            try:
                t = int(t)
            except ValueError:
                continue
        out.append({"action": e.get("Status") or e.get("Action"), "id": e.get("ID") or e.get("id"),
                    "time": t / 1e9 if t and t > 1e12 else float(t or 0)})
    return out


def one_run(tb, n_events_before: int) -> dict[str, float]:
    j = H.job_status(tb)
    cid = j["container_id"]
    t_issue = time.time()
    tb.shx(f"podman kill {H.CONTAINER}")

    def recovered():
        evs = H.events(tb)[n_events_before:]
        ex = [e for e in evs if e["event"] == "exited"]
        run = [e for e in evs if e["event"] == "state" and e.get("new") == "running"]
        return (ex[0], run[0]) if ex and run and run[0]["time"] > ex[0]["time"] else None

    exited, running = H.wait(recovered, 180, "recovery")
    evs = podman_events(tb, t_issue)
    died = next(e["time"] for e in evs if e["action"] == "died" and e["id"].startswith(cid[:12]))
    new_start = next(e["time"] for e in evs if e["action"] == "start" and not e["id"].startswith(cid[:12]))
    return {"detection_s": exited["time"] - died, "unit_restart_s": new_start - exited["time"],
            "trainer_start_s": running["time"] - new_start, "total_s": running["time"] - died,
            "kill_to_died_s": died - t_issue}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tb = H.make_testbed("isaacd-tb-bench")
    t0 = time.time()
    boot = tb.boot()
    try:
        H.install_supervisor(tb, H.job_config(backoff_initial=0.0))
        tb.sh("systemctl start isaaclab-supervisor", timeout=200)
        H.wait_job(tb, lambda j: j["state"] == "running" and j["checkpoint"], 240, "first checkpoint")
        runs = []
        for i in range(args.runs):
            n = len(H.events(tb))
            r = one_run(tb, n)
            runs.append(r)
            if not args.json:
                print(f"run {i + 1}: " + "  ".join(f"{k.removesuffix('_s')} {v:6.3f} s" for k, v in r.items()),
                      flush=True)
            # a fresh checkpoint from this attempt before the next kill
            it = H.job_status(tb)["iteration"] or 0
            H.wait_job(tb, lambda j: j["checkpoint"] and j["checkpoint"]["iteration"] > it, 120, "a new checkpoint")
        j = H.job_status(tb)
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        lo = {k: min(r[k] for r in runs) for k in runs[0]}
        hi = {k: max(r[k] for r in runs) for k in runs[0]}
        res = {"runs": runs, "median": med, "min": lo, "max": hi, "restarts": j["restarts"],
               "testbed_boot_s": boot, "wall_s": time.time() - t0,
               "setup": "systemd 257 + Podman 5.4 (nspawn testbed), Quadlet unit, Rootfs=/:O, builtin cart-pole, "
                        "64 envs x 8 steps, CPU, backoff 0"}
        if args.json:
            print(json.dumps(res, indent=1))
        else:
            print(f"\nmedian of {len(runs)} (min-max):")
            for k in med:
                print(f"  {k.removesuffix('_s'):<16} {med[k]:6.3f} s   ({lo[k]:.3f}-{hi[k]:.3f})")
            print(f"restarts counted by isaacd: {j['restarts']}; testbed boot {boot:.2f} s; "
                  f"wall {time.time() - t0:.0f} s")
    finally:
        tb.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
