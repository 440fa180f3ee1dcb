#!/usr/bin/env python3
"""Iterations lost per operator stop, operator restart and watchdog restart, with and without the shim.

Upstream Isaac Lab saves nothing on SIGINT/SIGTERM (2.x has no handler; 3.0 swallows
KeyboardInterrupt), so a stop loses everything since the last periodic checkpoint: up to
`save_interval` iterations (Isaac Lab's default is 50). isaacd's launcher shim saves
`model_<N>.pt` at the next iteration boundary instead. For each case this runs a real `isaacd run`
with the built-in trainer (the Isaac Lab 2.3 contract, through the shim or not), lets it train to a
random iteration past a checkpoint, acts, and measures

    lost = last iteration the stopped trainer logged to TensorBoard - newest complete checkpoint of its run
           (iterations trained but in no checkpoint: a resume redoes them)

    .venv/bin/python bench/stop_loss.py              # 4 rounds per case, save_interval 10
    .venv/bin/python bench/stop_loss.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import SupervisorProc, builtin_job, wait_for, write_config  # noqa: E402

from isaacd.observations.checkpoints import newest_complete  # noqa: E402
from isaacd.observations.tensorboard import TensorBoardTail  # noqa: E402

FAST = ["agent.num_steps_per_env=8"]


def last_step(run_dir: Path) -> int | None:
    tail = TensorBoardTail(run_dir)
    tail.poll()
    return tail.progress.last_step


def one_round(tmp: Path, case: str, shim: bool, save_interval: int, rng: random.Random) -> int:
    watchdogs = {}
    extra = list(FAST)
    if case == "watchdog restart":
        # lr 0 freezes the policy: a real loss stagnation, which the watchdog answers with a restart
        extra += ["agent.algorithm.learning_rate=0.0", "agent.algorithm.schedule=fixed"]
        watchdogs = {"loss_stagnation": {"tags": ["Loss/surrogate"], "window": 5, "action": "restart",
                                         "warmup_seconds": 0.0,
                                         "warmup_iterations": save_interval + rng.randint(1, save_interval - 1),
                                         "cooldown": 3600.0}}
    fields = {"extra_args": extra, "save_interval": save_interval, "max_iterations": 10_000, "shim": shim,
              "stop_timeout": 20.0}
    cfg = write_config(tmp, _job("b", fields, watchdogs))
    sp = SupervisorProc(cfg).start()
    try:
        target = save_interval + rng.randint(1, save_interval - 1)  # past a checkpoint, before the next
        j = wait_for(lambda: (x := sp.job("b"))["iteration"] is not None and x["iteration"] >= target and x, 300,
                     what=f"iteration {target}")
        run = Path(j["run_dir"])
        if case == "operator stop":
            sp.cli("stop", "b")
            wait_for(lambda: sp.job("b")["state"] == "stopped", 60, what="stopped")
        elif case == "operator restart":
            sp.cli("restart", "b")
        else:
            wait_for(lambda: any(e["event"] == "watchdog_trip" for e in sp.events("b")), 300, what="watchdog trip")
        # the stopped trainer has exited once the next one starts (or the job is stopped): its run dir is final
        wait_for(lambda: sp.job("b")["state"] == "stopped"
                 or len([e for e in sp.events("b") if e["event"] == "started"]) >= 2, 60, what="the trainer's exit")
        after = newest_complete(run)
        return (last_step(run) or 0) - (after.iteration if after else -1)
    finally:
        sp.stop()


def _job(name: str, fields: dict, watchdogs: dict) -> str:
    job = builtin_job(name, **fields)
    return job + "".join(f"\n[jobs.watchdogs.{w}]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in t.items())
                         for w, t in watchdogs.items())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--save-interval", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", default="operator stop,operator restart,watchdog restart")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rows = []
    for case in args.cases.split(","):
        for shim in (True, False):
            lost = []
            for _ in range(args.rounds):
                with tempfile.TemporaryDirectory(prefix="isaacd-bench-") as tmp:
                    t0 = time.time()
                    lost.append(one_round(Path(tmp), case, shim, args.save_interval, rng))
                    print(f"  {case:16s} shim={'on ' if shim else 'off'} lost {lost[-1]:3d} ({time.time() - t0:.0f} s)",
                          flush=True)
            rows.append((case, shim, statistics.median(lost), max(lost)))
    print(f"\niterations lost (save_interval {args.save_interval}, {args.rounds} rounds each)")
    print(f"{'case':18s} {'shim':5s} {'median':>7s} {'max':>5s}")
    for case, shim, med, mx in rows:
        print(f"{case:18s} {'on' if shim else 'off':5s} {med:7.1f} {mx:5d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
