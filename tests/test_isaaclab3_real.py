"""The real Isaac Lab 3.0.0 driven by the real `isaacd run`, on this CPU machine: no stand-in anywhere.

Isaac Lab 3.0 runs without Isaac Sim (kit-less: Newton physics). `scripts/isaaclab3-venv.sh` (run by
`scripts/test.sh`) builds `.venv-isaaclab3` with `isaaclab==3.0.0` from PyPI, rsl-rl-lib 5.5.1, skrl, rl-games
and wandb, on Python 3.11 and the project's CPU torch 2.13: outside Isaac Lab's supported matrix (Python 3.12,
torch 2.11; docs/testing.md says what that means). The asset server cannot be reached, so the cart-pole and the
ground plane are the repository's own hand-written USD files (`tests/isaaclab3/asset_root`), handed to Isaac Lab
with `ISAACSIM_ASSET_ROOT`. CI builds the venv, and there these tests fail instead of skipping without it.

Each launch boots the real thing (imports, the Newton scene, Warp kernels: ~15 s with a warm Warp kernel cache,
~40 s cold), so each test tells one whole story instead of many short ones.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import BIN, alive, builtin_job, wait_for, wait_spare_ready, write_config
from isaaclab3_helpers import ASSET_ROOT, BOOT, PY, TASK, events, run_dirs, started, steps

from isaacd.observations.checkpoints import newest_complete

pytestmark = [pytest.mark.slow, pytest.mark.isaaclab3]


@pytest.fixture(autouse=True)
def _real_isaaclab() -> None:
    if not PY.exists():
        why = f"{PY} missing: scripts/isaaclab3-venv.sh builds it (scripts/test.sh runs it)"
        if os.environ.get("CI"):
            pytest.fail(why)  # a real-thing test that skips in CI proves nothing
        pytest.skip(why)


def il3_job(name: str, library: str = "rsl_rl", lab: Path | None = None, **over) -> str:  # noqa: ANN003
    """A job on the real Isaac Lab: pip form (launcher = the venv's python) unless `lab` names a checkout."""
    fields: dict = {"workflow": library, "task": TASK, "num_envs": 16, "device": "cpu", "max_iterations": 30,
                    "save_interval": 5, "stop_timeout": 60.0,
                    # the user's Warp kernel cache, as before compile_cache: each test's own <state_dir>/caches
                    # would compile every kernel again (tests/test_compile_caches_e2e.py covers the job's cache)
                    "environment": {"ISAACSIM_ASSET_ROOT": str(ASSET_ROOT),
                                    "WARP_CACHE_PATH": str(Path.home() / ".cache" / "warp")}}
    if lab is None:
        fields["launcher"] = [str(PY)]
    else:
        fields["isaaclab_dir"] = str(lab)
    fields.update(over)
    # the divergence watchdog off: this is about crashes and resumes, and a value-loss spike right after a
    # resume of a barely trained cart-pole would roll the run back (the watchdog has tests of its own)
    return builtin_job(name, **fields) + "\n[jobs.watchdogs.divergence]\nenabled = false\n"


def checkout(root: Path) -> Path:
    """An Isaac Lab 3.0 source checkout's shape: VERSION, isaaclab.sh -p, scripts/reinforcement_learning/train.py.

    The train script is the wheel's own entry point (`run_train_cli`, as `isaaclab train` calls it); isaaclab.sh -p
    runs the venv's python, as a checkout's does after `./isaaclab.sh --install` into that venv."""
    script = root / "scripts" / "reinforcement_learning" / "train.py"
    script.parent.mkdir(parents=True)
    (root / "VERSION").write_text("3.0.0\n")
    script.write_text("import sys\nfrom isaaclab_rl.entrypoints import run_train_cli\n\n"
                      "sys.exit(run_train_cli(sys.argv[1:]))\n")
    sh = root / "isaaclab.sh"
    sh.write_text(f'#!/bin/sh\n# Isaac Lab\'s launcher: -p runs its python\n[ "$1" = "-p" ] && shift\nexec {PY} "$@"\n')
    sh.chmod(0o755)
    return root


def kill_at_resume_point(sp, job: str, at_least: int, spare: bool = False) -> tuple[int, float, str]:  # noqa: ANN001
    """kill -9 the trainer once it has done `at_least` iterations (and, with `spare`, a warm spare is ready).

    Frozen first (SIGSTOP), so the newest complete checkpoint or snapshot cannot move between the look and the
    kill. With `spare`, the trainer stays frozen while the spare boots: the kill point follows the test, not the
    race between the trainer's iterations and the spare's boot (a spare ready only at iteration 27 of 30 left the
    next kill waiting for an iteration that never came). Returns (that resume point's iteration, the kill's time,
    the killed attempt's run dir)."""
    # alive: right after an earlier kill the status (published once a tick) may still show the killed trainer
    j = wait_for(lambda: (x := sp.job(job))["state"] == "running" and alive(x["pid"])
                 and (x["iteration"] or 0) >= at_least and x, BOOT, interval=0.2, what=f"iteration {at_least}")
    os.kill(j["pid"], signal.SIGSTOP)
    if spare:
        wait_spare_ready(sp, job, BOOT, interval=0.2)  # the new one, not the spare that just became this trainer
    points = [c for d in run_dirs(sp, job) if (c := newest_complete(d)) is not None]
    os.kill(j["pid"], signal.SIGKILL)
    t = time.time()
    assert points, "no checkpoint or snapshot before the kill"
    return max(c.iteration for c in points), t, j["run_dir"]


def hold_the_next_spare(sp, job: str, attempt: int) -> None:  # noqa: ANN001
    """SIGSTOP (its process group: uv and its Python) the spare started beside attempt `attempt` (a spare_started
    after that attempt's `started`), for the rest of the job's run: the test needs no spare after that point, and its
    boot (a second Isaac Lab environment) would only take the CPU from the trainer the test waits on. The supervisor
    kills a spare with SIGKILL (its process group), which a stopped process dies of; tests/test_isaaclab3_pbt.py holds
    one the same way. Nothing to hold where the job ends first. (Suite time, session 18.)"""
    ended = ("completed", "failed", "stopped")
    since = wait_for(lambda: len(x := started(sp, job)) >= attempt and x[attempt - 1]["time"], 60,
                     what=f"attempt {attempt} started")
    new = wait_for(lambda: [e for e in events(sp, job, "spare_started") if e["time"] >= since]
                   or (sp.job(job)["state"] in ended and [None]), BOOT, interval=0.1, what="the next spare started")
    if new[0] is None:
        return
    pid = new[0]["pid"]
    try:
        pgid = os.getpgid(pid)
        if pgid == pid:  # its own group (start_new_session), never this test's
            os.killpg(pgid, signal.SIGSTOP)
        else:
            os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        pass  # killed already: the job ended


def training_again(sp, job: str, old_run: str, resume_point: int) -> dict:  # noqa: ANN001
    """The next attempt logged its first iteration: rsl_rl re-runs the loaded iteration, so that is step
    `resume_point` in a new run dir."""
    return wait_for(lambda: (x := sp.job(job))["run_dir"] not in (None, old_run) and x["iteration"] is not None
                    and x["iteration"] >= resume_point and x, BOOT, interval=0.05, what="training again")


def assert_clean_log(tmp_path: Path, job: str) -> None:
    log = (tmp_path / "state" / "logs" / f"{job}.log").read_text(errors="replace")
    for bad in ("Error parsing override", "unrecognized arguments", "error: argument", "Could not override",
                "Torch not compiled with CUDA"):
        assert bad not in log, bad


def test_checkout_form_cold_resume_completes(tmp_path, supervisor_factory):
    """A source checkout (isaaclab.sh -p <shim> scripts/reinforcement_learning/train.py), no spare: a cold resume."""
    lab = checkout(tmp_path / "IsaacLab")
    total = 16
    sp = supervisor_factory(write_config(tmp_path, il3_job("co", lab=lab, max_iterations=total, spare=False)))
    argv = wait_for(lambda: started(sp, "co"), 30, what="started")[0]["argv"]
    assert argv[:2] == [str(lab / "isaaclab.sh"), "-p"] and argv[3] == str(lab / "scripts/reinforcement_learning/train.py")
    assert "VERSION" in started(sp, "co")[0]["contract"]
    first, _, _ = kill_at_resume_point(sp, "co", 3)
    j = wait_for(lambda: (x := sp.job("co"))["state"] in ("completed", "failed") and x, 600, what="completed")
    assert j["state"] == "completed", j["state_reason"]
    runs = started(sp, "co")
    assert len(runs) == 2 and runs[1]["warm_spare"] is False and runs[1]["resume_from"]["iteration"] == first
    logged = [steps(d) for d in run_dirs(sp, "co")]
    assert set().union(*map(set, logged)) == set(range(total)) and max(logged[-1]) == total - 1
    assert_clean_log(tmp_path, "co")


@pytest.mark.parametrize("library", ["skrl", "rl_games"])
def test_skrl_and_rl_games_kill_then_completed(tmp_path, supervisor_factory, library):
    """The same contract through Isaac Lab's other backends (no shim there: checkpoints at the save interval): a
    kill -9 resumes from the real library's own checkpoint and the job completes (its checkpoints, counted in the
    job's iterations, reach max_iterations). One kill (two until session 20: each launch of the real thing is
    ~20-30 s of this suite): the second resume's counting on from an earlier offset is the stand-in's test
    (tests/test_workflows_skrl.py, test_workflows_rl_games.py: two resumes each, with these backends' numbering)."""
    # room after the kill: rl_games does an iteration in well under a second here, and a kill that came after the
    # last checkpoint would find the job completed instead of restarting it. The kill lands at the first checkpoint
    # (iteration 2-4 seen here, on 2 cores beside two other real tests, at 1.4 s an iteration): 10 leaves room
    total = 10
    # the task's own agent configs (isaaclab_tasks/core/cartpole/agents): skrl's rollouts (32) said to isaacd, which
    # counts skrl's timesteps in them; rl_games' minibatch_size (16384) cut to one 16-env x 32-step batch, and its
    # torch.compile of the actor (rl_games 1.6.5 torch_runner.py, on by default) off: tens of seconds per launch on
    # a 2-core CPU, and nothing isaacd relies on
    extra = {"skrl": ["agent.agent.rollouts=32"],
             "rl_games": ["agent.params.config.minibatch_size=512", "agent.params.config.torch_compile=False"]}[library]
    sp = supervisor_factory(write_config(tmp_path, il3_job("lib", library, max_iterations=total, save_interval=2,
                                                           spare=False, extra_args=extra)))
    wait_for(lambda: started(sp, "lib"), 30, what="started")
    argv = started(sp, "lib")[0]["argv"]
    assert argv[1:5] == ["-m", "isaaclab", "train", "--rl_library"] and argv[5] == library
    j = wait_for(lambda: (x := sp.job("lib"))["state"] == "running" and x["checkpoint"] and x, BOOT, interval=0.2,
                 what="a checkpoint of the first attempt")
    assert j["checkpoint"]["iteration"] < total, "the test kills too late: raise total"
    os.kill(j["pid"], signal.SIGKILL)
    wait_for(lambda: len(started(sp, "lib")) == 2, 60, what="the restart")
    resumed = started(sp, "lib")[-1]["resume_from"]
    assert resumed is not None and resumed["iteration"] >= j["checkpoint"]["iteration"], (resumed, j["checkpoint"])
    j = wait_for(lambda: (x := sp.job("lib"))["state"] in ("completed", "failed") and x, 600, what="completed")
    assert j["state"] == "completed", j["state_reason"]
    assert j["restarts"] == 1
    assert_clean_log(tmp_path, "lib")


def test_stop_while_isaac_lab_boots_ends_at_once_with_nothing_to_resume(tmp_path, supervisor_factory):
    """Upstream boots for tens of seconds before its first iteration; a stop then has nothing worth saving."""
    sp = supervisor_factory(write_config(tmp_path, il3_job("boot", max_iterations=1000, spare=False)))
    wait_for(lambda: started(sp, "boot"), 30, what="started")
    # status says what the boot is doing: Isaac Lab builds its scene in gymnasium.make (isaaclab_rl 3.0.0
    # entrypoints/common.py create_isaaclab_env), which the shim reports
    j = wait_for(lambda: (x := sp.job("boot"))["boot"] and x["boot"]["phase"] not in (None, "imports")
                 and x["boot"]["last_line"] and x, BOOT, interval=0.05, what="the boot past its imports")
    os.kill(j["pid"], signal.SIGSTOP)  # held still while it is looked at
    try:
        text = subprocess.run([str(BIN / "isaacd"), "--config", str(sp.config), "status"], capture_output=True,
                              text=True, timeout=60).stdout
    finally:
        os.kill(j["pid"], signal.SIGCONT)
    print(f"isaacd status during the real Isaac Lab's boot:\n{text}")
    assert re.search(r"boot: booting for \d+s \((environment|runner|first iteration) for \d+s\); last output: \S",
                     text), text
    assert sp.job("boot")["iteration"] is None
    t = time.time()
    sp.cli("stop", "boot")
    wait_for(lambda: sp.job("boot")["state"] == "stopped", 60, interval=0.05, what="stopped")
    print(f"isaacd stop during the real Isaac Lab's boot: stopped after {time.time() - t:.1f} s")
    assert events(sp, "boot", "exited")[-1]["code"] == 0
    # the trainer did not wait for its boot to end: the shim's own side channel (state/shim/boot/attempt-1.jsonl)
    # ends with the stop, reported from the signal, and no iteration ever began (read, not timed: a boot is 15-40 s
    # here and slower on a loaded host)
    shim = [json.loads(line)["event"] for line in (tmp_path / "state" / "shim" / "boot" / "attempt-1.jsonl")
            .read_text().splitlines()]
    assert shim[-2:] == ["stop_requested", "stopped"] and "first_iteration" not in shim, shim
    assert events(sp, "boot", "trainer_stopped")[-1]["detail"].startswith("stopped before the first checkpoint")
    assert not events(sp, "boot", "trainer_saved_on_stop")
    for d in (tmp_path / "logs").rglob("*"):  # no checkpoint anywhere for a later resume (or `latest`) to pick
        assert not (d.is_file() and d.suffix == ".pt"), d


UV = BIN / "uv"


def test_uv_launcher_kill_stop_start_completed_exactly_in_one_wandb_run(tmp_path, supervisor_factory):
    """The official 3.0 install (pip, no checkout) run through a `uv run ... python` launcher (uv runs Python as its
    child) with `agent.logger=wandb` (real wandb, offline): `<uv run> <shim> -m isaaclab train --rl_library rsl_rl`.
    kill -9 beside a warm spare, isaacd stop (the shim saves) and start all work through uv, the job completes at
    exactly max_iterations, and every attempt logs to the job's one W&B run.

    One story where there were two (the plain pip launcher's two kills + stop + start, and this one): the booted
    spare's takeovers have their own test (test_isaaclab3_booted_spare.py), and every other real test launches the
    pip form with the venv's python (suite time, session 20)."""
    total = 20
    wb = tmp_path / "wandb"
    launcher = [str(UV), "run", "--no-project", "--python", str(PY), "python"]
    sp = supervisor_factory(write_config(tmp_path, il3_job(
        "wb", max_iterations=total, launcher=launcher, extra_args=["agent.logger=wandb"],
        environment={"ISAACSIM_ASSET_ROOT": str(ASSET_ROOT), "WANDB_MODE": "offline", "WANDB_DIR": str(wb),
                     "WANDB_SILENT": "true", "WARP_CACHE_PATH": str(Path.home() / ".cache" / "warp")})))
    argv = wait_for(lambda: started(sp, "wb"), 30, what="started")[0]["argv"]
    n = len(launcher)
    assert argv[:n] == launcher and argv[n].endswith("shim.py") and argv[n + 1:n + 3] == ["-m", "isaaclab"]
    assert argv[n + 3:n + 6] == ["train", "--rl_library", "rsl_rl"] and "agent.device=cpu" in argv
    # uv's pid: the supervisor reaps its Python child with it. Beside a ready spare (through uv too; imports-only:
    # auto keeps a W&B job's spare so): the kill raced the spare's boot before, a cold launch or a takeover by timing
    first, t_kill, old_run = kill_at_resume_point(sp, "wb", 3, spare=True)
    wait_for(lambda: len(started(sp, "wb")) == 2, 60, what="restart")
    hold_the_next_spare(sp, "wb", 2)
    warm = started(sp, "wb")[-1]
    assert warm["warm_spare"] is True and warm["resume_from"]["iteration"] == first
    training_again(sp, "wb", old_run, first)
    print(f"real Isaac Lab 3.0 through uv, CPU, 16 envs: kill -9 -> training again with the warm spare: "
          f"{time.time() - t_kill:.1f} s")
    j = wait_for(lambda: (x := sp.job("wb"))["state"] == "running" and (x["iteration"] or 0) >= first + 2 and x, BOOT,
                 what="training again")
    # (20 iterations: the stop lands far from the end. With 14 the warm spare's run reached the total 1.5 s after the
    # wait above on a quiet machine, the stop came too late, and the run ended as completed, saving no stop:
    # fresh-clone CI of 2026-12-06)
    sp.cli("stop", "wb")  # SIGINT to the process group: uv and its Python; the shim saves once
    wait_for(lambda: sp.job("wb")["state"] == "stopped", 90, what="stopped")
    # uv forwards the SIGINT it got to Python 200 ms later; that copy must not land in upstream's close_env (SIGINT
    # at SIG_DFL) once the stop is done: exit 0, not 130 (tests/test_shim_forwarded_signal.py)
    assert events(sp, "wb", "exited")[-1]["code"] == 0
    saved = events(sp, "wb", "trainer_saved_on_stop")[-1]
    assert saved["iteration"] == steps(Path(j["run_dir"]))[-1]

    # isaacd start: resumes from that save and completes at exactly max_iterations
    sp.cli("start", "wb")
    hold_the_next_spare(sp, "wb", 3)
    j = wait_for(lambda: (x := sp.job("wb"))["state"] in ("completed", "failed") and x, 600, what="completed")
    assert j["state"] == "completed", j["state_reason"]
    runs = started(sp, "wb")
    assert len(runs) == 3 and runs[-1]["resume_from"]["iteration"] == saved["iteration"]
    for r in runs[1:]:  # 3.x: the absolute file, never latest; what is left of the total
        argv = r["argv"]
        assert argv[argv.index("--checkpoint") + 1] == r["resume_from"]["path"]
        assert argv[argv.index("--max_iterations") + 1] == str(total - r["resume_from"]["iteration"])
    dirs = run_dirs(sp, "wb")
    assert len(dirs) == 3
    logged = [steps(d) for d in dirs]
    assert set().union(*map(set, logged)) == set(range(total)) and max(logged[-1]) == total - 1
    # rsl_rl re-runs the loaded iteration: each resumed run starts at its resume point
    assert [s[0] for s in logged[1:]] == [first, saved["iteration"]]
    # the policy ran on the job's device (Isaac Lab's default would be cuda:0): the run's own params say so
    assert "device: cpu" in (dirs[0] / "params" / "agent.yaml").read_text()
    wandb_runs = sorted((wb / "wandb").glob("offline-run-*"))
    assert len(wandb_runs) == 3, wandb_runs  # one offline run dir per attempt...
    ids = {r.name.split("-", 3)[3] for r in wandb_runs}  # offline-run-<YYYYmmdd_HHMMSS>-<run id>
    assert len(ids) == 1, ids  # ...all carrying the job's one run id
    (run_id,) = ids
    assert run_id.startswith("wb-")
    assert_clean_log(tmp_path, "wb")


def test_bad_input_names_the_key(tmp_path):
    """A launcher without isaaclab, a missing asset root, an unknown generation: one clear line each, no traceback."""
    import sys

    jobs = (builtin_job("nolab", workflow="rsl_rl", task=TASK, launcher=[sys.executable])
            + builtin_job("noassets", workflow="rsl_rl", task=TASK, launcher=[str(PY)],
                          environment={"ISAACSIM_ASSET_ROOT": str(tmp_path / "missing")})
            + builtin_job("future", workflow="rsl_rl", task=TASK, launcher=[str(PY)], isaaclab_version="4.0"))
    cfg = write_config(tmp_path, jobs)
    res = subprocess.run([str(BIN / "isaacd"), "check-config", str(cfg)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    err = res.stderr
    assert f'jobs[0] (name = "nolab").launcher: \'{sys.executable}\' has no isaaclab installed' in err, err
    assert f'jobs[1] (name = "noassets").environment.ISAACSIM_ASSET_ROOT: {tmp_path / "missing"} is not a directory' in err
    assert 'jobs[2] (name = "future").isaaclab_version: Isaac Lab 4.0' in err
    assert "Traceback" not in err
    # the generation of a pip install is read from the launcher's own isaaclab distribution, through uv too
    (tmp_path / "ok").mkdir()
    ok = write_config(tmp_path / "ok", il3_job("fine") + il3_job("viauv", launcher=[
        str(UV), "run", "--no-project", "--python", str(PY), "python"]))
    res = subprocess.run([str(BIN / "isaacd"), "check-config", str(ok)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = subprocess.run([str(BIN / "isaacd"), "doctor", "--config", str(ok), "--json"], capture_output=True,
                         text=True, timeout=120)
    check = next(c for c in json.loads(doc.stdout)["checks"] if c["name"] == "workflow:fine")
    assert check["status"] == "pass" and f"isaaclab installed in {PY}" in check["detail"], check
    check = next(c for c in json.loads(doc.stdout)["checks"] if c["name"] == "workflow:viauv")
    assert check["status"] == "pass" and "Isaac Lab 3.0 rsl_rl" in check["detail"], check
