"""End to end: a real `isaacd run` driving Isaac Lab's skrl and rl_games contracts through the faithful stand-ins.

An Isaac Lab-shaped checkout (VERSION 2.3.2, scripts/reinforcement_learning/<lib>/train.py that runs the stand-in;
for rl_games also VERSION 3.0.0 with the unified scripts/reinforcement_learning/train.py --rl_library rl_games) and
`launcher` = this venv's python, process runtime. Two `kill -9` of the trainer; the job must end `completed`
with exactly max_iterations done, every resume from the newest complete checkpoint on the job's timeline.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers import alive, builtin_job, wait_for, wait_spare_ready, write_config

from isaacd.config.schema import parse_config
from isaacd.observations.checkpoints import newest_complete
from isaacd.workflows import resolve

pytestmark = pytest.mark.slow

TOTAL, SAVE, R = 12, 3, 16
MODULES = {"skrl": "isaacd_trainer.skrl_train", "rl_games": "isaacd_trainer.rl_games_train"}


def fake_isaaclab(root: Path, library: str, version: str = "2.3.2") -> Path:
    """2.x: scripts/reinforcement_learning/<library>/train.py; 3.x: the unified train.py (--rl_library)."""
    unified = not version.startswith("2.")
    d = root / "scripts" / "reinforcement_learning" / ("" if unified else library)
    d.mkdir(parents=True, exist_ok=True)
    (root / "VERSION").write_text(version + "\n")
    module = "isaacd_trainer.isaaclab30" if unified else MODULES[library]
    (d / "train.py").write_text(f'import runpy\nrunpy.run_module("{module}", run_name="__main__", '
                                "alter_sys=True)\n")
    return root


def started(sp, name: str) -> list[dict]:  # noqa: ANN001
    return [e for e in sp.events(name) if e["event"] == "started"]


@pytest.mark.parametrize("library, version", [("skrl", "2.3.2"), ("rl_games", "2.3.2"), ("rl_games", "3.0.0")])
def test_two_kills_then_completed_with_exactly_max_iterations(tmp_path, supervisor_factory, library, version):
    lab = fake_isaaclab(tmp_path / "IsaacLab", library, version)
    extra = ["--step_delay", "0.03"] + ([f"agent.agent.rollouts={R}"] if library == "skrl"
                                        else [f"agent.params.config.horizon_length={R}"])
    job_toml = builtin_job("cp", workflow=library, isaaclab_dir=str(lab), launcher=[sys.executable],
                           task="Isaacd-Cartpole-v0", num_envs=32, max_iterations=TOTAL, save_interval=SAVE,
                           extra_args=extra)
    cfg = write_config(tmp_path, job_toml)
    wf = resolve(parse_config(cfg.read_text(), str(cfg), cfg.parent).jobs[0]).workflow
    sp = supervisor_factory(cfg)

    def on_disk(x: dict):  # noqa: ANN202 - the run dir itself, not status (refreshed every 2 s without the shim)
        if not (x["pid"] and x["run_dir"]):
            return None
        offset = x["resume_from"]["iteration"] if x["resume_from"] else 0
        return newest_complete(Path(x["run_dir"]), layout=wf.layout, offset=offset)

    def kill_after_checkpoint(at_least: int) -> int:
        # alive: right after the first kill the status (published once a tick) may still show the killed trainer
        j = wait_for(lambda: alive((x := sp.job("cp"))["pid"]) and (n := on_disk(x)) is not None
                     and n.iteration >= at_least and x, 120, interval=0.05, what=f"checkpoint {at_least}")
        os.kill(j["pid"], signal.SIGSTOP)  # freeze it so "newest" cannot move between the look and the kill
        # and kill only beside a ready spare: a kill while the new spare still boots restarts cold instead, so
        # which path (and how long) followed a race with the spare's boot
        wait_spare_ready(sp, "cp", 60)
        offset = j["resume_from"]["iteration"] if j["resume_from"] else 0
        newest = newest_complete(Path(j["run_dir"]), layout=wf.layout, offset=offset)
        os.kill(j["pid"], signal.SIGKILL)
        assert newest is not None and newest.iteration < TOTAL
        return newest.iteration

    chosen = [kill_after_checkpoint(SAVE)]
    wait_for(lambda: len(started(sp, "cp")) == 2, 30, what="first restart")
    chosen.append(kill_after_checkpoint(chosen[0] + 1))
    j = wait_for(lambda: (x := sp.job("cp"))["state"] in ("completed", "failed") and x, 180, what="completed")
    assert j["state"] == "completed", j["state_reason"]
    assert j["restarts"] == 2 and j["checkpoint"]["iteration"] == TOTAL

    runs = started(sp, "cp")
    assert len(runs) == 3
    assert [r["resume_from"]["iteration"] for r in runs[1:]] == chosen  # the newest complete one at each kill
    for r in runs:
        argv = r["argv"]
        unified = version.startswith("3.")
        assert ("--rl_library" in argv) == unified and ("--headless" in argv) == (not unified)
        if unified:
            assert argv[argv.index("--rl_library") + 1] == library
    for r in runs[1:]:
        argv = r["argv"]
        assert argv[argv.index("--checkpoint") + 1] == r["resume_from"]["path"] and "--resume" not in argv
        # skrl: --max_iterations is this launch's share (timesteps = it * rollouts); rl_games: max_epochs, a total
        want = TOTAL - r["resume_from"]["iteration"] if library == "skrl" else TOTAL
        assert argv[argv.index("--max_iterations") + 1] == str(want)
    run_dirs = [Path(e["run_dir"]) for e in sp.events("cp") if e["event"] == "run_dir"]
    assert len(run_dirs) == 3 and all(wf.run_dir_re(parse_config(cfg.read_text(), str(cfg), cfg.parent).jobs[0])
                                      .match(d.name) for d in run_dirs)
    last = run_dirs[-1]
    if library == "skrl":
        # the last run counted its own timesteps from 0 and trained exactly what was left
        left = TOTAL - chosen[-1]
        assert newest_complete(last, layout=wf.layout).path.name == f"agent_{left * R}.pt"
        assert f"timesteps: {left * R}" in (last / "params" / "agent.yaml").read_text()
    else:
        names = [p.name for p in (last / "nn").iterdir()]
        assert any(n.startswith(f"last_cp_ep_{TOTAL}_rew_") for n in names)
        assert not any(f"_ep_{TOTAL + 1}_" in n for n in names)
        # status shows rl_games' frame steps as the job's epochs (the last tick may precede the last epoch's log)
        assert chosen[-1] < j["iteration"] <= TOTAL, j["iteration"]
    log = (tmp_path / "state" / "logs" / "cp.log").read_text(errors="replace")
    assert "Error parsing override" not in log and "Could not override" not in log
    assert "unrecognized arguments" not in log


def test_rl_games_score_to_win_completes_the_job_instead_of_restarting_it(tmp_path, supervisor_factory):
    """rl_games exits 0 at a new best above score_to_win ("Network won!"); its resume would reset the best to
    -100500 and win again at once, so a restart only loops until the restart limit calls a won job failed."""
    lab = fake_isaaclab(tmp_path / "IsaacLab", "rl_games")
    extra = [f"agent.params.config.horizon_length={R}", "agent.params.config.save_best_after=3",
             "agent.params.config.score_to_win=-1000000.0"]
    cfg = write_config(tmp_path, builtin_job("cp", workflow="rl_games", isaaclab_dir=str(lab),
                                             launcher=[sys.executable], task="Isaacd-Cartpole-v0", num_envs=32,
                                             max_iterations=1000, save_interval=SAVE, extra_args=extra))
    sp = supervisor_factory(cfg)
    j = wait_for(lambda: (x := sp.job("cp"))["state"] in ("completed", "failed", "backing-off") and x, 120,
                 what="the trainer's exit")
    assert j["state"] == "completed", j["state_reason"]
    assert j["state_reason"].startswith("score_to_win reached: mean reward") and "> -1e+06" in j["state_reason"]
    assert j["restarts"] == 0 and len(started(sp, "cp")) == 1
    log = (tmp_path / "state" / "logs" / "cp.log").read_text(errors="replace")
    assert "Network won!" in log


@pytest.mark.parametrize("library", ["skrl", "rl_games"])
def test_a_warm_spare_takes_over_a_skrl_or_rl_games_job_and_it_still_counts_exactly(tmp_path, supervisor_factory,
                                                                                    library):
    """skrl and rl_games run without the shim, but the spare still does their imports ahead (hosted by the shim
    file); at a kill -9 it runs the train script as plain Python with the resume flags, and the job still ends
    with exactly max_iterations done."""
    lab = fake_isaaclab(tmp_path / "IsaacLab", library)
    # skrl's write_interval "auto" is int(timesteps / 100): a resumed run of fewer than 100 timesteps (a kill that
    # lands at iteration 6 or later of 12 x 16, as under the suite's load) writes no TensorBoard at all, so isaacd
    # never sees it train (CI, 2026-12-07: "timed out ... waiting for training again"); every iteration, whatever
    # the kill's moment
    extra = ["--step_delay", "0.03"] + ([f"agent.agent.rollouts={R}", f"agent.agent.experiment.write_interval={R}"]
                                        if library == "skrl" else [f"agent.params.config.horizon_length={R}"])
    preload = [MODULES[library], "isaacd_trainer.minilib"]
    cfg = write_config(tmp_path, builtin_job("cp", workflow=library, isaaclab_dir=str(lab), launcher=[sys.executable],
                                             task="Isaacd-Cartpole-v0", num_envs=32, max_iterations=TOTAL,
                                             save_interval=SAVE, extra_args=extra, spare=True, spare_preload=preload))
    wf = resolve(parse_config(cfg.read_text(), str(cfg), cfg.parent).jobs[0]).workflow
    sp = supervisor_factory(cfg)

    def ready_with_checkpoint(x: dict):  # noqa: ANN202
        if x["spare"].get("state") != "ready" or not (x["pid"] and x["run_dir"]):
            return None
        n = newest_complete(Path(x["run_dir"]), layout=wf.layout)
        return x if n is not None and n.iteration >= SAVE else None

    j = wait_for(lambda: ready_with_checkpoint(sp.job("cp")), 120, interval=0.05, what="a checkpoint and a ready spare")
    spare_pid = j["spare"]["pid"]
    assert j["spare"]["rss_bytes"] > 50 * 2**20
    os.kill(j["pid"], signal.SIGKILL)
    t_kill = time.monotonic()
    again = wait_for(lambda: (x := sp.job("cp"))["pid"] not in (None, j["pid"]) and x, 30, interval=0.02,
                     what="the restart")
    assert again["pid"] == spare_pid  # the spare became the trainer
    warm = started(sp, "cp")[-1]
    assert warm["warm_spare"] is True and warm["resume_from"] is not None
    # training again: the new run dir found and its first iteration logged (the job is `running` again)
    wait_for(lambda: (x := sp.job("cp"))["run_dir"] not in (None, j["run_dir"]) and x["state"] == "running", 60,
             interval=0.02, what="training again")
    print(f"{library}: kill -9 -> the new run's first iteration, warm spare: {time.monotonic() - t_kill:.2f} s")
    done = wait_for(lambda: (x := sp.job("cp"))["state"] in ("completed", "failed") and x, 180, what="completed")
    assert done["state"] == "completed", done["state_reason"]
    assert done["restarts"] == 1 and done["checkpoint"]["iteration"] == TOTAL
    log = (tmp_path / "state" / "logs" / "cp.log").read_text(errors="replace")
    assert "Traceback" not in log and "[isaacd-shim]" not in log  # plain Python after go: no shim at work
