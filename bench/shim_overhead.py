#!/usr/bin/env python3
"""What the launcher shim's snapshots and warm spare cost and buy (issue 11), in one run; prints figures, asserts nothing.

1. Throughput of the built-in cart-pole trainer through the shim (CPU, ``--num_envs 4096``, the default network and
   rollout) with a snapshot every iteration (``ISAACD_SNAPSHOT_EVERY=1``, the default) vs none (``=0``), runs
   alternating on/off. Per run: wall seconds per iteration (``first_iteration`` -> ``learn_finished`` events, over the
   iterations after the first) and the median of rsl_rl's own per-iteration time (TensorBoard ``Perf/collection
   time`` + ``Perf/learning_time``; the snapshot copy happens inside the collection of the next iteration). Also the
   medians of ``copy_seconds`` / ``write_seconds`` of ``snapshot_saved`` and the snapshot size.
2. Warm spare: ``spare_ready`` (preload seconds, RSS), then go -> ``runner_started`` / ``first_iteration`` against a
   cold ``shim.py -m isaacd_trainer ...`` of the same job (process start -> the same events).

    .venv/bin/python bench/shim_overhead.py                     # 3 rounds of 12 iterations, 4096 envs
    .venv/bin/python bench/shim_overhead.py --rounds 5 --iterations 20 --num-envs 4096
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIM = str(ROOT / "trainer" / "shim.py")
PY = sys.executable


def env_base() -> dict:
    env = dict(os.environ)
    for k in ("ISAACD_SHIM_EVENTS", "ISAACD_SNAPSHOT_EVERY", "ISAACD_SNAPSHOT_MIN_SECONDS", "ISAACD_SNAPSHOT_KEEP",
              "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def events(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def first(evs: list[dict], name: str) -> dict:
    return next(e for e in evs if e["event"] == name)


DEVICE = "cpu"  # --device


def job_argv(num_envs: int, iterations: int) -> list[str]:
    # --device is the simulation's only: the policy's is agent.device (default cuda:0), as in upstream Isaac Lab
    return ["-m", "isaacd_trainer", "--task", "Isaacd-Cartpole-v0", "--device", DEVICE, "--num_envs", str(num_envs),
            "--max_iterations", str(iterations), "--seed", "1", f"agent.device={DEVICE}"]


def tb_iteration_seconds(run_dir: Path) -> list[float]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    per: dict[int, float] = defaultdict(float)
    for f in sorted(run_dir.glob("events.out.tfevents.*")):
        for ev in EventFileLoader(str(f)).Load():
            for v in ev.summary.value:
                if v.tag in ("Perf/collection time", "Perf/learning_time"):
                    per[ev.step] += v.tensor.float_val[0] if v.tensor.float_val else v.simple_value
    return [per[k] for k in sorted(per)][1:]  # the first iteration warms up


def throughput_run(tmp: Path, snapshots: bool, num_envs: int, iterations: int) -> dict:
    d = Path(tempfile.mkdtemp(prefix="snap-on-" if snapshots else "snap-off-", dir=tmp))
    ev = d / "ev.jsonl"
    env = env_base()
    env["ISAACD_SHIM_EVENTS"] = str(ev)
    env["ISAACD_SNAPSHOT_EVERY"] = "1" if snapshots else "0"
    r = subprocess.run([PY, SHIM] + job_argv(num_envs, iterations), cwd=d, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"trainer failed ({r.returncode}):\n{r.stderr[-3000:]}")
    evs = events(ev)
    wall = (first(evs, "learn_finished")["time"] - first(evs, "first_iteration")["time"]) / (iterations - 1)
    run_dir = Path(first(evs, "runner_started")["run_dir"])
    snaps = [e for e in evs if e["event"] == "snapshot_saved"]
    return {"wall_per_it": wall, "tb_per_it": statistics.median(tb_iteration_seconds(run_dir)),
            "copy": [e["copy_seconds"] for e in snaps], "write": [e["write_seconds"] for e in snaps],
            "write_cpu": [e.get("write_cpu_seconds", float("nan")) for e in snaps],
            "bytes": [e["bytes"] for e in snaps], "skipped": sum(e["event"] == "snapshot_skipped" for e in evs)}


def cold_start(tmp: Path, num_envs: int) -> dict:
    d = Path(tempfile.mkdtemp(prefix="cold-", dir=tmp))
    ev = d / "ev.jsonl"
    env = env_base()
    env["ISAACD_SHIM_EVENTS"] = str(ev)
    t0 = time.time()
    r = subprocess.run([PY, SHIM] + job_argv(num_envs, 1), cwd=d, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"cold trainer failed:\n{r.stderr[-3000:]}")
    evs = events(ev)
    return {"runner_started": first(evs, "runner_started")["time"] - t0,
            "first_iteration": first(evs, "first_iteration")["time"] - t0}


def spare_start(tmp: Path, num_envs: int, preload: str) -> dict:
    d = Path(tempfile.mkdtemp(prefix="spare-", dir=tmp))
    fifo = d / "control"
    os.mkfifo(fifo)
    sev, jev = d / "spare.jsonl", d / "job.jsonl"
    env = env_base()
    env.update(ISAACD_SHIM_EVENTS=str(sev), ISAACD_SPARE_CONTROL=str(fifo), ISAACD_SPARE_DEVICE=DEVICE,
               ISAACD_SPARE_PRELOAD=preload)
    p = subprocess.Popen([PY, SHIM, "--isaacd-spare"], cwd=d, env=env, stdout=subprocess.DEVNULL,
                         stderr=open(d / "spare.err", "w"))
    deadline = time.monotonic() + 120
    while not any(e["event"] == "spare_ready" for e in events(sev)):
        if p.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"spare failed:\n{(d / 'spare.err').read_text()[-3000:]}")
        time.sleep(0.05)
    ready = first(events(sev), "spare_ready")
    time.sleep(1.0)  # a spare waits; the crash comes later
    go = {"argv": job_argv(num_envs, 1), "env": {"ISAACD_SHIM_EVENTS": str(jev)}, "cwd": str(d)}
    t0 = time.time()
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, (json.dumps(go) + "\n").encode())
    os.close(fd)
    if p.wait(300) != 0:
        raise SystemExit(f"spare run failed:\n{(d / 'spare.err').read_text()[-3000:]}")
    evs = events(jev)
    return {"preload_seconds": ready["preload_seconds"], "rss_bytes": ready["rss_bytes"],
            "errors": ready.get("preload_errors"),
            "runner_started": first(evs, "runner_started")["time"] - t0,
            "first_iteration": first(evs, "first_iteration")["time"] - t0}


def med(xs) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="throughput runs per mode (alternating)")
    ap.add_argument("--iterations", type=int, default=12, help="iterations per throughput run")
    ap.add_argument("--num-envs", type=int, default=4096)
    ap.add_argument("--starts", type=int, default=3, help="cold starts and spare go's each")
    ap.add_argument("--preload", default="isaacd_trainer.train_v2,isaacd_trainer.runtime")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--device", default="cpu", help="e.g. cuda:0 on a GPU host")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')}  {os.cpu_count()} CPUs  python {sys.version.split()[0]}  "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}", flush=True)
    with tempfile.TemporaryDirectory(prefix="isaacd-shim-bench-") as tmp_s:
        tmp = Path(tmp_s)
        if not args.skip_throughput:
            on, off = [], []
            for i in range(args.rounds):
                for snapshots, acc in ((True, on), (False, off)) if i % 2 == 0 else ((False, off), (True, on)):
                    r = throughput_run(tmp, snapshots, args.num_envs, args.iterations)
                    acc.append(r)
                    print(f"  snapshots {'on ' if snapshots else 'off'}: {r['wall_per_it']:.3f} s/it wall, "
                          f"{r['tb_per_it']:.3f} s/it rsl_rl", flush=True)
            w_on, w_off = med([r["wall_per_it"] for r in on]), med([r["wall_per_it"] for r in off])
            t_on, t_off = med([r["tb_per_it"] for r in on]), med([r["tb_per_it"] for r in off])
            copies = [c for r in on for c in r["copy"]]
            writes = [w for r in on for w in r["write"]]
            size = med([b for r in on for b in r["bytes"]])
            print(f"\nthroughput, {args.num_envs} envs, {args.iterations} iterations x {args.rounds} runs per mode "
                  f"(medians of runs)")
            print(f"  snapshots off: {1 / w_off:.4f} it/s wall ({w_off:.3f} s/it); rsl_rl's per-iteration time "
                  f"{t_off:.3f} s")
            print(f"  snapshots on : {1 / w_on:.4f} it/s wall ({w_on:.3f} s/it); rsl_rl's per-iteration time "
                  f"{t_on:.3f} s")
            print(f"  ratio on/off (throughput): wall {w_off / w_on:.4f}, rsl_rl per-iteration {t_off / t_on:.4f}")
            print(f"  snapshot: copy_seconds median {med(copies) * 1e3:.2f} ms (max {max(copies) * 1e3:.2f}), "
                  f"write_seconds median {med(writes) * 1e3:.2f} ms (max {max(writes) * 1e3:.2f}), "
                  f"size {size / 1024:.1f} KiB, {len(copies)} written, "
                  f"{sum(r['skipped'] for r in on)} skipped-reports")
            wcpu = med([c for r in on for c in r["write_cpu"]])
            print(f"  writer thread CPU per snapshot: median {wcpu * 1e3:.2f} ms")
            print(f"  cost bound, load-independent: (copy + writer CPU) / rsl_rl's per-iteration time (off) = "
                  f"{(med(copies) + wcpu) / t_off * 100:.3f} % -> throughput ratio >= {1 - (med(copies) + wcpu) / t_off:.4f}"
                  f" (copy alone {med(copies) / t_off * 100:.3f} %)", flush=True)
        cold, warm = [], []
        for _ in range(args.starts):
            cold.append(cold_start(tmp, args.num_envs))
            warm.append(spare_start(tmp, args.num_envs, args.preload))
            print(f"  cold: -> runner_started {cold[-1]['runner_started']:.2f} s, -> first_iteration "
                  f"{cold[-1]['first_iteration']:.2f} s | spare: preload {warm[-1]['preload_seconds']:.2f} s, go -> "
                  f"runner_started {warm[-1]['runner_started']:.2f} s, -> first_iteration "
                  f"{warm[-1]['first_iteration']:.2f} s", flush=True)
        print(f"\nwarm spare vs cold start, {args.num_envs} envs, {args.starts} each (medians); preload: {args.preload}")
        print(f"  spare: preload {med([w['preload_seconds'] for w in warm]):.2f} s, RSS "
              f"{med([w['rss_bytes'] for w in warm]) / 2**20:.0f} MiB"
              + (f", preload errors {warm[0]['errors']}" if warm[0]["errors"] else ""))
        for key in ("runner_started", "first_iteration"):
            c, w = med([x[key] for x in cold]), med([x[key] for x in warm])
            print(f"  -> {key:15s}: cold (process start) {c:.2f} s, spare (go) {w:.2f} s, saved {c - w:.2f} s "
                  f"({c / w:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
