#!/usr/bin/env python3
"""Zombie soak (issue 37): a real `isaacd run` through N minutes of churn, counting its zombie children.

A few built-in-trainer jobs (process runtime, each with a warm spare, submitted into `[supervisor] jobs_dir` as a
sweep's trials are) are put through, in turn, one after the other: an operator stop then start, an operator
restart, a kill -9 of the trainer (the spare takes over), a kill -9 of the spare, and a cancel then a new submit.
Each of these ends a child of the supervisor (a trainer, a killed or dead spare); before issue 37's fix every
killed spare stayed `<defunct>` under the supervisor until it exited. A sampler reads /proc every --sample seconds:
how many children the supervisor has, and how many of them are zombies (state Z in /proc/<pid>/stat). The final
line adds how many children ended meanwhile (the supervisor log's `exited`, `spare_stopped`, `spare_exited`).

Prints one line per sample and a final line; it asserts nothing (figures, never timing asserts):

    .venv/bin/python bench/zombie_soak.py --minutes 3            # a short soak (--quick: one minute)
    .venv/bin/python bench/zombie_soak.py                        # an hour (the issue's "hour of churn")
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import SupervisorProc, builtin_job, children_of, wait_for, write_config  # noqa: E402

ACTIONS = ("stop_start", "restart", "kill9", "kill9_spare", "cancel_submit")
ENDED = ("exited", "spare_stopped", "spare_exited")  # a child of the supervisor ended (trainer, spare killed, spare died)
QUIET = "".join(f"\n[jobs.watchdogs.{w}]\nenabled = false\n" for w in ("no_progress", "loss_stagnation",
                                                                        "reward_plateau", "divergence"))


class ZombieSoak:
    def __init__(self, root: Path, jobs: int, spare: str, sample_every: float, rng: random.Random):
        self.names = [f"z{i}" for i in range(jobs)]
        self.rng, self.sample_every = rng, sample_every
        self.files = {n: root / f"{n}.toml" for n in self.names}  # what `isaacd submit` is given
        for n, path in self.files.items():
            path.write_text(builtin_job(n, device="cpu", spare=spare, max_iterations=10_000_000, save_interval=5,
                                        extra_args=["agent.num_steps_per_env=8"],
                                        restart={"max_restarts": 100000, "window": 60.0, "backoff_initial": 0.2,
                                                 "backoff_max": 1.0}) + QUIET)
        cfg = write_config(root, "")
        cfg.write_text("jobs = []  # every job is submitted\n"
                       + cfg.read_text().replace("[supervisor]\n", '[supervisor]\njobs_dir = "jobs.d"\n', 1))
        self.sp = SupervisorProc(cfg)
        self.counts = {a: 0 for a in ACTIONS} | {"timeouts": 0}
        self.samples: list[tuple[float, int, int]] = []  # (seconds since start, children, zombies)
        self.t0 = 0.0
        self._stop = threading.Event()

    # ---- observation ----------------------------------------------------------------------------------
    def sample(self) -> tuple[int, int]:
        assert self.sp.proc is not None
        kids = children_of(self.sp.proc.pid)
        return len(kids), sum(1 for state in kids.values() if state == "Z")

    def ended(self) -> dict[str, int]:
        """Children that ended, by the supervisor log's events (a cancelled job's journal is set aside)."""
        out = dict.fromkeys(ENDED, 0)
        for line in self.sp.log_text().splitlines():
            if line.startswith("{"):
                event = json.loads(line).get("event")
                if event in out:
                    out[event] += 1
        return out

    def _sampler(self) -> None:
        while not self._stop.wait(self.sample_every):
            children, zombies = self.sample()
            t = time.monotonic() - self.t0
            self.samples.append((t, children, zombies))
            acted = sum(self.counts[a] for a in ACTIONS)
            print(f"t={t:7.1f}s children={children} zombies={zombies} actions={acted}", flush=True)

    # ---- churn ----------------------------------------------------------------------------------------
    def job(self, name: str) -> dict[str, Any]:
        return self.sp.job(name)

    def running(self, name: str, other_than: int | None = None, timeout: float = 180) -> dict[str, Any] | None:
        try:
            return wait_for(lambda: (x := self.job(name))["state"] == "running" and x["pid"] not in (None, other_than)
                            and x, timeout, what=f"{name} running")
        except AssertionError:
            self.counts["timeouts"] += 1
            return None

    def act(self, name: str, action: str) -> None:
        j = self.running(name)
        if j is None:
            return
        time.sleep(self.rng.uniform(0.5, 3.0))  # let the spare start (or not yet): both are churn a host sees
        if action == "stop_start":
            self.sp.cli("stop", name, check=False)
            wait_for(lambda: self.job(name)["state"] == "stopped", 120, what=f"{name} stopped")
            self.sp.cli("start", name, check=False)
        elif action == "restart":
            self.sp.cli("restart", name, check=False)
        elif action == "cancel_submit":
            self.sp.cli("cancel", name, check=False)
            wait_for(lambda: name not in [x["name"] for x in self.sp.status()["jobs"]], 120, what=f"{name} gone")
            self.sp.cli("submit", str(self.files[name]), check=False)
        else:  # kill9: the trainer (its spare takes over); kill9_spare: the spare (a new one follows later)
            pid = j["pid"] if action == "kill9" else (self.job(name)["spare"] or {}).get("pid")
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.counts[action] += 1
        self.running(name, other_than=j["pid"] if action != "kill9_spare" else None)

    def run(self, minutes: float) -> int:
        self.sp.start()
        for path in self.files.values():
            self.sp.cli("submit", str(path))
        self.t0 = time.monotonic()
        sampler = threading.Thread(target=self._sampler, daemon=True)
        sampler.start()
        try:
            turn = 0
            while time.monotonic() - self.t0 < minutes * 60:  # every action on every job in turn
                self.act(self.names[turn % len(self.names)], ACTIONS[turn // len(self.names) % len(ACTIONS)])
                turn += 1
            time.sleep(2 * self.sample_every)  # the last kills' reaping, seen by the sampler
            self._stop.set()
            sampler.join()
            children, zombies = self.sample()
            ended = self.ended()
        finally:
            self._stop.set()
            self.sp.stop()
        worst = max((z for _, _, z in self.samples), default=zombies)
        most = max((c for _, c, _ in self.samples), default=children)
        minutes_run = (time.monotonic() - self.t0) / 60
        print(f"zombie_soak: {minutes_run:.1f} min, {len(self.names)} jobs, actions "
              + ", ".join(f"{a}={self.counts[a]}" for a in ACTIONS)
              + f" (timeouts {self.counts['timeouts']}); children ended: trainers {ended['exited']}, spares killed "
              f"{ended['spare_stopped']}, spares died {ended['spare_exited']}; samples {len(self.samples)}: "
              f"zombies max {worst} final {zombies}; children max {most} final {children}", flush=True)
        return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60.0, help="how long to churn (default 60)")
    ap.add_argument("--quick", action="store_true", help="a short run: one minute")
    ap.add_argument("--jobs", type=int, default=2, help="built-in-trainer jobs (default 2)")
    ap.add_argument("--spare", default="imports", choices=("imports", "auto", "booted"),
                    help='the jobs\' spare (default "imports": the cheapest; "auto" is the default config\'s)')
    ap.add_argument("--sample", type=float, default=5.0, help="seconds between samples (default 5)")
    ap.add_argument("--seed", type=int, default=37)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="isaacd-zombie-soak-") as tmp:
        soak = ZombieSoak(Path(tmp), args.jobs, args.spare, args.sample, random.Random(args.seed))
        return soak.run(1.0 if args.quick else args.minutes)


if __name__ == "__main__":
    raise SystemExit(main())
