#!/usr/bin/env python3
"""Soak: N minutes of everything at once on one small job, then let it finish.

A real `isaacd run` supervises the real built-in rsl_rl trainer while, at random moments:
  * the trainer is killed (SIGKILL),
  * the supervisor is killed (SIGKILL) and started again (it must adopt the trainer, not duplicate it),
  * the config is rewritten in place 20 times with SIGHUPs in between (a reload storm),
  * the control socket is flooded (64 silent half-requests held open, 4 clients polling in tight loops),
  * an operator stops the job (`isaacd stop`), sometimes with a supervisor kill right behind it, checks
    that it stays stopped across a supervisor restart, and starts it again (`isaacd start`).
A sampler thread watches /proc all along for two live trainers of the job at once.

Prints: kills survived (trainer and supervisor), duplicates (want 0), lost operator intents (want 0: a
trainer seen running after an acknowledged stop and before the matching start), max iterations redone
per crash (last TensorBoard step of a killed run minus the step its successor resumed after), and
whether the job completed once the attacks stopped.

    .venv/bin/python bench/soak.py --minutes 3          # a short soak
    .venv/bin/python bench/soak.py --minutes 30 --seed 7
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import SupervisorProc, builtin_job, wait_for, write_config  # noqa: E402

from isaacd.control import request  # noqa: E402
from isaacd.observations.tensorboard import TensorBoardTail  # noqa: E402

JOB = "soak"


class Soak:
    def __init__(self, root: Path, max_iterations: int, rng: random.Random):
        self.root, self.rng, self.max_iterations = root, rng, max_iterations
        self.done_attacking_at_iteration: int | None = None
        job = builtin_job(JOB, max_iterations=max_iterations, save_interval=2, extra_args=["--num_steps_per_env", "8"],
                          restart={"max_restarts": 10000, "window": 60.0, "backoff_initial": 0.2, "backoff_max": 1.0})
        # The divergence watchdog's rollbacks are not crashes; on this tiny job resumes can look like spikes to
        # it, which would blur "iterations redone per crash". Every other watchdog stays on.
        job += "\n[jobs.watchdogs.divergence]\nenabled = false\n"
        self.cfg = write_config(root, job)
        self.full = self.cfg.read_bytes()
        self.sp = SupervisorProc(self.cfg)
        self.counts = {"trainer_kills": 0, "supervisor_kills": 0, "reload_storms": 0, "socket_floods": 0,
                       "operator_stops": 0, "lost_intents": 0, "lost_intents_after_supervisor_crash": 0,
                       "lost_intents_no_crash": 0, "duplicates": 0}
        self.duplicate_sets: list[list[int]] = []
        self.stopped_on_purpose = threading.Event()  # between an acknowledged stop and its start
        self._watch_stop = threading.Event()

    # ---- observation ----------------------------------------------------------------------------------
    def trainers(self) -> list[int]:
        """Live (non-zombie) process-group leaders running this job's trainer."""
        out = []
        marker = str(self.root / "logs").encode()
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes()
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] == "Z" or int(fields[2]) != int(d):  # zombie, or not the group leader
                continue
            if marker in cmd and b"--run_name\0" + JOB.encode() in cmd:
                out.append(int(d))
        return out

    def watch(self) -> None:
        while not self._watch_stop.wait(0.2):
            pids = self.trainers()
            if len(pids) > 1 and sorted(pids) not in self.duplicate_sets:
                self.duplicate_sets.append(sorted(pids))
                self.counts["duplicates"] += 1
                print(f"  !! duplicate trainers: {pids}", flush=True)
            if pids and self.stopped_on_purpose.is_set():
                self.counts["lost_intents"] += 1
                print(f"  !! trainer {pids} running after an acknowledged stop", flush=True)
                self.stopped_on_purpose.clear()  # count each lost intent once

    def status(self) -> dict[str, Any]:
        return request(self.sp.socket, {"cmd": "status"}, timeout=10, retry_for=30)

    def job(self) -> dict[str, Any]:
        return self.status()["jobs"][0]

    # ---- attacks -------------------------------------------------------------------------------------
    def kill_trainer(self) -> None:
        pids = self.trainers()
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            self.counts["trainer_kills"] += 1

    def kill_supervisor(self) -> None:
        os.kill(self.sp.proc.pid, signal.SIGKILL)
        self.sp.proc.wait(30)
        self.counts["supervisor_kills"] += 1
        self.sp.start()

    def reload_storm(self) -> None:
        cut = self.rng.randrange(1, len(self.full))
        for _ in range(20):
            with open(self.cfg, "r+b") as fh:
                fh.truncate(0)
                fh.write(self.full[:cut])
                fh.flush()
                os.kill(self.sp.proc.pid, signal.SIGHUP)
                time.sleep(self.rng.uniform(0.0, 0.15))
                fh.write(self.full[cut:])
        self.counts["reload_storms"] += 1

    def socket_flood(self) -> None:
        socks = []
        for _ in range(64):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(str(self.sp.socket))
                s.sendall(b'{"cmd": "sta')
                socks.append(s)
            except OSError:
                s.close()
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                try:
                    request(self.sp.socket, {"cmd": "status"}, timeout=10, retry_for=30)
                except Exception:  # noqa: BLE001 - a supervisor killed meanwhile
                    time.sleep(0.1)

        pollers = [threading.Thread(target=poll) for _ in range(4)]
        for t in pollers:
            t.start()
        time.sleep(self.rng.uniform(1.0, 3.0))
        stop.set()
        for t in pollers:
            t.join()
        for s in socks:
            s.close()
        self.counts["socket_floods"] += 1

    def operator_stop(self) -> None:
        j = self.job()
        if j["state"] not in ("running", "starting"):
            return
        res = self.sp.cli("stop", JOB, check=False)
        if res.returncode != 0:
            print(f"  stop refused: {res.stderr.strip()}", flush=True)
            return
        self.counts["operator_stops"] += 1
        crashed = self.rng.random() < 0.5
        if crashed:  # a supervisor crash right behind the operator's stop
            time.sleep(self.rng.uniform(0.0, 1.0))
            self.kill_supervisor()
        try:
            wait_for(lambda: self.job()["state"] in ("stopped", "completed"), 60, what="stopped")
        except AssertionError:
            # the acknowledged stop was forgotten: the job runs on
            self.counts["lost_intents"] += 1
            self.counts["lost_intents_after_supervisor_crash" if crashed else "lost_intents_no_crash"] += 1
            print(f"  !! acknowledged stop lost ({'supervisor killed while stopping' if crashed else 'no crash'}); "
                  f"job is {self.job()['state']}", flush=True)
            return
        if self.job()["state"] == "completed":  # it reached max_iterations meanwhile: nothing to start
            return
        self.stopped_on_purpose.set()
        if self.rng.random() < 0.5:
            self.kill_supervisor()  # the stop must survive a restart
        time.sleep(self.rng.uniform(1.0, 3.0))
        self.stopped_on_purpose.clear()
        self.sp.cli("start", JOB, check=False)

    # ---- the run -----------------------------------------------------------------------------------------
    def run(self, minutes: float, finish_timeout: float) -> dict[str, Any]:
        self.sp.start()
        threading.Thread(target=self.watch, daemon=True).start()
        wait_for(lambda: self.job()["iteration"] is not None, 120, what="first iteration")
        attacks = [(self.kill_trainer, 4), (self.kill_supervisor, 2), (self.reload_storm, 2), (self.socket_flood, 2),
                   (self.operator_stop, 1)]
        deadline = time.time() + minutes * 60
        while time.time() < deadline:
            attack = self.rng.choices([a for a, _ in attacks], [w for _, w in attacks])[0]
            print(f"{time.strftime('%H:%M:%S')} {attack.__name__}", flush=True)
            try:
                attack()
            except Exception as exc:  # noqa: BLE001 - report and go on: the figures say what broke
                print(f"  attack {attack.__name__} failed: {exc!r}", flush=True)
            time.sleep(self.rng.uniform(1.0, 4.0))
        print(f"{time.strftime('%H:%M:%S')} attacks over; waiting for the job to complete", flush=True)
        self.cfg.write_bytes(self.full)
        if self.job()["state"] == "stopped":
            self.sp.cli("start", JOB, check=False)
        self.done_attacking_at_iteration = self.job()["iteration"]
        completed = False
        try:
            wait_for(lambda: self.job()["state"] in ("completed", "failed"), finish_timeout, interval=1.0,
                     what="completion")
            completed = self.job()["state"] == "completed"
        except AssertionError:
            pass
        final = self.job()
        self._watch_stop.set()
        self.sp.stop()
        return {**self.counts, "max_iterations_redone_per_crash": self.redone(), "completed": completed,
                "final_state": final["state"], "final_reason": final["state_reason"], "restarts": final["restarts"],
                "checkpoint": (final["checkpoint"] or {}).get("iteration"), "max_iterations": self.max_iterations,
                "iteration_when_attacks_ended": self.done_attacking_at_iteration}

    def redone(self) -> int | None:
        """Max over consecutive run dirs of (last step of a run) - (first step of the next run - 1)."""
        exp = self.root / "logs" / "rsl_rl" / JOB
        spans = []
        for run in sorted(p for p in exp.iterdir() if p.is_dir()):
            tail = TensorBoardTail(run)
            tail.poll()
            if tail.progress.first_step is not None:
                spans.append((tail.progress.first_step, tail.progress.last_step))
        gaps = [prev[1] - (nxt[0] - 1) for prev, nxt in zip(spans, spans[1:])]
        return max(gaps) if gaps else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0, help="how long the attacks go on")
    ap.add_argument("--max-iterations", type=int, default=None,
                    help="the job's total iterations (default: enough to outlast the attacks, 3.5/s + 300)")
    ap.add_argument("--finish-timeout", type=float, default=600.0, help="seconds to wait for completion afterwards")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="isaacd-soak-") as tmp:
        total = args.max_iterations or int(args.minutes * 60 * 3.5) + 300
        soak = Soak(Path(tmp), total, random.Random(args.seed))
        try:
            res = soak.run(args.minutes, args.finish_timeout)
        finally:
            if soak.sp.proc and soak.sp.proc.poll() is None:
                soak.sp.stop()
            for pid in soak.trainers():
                os.kill(pid, signal.SIGKILL)
    print()
    print(f"kills survived              {res['trainer_kills']} trainer, {res['supervisor_kills']} supervisor")
    print(f"reload storms / floods      {res['reload_storms']} / {res['socket_floods']}")
    print(f"operator stops              {res['operator_stops']}")
    print(f"duplicates                  {res['duplicates']} (want 0)")
    print(f"lost operator intents       {res['lost_intents']} (want 0; {res['lost_intents_after_supervisor_crash']} "
          f"with the supervisor killed while stopping, {res['lost_intents_no_crash']} without)")
    print(f"max iterations redone/crash {res['max_iterations_redone_per_crash']}")
    print(f"job completed               {res['completed']} ({res['final_state']}: {res['final_reason']}; "
          f"restarts {res['restarts']}, checkpoint {res['checkpoint']})")
    print(json.dumps(res))
    return 0 if res["completed"] and not res["duplicates"] and not res["lost_intents"] else 1


if __name__ == "__main__":
    sys.exit(main())
