"""End to end: a real `isaacd run` driving Isaac Lab's contracts through the faithful built-in trainer.

The trainer here behaves like upstream Isaac Lab on every contract point (store_true `--resume`
on 2.3, `--checkpoint <file>` only on 3.x, regex `--load_run`/`--checkpoint`, Hydra overrides by
real hydra-core, vanilla rsl_rl numbering, nothing saved on SIGINT without the shim), so these
runs fail the way a real Isaac Lab install would if isaacd got a contract wrong. Isaac Sim itself
cannot run on these machines; the 2.3 job below runs through an Isaac Lab-shaped checkout
(VERSION, isaaclab.sh, scripts/reinforcement_learning/rsl_rl/train.py) to exercise detection, the
launcher and the working directory as on a real host.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import BIN, alive, builtin_job, wait_for, write_config

from isaacd.observations.checkpoints import list_checkpoints, newest_complete

pytestmark = pytest.mark.slow

FAST = ["agent.num_steps_per_env=8"]


def fake_isaaclab(root: Path, version: str) -> Path:
    """An Isaac Lab-shaped checkout whose train script is the faithful trainer of that generation."""
    rsl = root / "scripts" / "reinforcement_learning" / "rsl_rl"
    rsl.mkdir(parents=True)
    (root / "VERSION").write_text(version + "\n")
    sh = root / "isaaclab.sh"
    sh.write_text(f'#!/bin/sh\n# Isaac Lab\'s launcher: -p runs its python\n[ "$1" = "-p" ] && shift\nexec {sys.executable} "$@"\n')
    sh.chmod(0o755)
    module = "isaacd_trainer" if version.startswith("2.") else "isaacd_trainer.isaaclab30"
    (rsl / "train.py").write_text(f'import runpy\nrunpy.run_module("{module}", run_name="__main__", alter_sys=True)\n')
    (rsl / "cli_args.py").write_text('arg_group.add_argument("--resume", action="store_true", default=False)\n')
    return root


def started(sp, job: str) -> list[dict]:  # noqa: ANN001
    return [e for e in sp.events(job) if e["event"] == "started"]


def all_steps(run_dir: Path) -> set[int]:
    """Iterations logged to TensorBoard (rsl_rl's `.../time` tags are stepped by seconds, not iterations)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    out: set[int] = set()
    for f in sorted(run_dir.glob("events.out.tfevents.*")):
        for ev in EventFileLoader(str(f)).Load():
            if any(not v.tag.endswith("/time") for v in ev.summary.value):
                out.add(ev.step)
    return out


def kill_after_checkpoint(sp, job: str, at_least: int) -> int:  # noqa: ANN001
    """kill -9 the trainer once it saved a checkpoint >= at_least; returns the newest complete checkpoint then.
    The status is published once a tick, so right after a kill it may still show the killed trainer "running":
    only a pid that is alive is this job's trainer (CI of ca7e296: a second kill read the first one's pid)."""
    j = wait_for(lambda: (x := sp.job(job))["state"] == "running" and alive(x["pid"]) and x["checkpoint"]
                 and x["checkpoint"]["iteration"] >= at_least and x, 180, what=f"checkpoint {at_least}")
    os.kill(j["pid"], signal.SIGSTOP)  # freeze it so "newest" cannot move between the look and the kill
    newest = newest_complete(Path(j["run_dir"]))
    os.kill(j["pid"], signal.SIGKILL)
    assert newest is not None
    return newest.iteration


@pytest.mark.parametrize("generation", ["2.0", "2.3", "3.0"])
def test_two_kills_then_completed_with_exactly_max_iterations(tmp_path, supervisor_factory, generation):
    total = 14
    if generation == "2.3":
        lab = fake_isaaclab(tmp_path / "IsaacLab", "2.3.2")
        job = builtin_job("cp", workflow="rsl_rl", isaaclab_dir=str(lab), task="Isaacd-Cartpole-v0",
                          max_iterations=total, save_interval=3, extra_args=FAST)
    else:
        job = builtin_job("cp", isaaclab_version=generation, max_iterations=total, save_interval=3, extra_args=FAST)
    sp = supervisor_factory(write_config(tmp_path, job))
    chosen = [kill_after_checkpoint(sp, "cp", 3)]
    wait_for(lambda: len(started(sp, "cp")) == 2, 10, what="first restart")
    chosen.append(kill_after_checkpoint(sp, "cp", chosen[0] + 3))
    j = wait_for(lambda: (x := sp.job("cp"))["state"] in ("completed", "failed") and x, 240, what="completed")
    assert j["state"] == "completed", j["state_reason"]
    assert j["restarts"] == 2

    runs = started(sp, "cp")
    assert len(runs) == 3
    # every resume came from the newest complete checkpoint at the kill, with this generation's flags
    assert [r["resume_from"]["iteration"] for r in runs[1:]] == chosen
    for r in runs[1:]:
        argv = r["argv"]
        if generation == "2.3":
            assert argv[argv.index("--resume") + 1] == "--load_run" and "True" not in argv
        elif generation == "2.0":
            assert argv[argv.index("--resume") + 1] == "True"  # type=bool: a bare --resume is an argparse error
        else:
            assert "--resume" not in argv and argv[argv.index("--checkpoint") + 1] == r["resume_from"]["path"]
        assert argv[argv.index("--max_iterations") + 1] == str(total - r["resume_from"]["iteration"])

    # exactly max_iterations: iterations 0..total-1 were all done, none beyond, and the last run ends with model_{total-1}
    run_dirs = [Path(e["run_dir"]) for e in sp.events("cp") if e["event"] == "run_dir"]
    assert len(run_dirs) == 3
    done = set().union(*(all_steps(d) for d in run_dirs))
    assert done == set(range(total))
    assert list_checkpoints(run_dirs[-1])[0].iteration == total - 1
    # rsl_rl re-runs the loaded iteration: each resumed run's first step is the checkpoint's iteration
    assert [min(all_steps(d)) for d in run_dirs[1:]] == chosen
    log = (tmp_path / "state" / "logs" / "cp.log").read_text(errors="replace")
    assert "Error parsing override" not in log and "unrecognized arguments" not in log


def test_supervisor_sigterm_saves_through_the_shim_and_loses_nothing(tmp_path, supervisor_factory):
    # snapshots off: this is the stop-save path alone (with them on, a slow host may already hold a snapshot
    # of iteration 4 and the stop would have nothing left to prove)
    sp = supervisor_factory(write_config(tmp_path, builtin_job("cp", max_iterations=10_000, save_interval=50,
                                                               snapshot_every=0, extra_args=FAST)))
    j = wait_for(lambda: (x := sp.job("cp"))["iteration"] is not None and x["iteration"] >= 4 and x, 120,
                 what="iteration 4")
    run = Path(j["run_dir"])
    assert newest_complete(run).iteration == 0  # save_interval 50: only model_0 so far
    assert sp.stop(signal.SIGTERM) == 0
    last = max(all_steps(run))
    assert newest_complete(run).iteration == last  # the shim saved the last completed iteration
    events = [json.loads(x) for x in (tmp_path / "state/jobs/cp.events.jsonl").read_text().splitlines()]
    saved = [e for e in events if e["event"] == "trainer_saved_on_stop"]
    assert saved and saved[-1]["iteration"] == last
    exited = [e for e in events if e["event"] == "exited"][-1]
    assert exited["code"] == 0


def test_without_the_shim_a_stop_saves_nothing_like_upstream(tmp_path, supervisor_factory):
    sp = supervisor_factory(write_config(tmp_path, builtin_job("cp", max_iterations=10_000, save_interval=50,
                                                               shim=False, extra_args=FAST)))
    j = wait_for(lambda: (x := sp.job("cp"))["iteration"] is not None and x["iteration"] >= 4 and x, 120,
                 what="iteration 4")
    sp.cli("stop", "cp")
    wait_for(lambda: sp.job("cp")["state"] == "stopped", 60, what="stopped")
    run = Path(j["run_dir"])  # found by its exact name, no shim to report it
    assert run.name.endswith("_cp")
    assert newest_complete(run).iteration == 0 and max(all_steps(run)) >= 4  # up to save_interval lost


def _downgrade(path: Path) -> None:
    """Rewrite a checkpoint as rsl_rl 2.x/3.x lays it out (model_state_dict), as the Isaac Lab 2.3 image writes it."""
    ck = torch.load(path, map_location="cpu", weights_only=False)
    if "model_state_dict" in ck:
        return
    ck["model_state_dict"] = {**ck.pop("actor_state_dict"), **{f"critic.{k}": v for k, v in ck.pop("critic_state_dict").items()}}
    torch.save(ck, path)


def test_incompatible_checkpoint_is_skipped_with_a_clear_event_or_fails_clearly(tmp_path, supervisor_factory):
    cfg = write_config(tmp_path, builtin_job("cp", max_iterations=10_000, save_interval=2, extra_args=FAST))
    sp = supervisor_factory(cfg)
    wait_for(lambda: (x := sp.job("cp"))["checkpoint"] and x["checkpoint"]["iteration"] >= 4 and x, 120, what="ckpt 4")
    sp.cli("stop", "cp")
    j = wait_for(lambda: (x := sp.job("cp"))["state"] == "stopped" and x, 60, what="stopped")
    ckpts = list_checkpoints(Path(j["run_dir"]))
    newest, previous = ckpts[0], ckpts[1]
    _downgrade(newest.path)

    sp.cli("start", "cp")
    wait_for(lambda: len(started(sp, "cp")) == 2, 30, what="started again")
    assert started(sp, "cp")[-1]["resume_from"]["iteration"] == previous.iteration
    rej = [e for e in sp.events("cp") if e["event"] == "checkpoint_rejected"]
    assert rej and rej[-1]["iteration"] == newest.iteration
    assert "rsl_rl 2.x/3.x (model_state_dict)" in rej[-1]["problem"] and "rsl_rl 4.x/5.x" in rej[-1]["problem"]

    # nothing this trainer can load at all: a clear failure, not a crash loop and not a silent fresh start
    sp.cli("stop", "cp")
    wait_for(lambda: sp.job("cp")["state"] == "stopped", 60, what="stopped again")
    for d in {Path(e["run_dir"]) for e in sp.events("cp") if e["event"] == "run_dir"}:
        for c in list_checkpoints(d):
            _downgrade(c.path)
    sp.cli("start", "cp")
    j = wait_for(lambda: (x := sp.job("cp"))["state"] == "failed" and x, 30, what="failed")
    assert "no checkpoint this trainer can load" in j["state_reason"] and "model_state_dict" in j["state_reason"]
    assert len(started(sp, "cp")) == 2


def test_a_job_never_resumes_from_a_neighbours_run(tmp_path, supervisor_factory):
    """`pole` and `cartpole` share an experiment dir; upstream's unanchored regexes and a name-suffix match
    would let `pole` take `..._cartpole` runs."""
    jobs = "".join(builtin_job(n, experiment="shared", max_iterations=10_000, save_interval=2, shim=shim,
                               extra_args=FAST) for n, shim in (("cartpole", True), ("pole", False)))
    sp = supervisor_factory(write_config(tmp_path, jobs))
    for _ in range(2):
        kill_after_checkpoint(sp, "pole", 2)
        wait_for(lambda: sp.job("pole")["state"] == "running", 60, what="pole running again")
    for e in sp.events("pole"):
        if e["event"] == "run_dir":
            assert e["run_dir"].endswith("_pole"), e
        if e["event"] == "started" and e["resume_from"]:
            assert Path(e["resume_from"]["path"]).parent.name.endswith("_pole"), e
            assert "cartpole" not in " ".join(e["argv"])


def test_bad_input_missing_script_and_unknown_generation(tmp_path, supervisor_factory):
    lab = fake_isaaclab(tmp_path / "IsaacLab", "2.3.2")
    unknown = tmp_path / "NotIsaacLab"
    unknown.mkdir()
    jobs = (builtin_job("noscript", workflow="rsl_rl", isaaclab_dir=str(lab), train_script="source/ext/train.py")
            + builtin_job("nogen", workflow="rsl_rl", isaaclab_dir=str(unknown))
            + builtin_job("fine", max_iterations=10_000, extra_args=FAST))
    cfg = write_config(tmp_path, jobs)
    res = subprocess.run([str(BIN / "isaacd"), "check-config", str(cfg)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert f'{cfg}: jobs[0] (name = "noscript").train_script: {lab}/source/ext/train.py does not exist' in res.stderr
    assert 'jobs[1] (name = "nogen").isaaclab_version: cannot tell which Isaac Lab generation' in res.stderr
    assert "Traceback" not in res.stderr

    sp = supervisor_factory(cfg)  # the supervisor runs what it can and says why the others cannot start
    j = wait_for(lambda: (x := sp.job("noscript"))["state"] == "failed" and x, 20, what="noscript failed")
    assert "cannot start: train_script" in j["state_reason"]
    assert "isaaclab_version" in wait_for(lambda: (x := sp.job("nogen"))["state"] == "failed" and x, 20,
                                          what="nogen failed")["state_reason"]
    wait_for(lambda: sp.job("fine")["state"] == "running", 120, what="the good job trains")
    assert started(sp, "noscript") == []
