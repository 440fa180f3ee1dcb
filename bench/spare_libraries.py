#!/usr/bin/env python3
"""Warm spare vs cold start for skrl and rl_games jobs (they run without the shim; the spare is hosted by it).

For each library and each of cold / warm: a supervisor runs the faithful stand-in through an Isaac Lab-shaped
checkout (process runtime, CPU), the trainer is killed with SIGKILL `--kills` times, and the time from the kill
until the new attempt's run dir exists is taken: the train script is then past its imports, its env and its agent,
which is what a spare does ahead. (Not "first logged iteration": skrl writes TensorBoard every `write_interval`
timesteps, auto = 1 % of the run, so that would measure skrl's logging cadence.)

    .venv/bin/python bench/spare_libraries.py             # 3 kills per setup, medians and the cold/warm ratio

The stand-ins import torch and a small torch library; a real Isaac Lab image imports skrl / rl_games, Isaac Lab and
boots Isaac Sim (tens of seconds that no spare can do ahead, since the app launcher needs the job's args).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import SupervisorProc, builtin_job, wait_for, write_config  # noqa: E402
from test_workflows_skrl_rl_games_e2e import MODULES, R, fake_isaaclab  # noqa: E402


def run(library: str, spare: bool, kills: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="isaacd-bench-") as d:
        tmp = Path(d)
        lab = fake_isaaclab(tmp / "IsaacLab", library)
        extra = ["--step_delay", "0.03"] + ([f"agent.agent.rollouts={R}"] if library == "skrl"
                                            else [f"agent.params.config.horizon_length={R}"])
        cfg = write_config(tmp, builtin_job("bench", workflow=library, isaaclab_dir=str(lab), launcher=[sys.executable],
                                            task="Isaacd-Cartpole-v0", num_envs=32, max_iterations=2000,
                                            save_interval=3, extra_args=extra, spare=spare,
                                            spare_preload=[MODULES[library], "isaacd_trainer.minilib"]))
        sp = SupervisorProc(cfg).start()
        out = []
        try:
            for _ in range(kills):
                # the trainer through its start-up with a checkpoint of its own (so the kill is no "quick failure"
                # and no backoff step is counted) and, warm, the next spare ready behind it. Not "running": skrl
                # logs to TensorBoard only every write_interval (auto: 1 % of the run)
                j = wait_for(lambda: (x := sp.job("bench"))["pid"] and x["run_dir"] and x["checkpoint"]
                             and x["checkpoint"]["path"].startswith(x["run_dir"] + "/")
                             and (not spare or x["spare"].get("state") == "ready") and x, 300, what="the trainer up")
                os.kill(j["pid"], signal.SIGKILL)
                t = time.monotonic()
                wait_for(lambda: sp.job("bench")["run_dir"] not in (None, j["run_dir"]), 300, interval=0.01,
                         what="the new run dir")
                out.append(time.monotonic() - t)
        finally:
            sp.stop()
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=3)
    args = ap.parse_args()
    print(f"kill -9 -> the new attempt's run dir, {args.kills} kills per setup, CPU, faithful stand-ins; medians (max)")
    for library in ("skrl", "rl_games"):
        cold, warm = run(library, False, args.kills), run(library, True, args.kills)
        mc, mw = statistics.median(cold), statistics.median(warm)
        print(f"{library:9s} cold {mc:6.2f} s ({max(cold):.2f})   warm spare {mw:6.2f} s ({max(warm):.2f})   "
              f"cold/warm {mc / mw:5.1f}x", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
