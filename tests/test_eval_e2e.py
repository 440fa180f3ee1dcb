"""Checkpoint evaluation beside training, end to end (issue 41): a real `isaacd run`, the real built-in trainer (its
rsl_rl cart-pole on the CPU) and its real evaluation mode, one supervisor for the whole file.

The test orders what happens, not the speed of the processes: the trainer is held (SIGSTOP) once it has written a few
checkpoints, so the set the keeper chooses from is known; a torn checkpoint is put beside them (a truncated copy of a
real one, named as the trainer would); the first evaluation is SIGKILLed the moment it is seen. Then: the torn one is
refused before any launch and given up with the reason, the killed one is retried and scored, never counted as a
training restart; the same checkpoint evaluated again with the same seed (the killed evaluation's own command line and
variables, read from /proc before the kill) gives the same score; the best is named in the status; and once training
is let go it completes with every TensorBoard step logged once (the evaluations write their own event file, in
`<run dir>/eval`, at step = the checkpoint's iteration)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from helpers import wait_for, write_config
from test_trainer import scalars

from isaacd.cli.doctor_eval import check_eval_video
from isaacd.config.schema import parse_config
from isaacd.observations.checkpoints import checkpoint_problem

pytestmark = pytest.mark.slow

MAX_ITERATIONS = 10
JOB = f"""
[[jobs]]
name = "cp"
num_envs = 32
max_iterations = {MAX_ITERATIONS}
save_interval = 2
log_root = "logs"
stop_timeout = 10.0
device = "cpu"
spare = false
extra_args = ["agent.num_steps_per_env=8"]
environment = {{ OMP_NUM_THREADS = "1" }}
[jobs.eval]
every = 1
episodes = 8
num_envs = 8
seed = 7
retries = 2
video = true
""" + "".join(f"[jobs.watchdogs.{w}]\nenabled = false\n" for w in (  # a held trainer is no hang here
    "no_progress", "duty_cycle", "loss_stagnation", "reward_plateau", "divergence", "gpu_temperature", "xid"))
NO_VIDEO = "no renderer: the built-in trainer's environments draw nothing"  # evaluate.py's; doctor_eval's at once
SAME = ("return_mean", "return_std", "length_mean", "length_std", "episodes", "seed", "num_envs")


def evals_of(sp, kind: str) -> list[dict]:  # noqa: ANN001
    return [e for e in sp.events("cp") if e["event"] == kind]


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(kv.decode().split("=", 1) for kv in raw if b"=" in kv)


def test_evaluations_beside_training_retried_refused_reproducible_and_the_best_named(tmp_path, supervisor_factory):
    sp = supervisor_factory(write_config(tmp_path, JOB))
    # model_4 begun: model_2 is whole (the trainer saves one at a time), so at least 0 and 2 are whole at the freeze
    run_dir = wait_for(lambda: next((tmp_path / "logs").glob("rsl_rl/cp/*/model_4.pt"), None), 60,
                       interval=0.02, what="checkpoint 4").parent
    trainer = sp.job("cp")["pid"]
    os.killpg(trainer, signal.SIGSTOP)  # held: the keeper chooses from these checkpoints alone
    try:
        # the whole ones only: rsl_rl's save writes model_N.pt in place, so the freeze may catch one half-written,
        # and the keeper looks only up to the newest whole one (the observer's): a torn one put below a half-written
        # newest was above it, and never looked at until the trainer ran again (CI, 2026-12-06)
        saved = sorted(int(p.stem.split("_")[1]) for p in run_dir.glob("model_*.pt") if checkpoint_problem(p) is None)
        newest = saved[-1]
        # a torn checkpoint just below the newest (among the newest few, which are always evaluated): the first half
        # of a real one, as a trainer killed mid-save leaves it
        torn = run_dir / f"model_{newest - 1}.pt"
        whole = (run_dir / f"model_{saved[0]}.pt").read_bytes()
        torn.write_bytes(whole[: len(whole) // 2])
        # the first evaluation is killed the moment it is seen; its command line and variables are kept
        first = wait_for(lambda: evals_of(sp, "eval_started"), 60, interval=0.05, what="an evaluation")[0]
        pid, killed_at = first["pid"], first["iteration"]
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        env, cwd = environ(pid), os.readlink(f"/proc/{pid}/cwd")
        os.kill(pid, signal.SIGKILL)
        failed = wait_for(lambda: [e for e in evals_of(sp, "eval_failed") if e["iteration"] == killed_at], 30,
                          what="the killed evaluation's failure")[0]
        assert "SIGKILL" in failed["reason"] and failed["attempt"] == 1 and failed["retry_at"] is not None
        assert env["ISAACD_EVAL"] == "1" and env["ISAACD_EVAL_SEED"] == "7" and env["CUDA_VISIBLE_DEVICES"] == ""
        assert env["ISAACD_EVAL_CHECKPOINT"] == first["checkpoint"] == str(run_dir / f"model_{killed_at}.pt")
        # the same evaluation run again by hand, beside the supervisor's retry: its result goes elsewhere
        again = tmp_path / "again.eval.json"
        env.update(ISAACD_EVAL_RESULT=str(again), ISAACD_EVAL_TB_DIR=str(tmp_path / "again-tb"))
        env.pop("ISAACD_LAUNCH_TOKEN", None)
        by_hand = subprocess.Popen([a.decode() for a in argv], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
        # the torn checkpoint: refused before launch (no eval_started of it), given up with the reason at once
        given_up = wait_for(lambda: [e for e in evals_of(sp, "eval_given_up") if e["iteration"] == newest - 1], 60,
                            what="the torn checkpoint given up")[0]
        assert "not a complete zip archive" in given_up["reason"] and torn.name in given_up["reason"]
        assert not [e for e in evals_of(sp, "eval_started") if e["iteration"] == newest - 1]
        # the killed one retried and scored; then, the trainer held, nothing more waits
        evals = wait_for(lambda: (ev := sp.job("cp")["evals"])["running"] is None and ev["waiting"] == 0
                         and ev["done"] >= 2 and ev, 90, what="every held checkpoint evaluated")
        done = [e for e in evals_of(sp, "eval_done") if e["iteration"] == killed_at][0]
        assert [e["attempt"] for e in evals_of(sp, "eval_started") if e["iteration"] == killed_at] == [1, 2]
        # the best is named: the highest score of those recorded (ties: the earlier checkpoint)
        scored = {e["iteration"]: e["return_mean"] for e in evals_of(sp, "eval_done")}
        best = max(scored, key=lambda i: (scored[i], -i))
        assert evals["best"]["iteration"] == best and evals["best"]["checkpoint"] == str(run_dir / f"model_{best}.pt")
        assert evals_of(sp, "eval_best")[-1]["iteration"] == best
        assert sp.cli("best", "cp").stdout.strip() == str(run_dir / f"model_{best}.pt")  # `cp "$(isaacd best cp)" ..`
        listed = json.loads(sp.cli("evals", "cp", "--json").stdout)
        assert [r["iteration"] for r in listed["results"]] == sorted(scored) and listed["best"] == best
        assert evals["given_up"] == [newest - 1] and evals["failed"] == 2 and evals["where"] == "cpu"
        # no video here, and `isaacd status` and `isaacd doctor` say why in the same words
        (doctor,) = check_eval_video(parse_config(Path(sp.config).read_text(), str(sp.config), tmp_path))
        assert evals["video_unavailable"] == doctor.detail == NO_VIDEO and doctor.status == "warn"
        # the evaluations' own event file, at step = each scored checkpoint's iteration
        assert sorted(s for s, _ in scalars(run_dir / "eval")["Eval/return_mean"]) == sorted(scored)
        _, err = by_hand.communicate(timeout=60)
        assert by_hand.returncode == 0, err.decode()[-2000:]
    finally:
        os.killpg(trainer, signal.SIGCONT)
    # a checkpoint evaluated twice with the same seed: the same score
    twice = json.loads(again.read_text())
    recorded = json.loads(Path(f"{first['checkpoint']}.eval.json").read_text())
    assert {k: twice[k] for k in SAME} == {k: recorded[k] for k in SAME}
    assert done["return_mean"] == recorded["return_mean"]
    # training goes on to its end; an evaluation was no restart of it
    job = wait_for(lambda: (j := sp.job("cp"))["state"] == "completed" and j, 90, what="training completed")
    assert job["restarts"] == 0 and job["attempt"] == 1
    exits = [e for e in sp.events("cp") if e["event"] in ("exited", "restart", "crashed", "backoff")]
    assert [(e["event"], e.get("code")) for e in exits] == [("exited", 0)]  # the trainer's own end, once
    # training's TensorBoard steps: every iteration once, none missing (the evaluations wrote none of them)
    assert [s for s, _ in scalars(run_dir)["Perf/total_fps"]] == list(range(MAX_ITERATIONS))
