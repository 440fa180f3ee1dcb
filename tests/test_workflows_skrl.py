"""The skrl contract (daemon/workflows/skrl.py) and the rl_games Hydra fix, against the faithful stand-ins.

skrl counts timesteps from 0 in every run (`agent.load` restores the modules only), so a checkpoint's place
in the job comes from the run's resume point: these tests pin that count, the argv, and that the stand-in
(which behaves like Isaac Lab's skrl/train.py + skrl on every contract point) loads exactly what isaacd chose.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from isaacd.config.schema import parse_config
from isaacd.observations.checkpoints import Checkpoint, Lineage, choose_resume, list_checkpoints
from isaacd.workflows import WorkflowError, resolve
from isaacd.workflows.skrl import checkpoint_every, run_rollouts

R = 16  # the stand-in's rollouts (Isaac Lab's cartpole skrl config has 32)


def job(toml: str, base: Path = Path("/")):
    return parse_config('[[jobs]]\nname = "j"\n' + toml, "test.toml", base).jobs[0]


def skrl_job(tmp: Path, version: str = "2.3", extra: str = "", **keys) -> object:
    fields = {"workflow": "skrl", "isaaclab_version": version, "launcher": [sys.executable],
              "train_script": str(tmp / "train.py"), "log_root": str(tmp / "logs"), "task": "Isaacd-Cartpole-v0",
              "num_envs": 32, "device": "cpu", "max_iterations": 10, "save_interval": 3, **keys}
    (tmp / "train.py").write_text("# skrl/train.py\n")
    body = "\n".join(f"{k} = {_toml(v)}" for k, v in fields.items())
    return job(body + f'\nextra_args = ["agent.agent.rollouts={R}"{extra}]\n')


def _toml(v) -> str:  # noqa: ANN001
    import json

    return json.dumps(v)


def fake_run(exp: Path, name: str, timesteps: list[int], rollouts: int = R) -> Path:
    run = exp / name
    (run / "checkpoints").mkdir(parents=True)
    (run / "params").mkdir()
    (run / "params" / "agent.yaml").write_text(f"seed: 42\nmodels:\n  separate: false\nagent:\n  class: PPO\n"
                                               f"  rollouts: {rollouts}\n  experiment:\n    directory: x\n")
    for t in timesteps:
        torch.save({"policy": {"w": torch.zeros(2)}}, run / "checkpoints" / f"agent_{t}.pt")
    torch.save({"policy": {"w": torch.zeros(2)}}, run / "checkpoints" / "best_agent.pt")
    return run


# ---- pure: flags, numbering, completion -------------------------------------------------------------------

def test_skrl_needs_the_rollouts_and_refuses_the_overrides_it_owns(tmp_path):
    with pytest.raises(WorkflowError) as e:
        resolve(job(f'workflow = "skrl"\nisaaclab_version = "2.3"\nlauncher = ["python"]\n'
                    f'train_script = "{tmp_path}/t.py"\n'))
    assert e.value.key == "extra_args" and "agent.agent.rollouts=" in e.value.message
    (tmp_path / "t.py").write_text("")
    with pytest.raises(WorkflowError) as e:
        resolve(skrl_job(tmp_path, extra=', "agent.agent.experiment.checkpoint_interval=5"'))
    assert "checkpoint_interval" in e.value.message


@pytest.mark.parametrize("version, headless, every", [("2.3", True, 2), ("3.0", False, 3)])
def test_skrl_argv_fresh_and_resumed(tmp_path, version, headless, every):
    r = resolve(skrl_job(tmp_path, version))
    wf = r.workflow
    args = wf.args(r.job, None, seed=7)
    i = args.index("--max_iterations")
    assert args[i + 1] == "10" and ("--headless" in args) == headless and "--checkpoint" not in args
    assert "agent.agent.experiment.directory=j" in args and "agent.agent.experiment.experiment_name=j" in args
    # 2.x saves nothing at the end: the interval divides the 10 iterations (2); 3.x writes a final checkpoint
    assert f"agent.agent.experiment.checkpoint_interval={every * R}" in args
    c = Checkpoint(tmp_path / "logs/skrl/j/run/checkpoints/agent_64.pt", 4, 0.0, 1)
    args = wf.args(r.job, c, seed=7)
    assert args[args.index("--max_iterations") + 1] == "6"  # what is left: timesteps = 6 * rollouts
    assert args[args.index("--checkpoint") + 1] == str(c.path)
    assert f"agent.agent.experiment.checkpoint_interval={3 * R}" in args
    assert wf.run_dir_re(r.job).match("2026-12-03_08-00-00_ppo_torch_j")
    assert not wf.run_dir_re(r.job).match("2026-12-03_08-00-00_ppo_torch_jx")
    assert wf.is_complete(r.job, Checkpoint(c.path, 10, 0, 1), None)
    assert not wf.is_complete(r.job, Checkpoint(c.path, 9, 0, 1), 10 * R)  # TensorBoard timesteps never complete it


def test_checkpoint_every_is_the_largest_divisor_not_above_save_interval():
    assert [checkpoint_every(n, 3) for n in (10, 9, 7, 6, 2, 1)] == [2, 3, 1, 3, 2, 1]
    assert checkpoint_every(1500, 50) == 50


def test_numbering_restarts_per_run_and_choose_resume_counts_on_from_the_resume_point(tmp_path):
    r = resolve(skrl_job(tmp_path))
    wf, exp = r.workflow, r.workflow.experiment_dir(r.job)
    run1 = fake_run(exp, "2026-12-03_08-00-00_ppo_torch_j", [32, 64, 96])       # iterations 2, 4, 6
    run2 = fake_run(exp, "2026-12-03_08-01-00_ppo_torch_j", [48, 96])           # resumed at 4: 7, 10
    run3 = fake_run(exp, "2026-12-03_08-02-00_ppo_torch_j", [32], rollouts=8)   # resumed at 7, other rollouts: 11
    assert run_rollouts(run3) == 8
    lineage = [Lineage(run1, None)]
    assert choose_resume(lineage, layout=wf.layout).iteration == 6
    # the second attempt resumed from iteration 4: run1's 6 is abandoned, run2's agent_96 holds 4 + 6
    lineage.append(Lineage(run2, 4))
    best = choose_resume(lineage, layout=wf.layout)
    assert (best.path.name, best.iteration) == ("agent_96.pt", 10)
    assert wf.is_complete(r.job, best, None)
    # a rollback below 10 finds agent_48 of run2 (7), below 7 run1's agent_64 (4), never run1's agent_96
    assert choose_resume(lineage, before_iteration=10, layout=wf.layout).iteration == 7
    got = choose_resume(lineage, before_iteration=7, layout=wf.layout)
    assert (got.path.parent.parent, got.iteration) == (run1, 4)
    lineage.append(Lineage(run3, 7))
    assert choose_resume(lineage, layout=wf.layout).iteration == 7 + 32 // 8
    assert [c.iteration for c in list_checkpoints(run2, wf.layout, 4)] == [10, 7]  # best_agent.pt is not listed
    assert wf.progress_iteration(5 * R, run2, 4) == 9


# ---- contract: isaacd's argv against the stand-in ---------------------------------------------------------

def _launch(r, resume, tmp: Path, *extra: str) -> subprocess.CompletedProcess:  # noqa: ANN001
    if r.generation.major >= 3:
        prefix = [sys.executable, "-m", "isaacd_trainer.isaaclab30", "--rl_library", "skrl"]
    else:
        prefix = [sys.executable, "-m", "isaacd_trainer.skrl_train"]
    cwd = tmp / "work"
    cwd.mkdir(exist_ok=True)
    if not (cwd / "logs").exists():
        (cwd / "logs").symlink_to(r.job.log_root)
    argv = prefix + r.workflow.args(r.job, resume, seed=1) + list(extra)
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _newest_run(r, known: set[str]) -> Path:  # noqa: ANN001
    exp = r.workflow.experiment_dir(r.job)
    new = sorted(p for p in exp.iterdir() if p.name not in known)
    assert len(new) == 1 and r.workflow.run_dir_re(r.job).match(new[0].name), new
    return new[0]


@pytest.mark.slow
@pytest.mark.parametrize("version", ["2.3", "3.0"])
def test_two_resumes_against_the_stand_in_count_exactly_max_iterations(tmp_path, version):
    """Each launch exits (fault injection, like a crash) at its 4th iteration; isaacd's choice is what loads."""
    (tmp_path / "logs").mkdir()
    r = resolve(skrl_job(tmp_path, version))
    wf = r.workflow
    lineage: list[Lineage] = []
    resume = None
    seen: set[str] = set()
    chosen = []
    for _ in range(3):
        res = _launch(r, resume, tmp_path, "--fault_exit_after", "4:3")
        assert "Error" not in res.stderr.replace("FAULT", ""), res.stderr[-2000:]
        run = _newest_run(r, seen)
        seen.add(run.name)
        if resume is not None:
            assert f"[INFO] Loading model checkpoint from: {resume.path}" in res.stdout
        lineage.append(Lineage(run, resume.iteration if resume else None))
        resume = choose_resume(lineage, layout=wf.layout)
        chosen.append(resume.iteration)
        if wf.is_complete(r.job, resume, None):
            assert res.returncode == 0
            break
        assert res.returncode == 3
    # 2.x: every 2 of 10 -> exits at 4 with agent_64 (4); 6 left, every 3 -> agent_48 (7); 3 left -> agent_48 (10)
    # 3.x: every 3 -> agent_48 (3); 7 left -> agent_48 (6); 4 left: runs to the end, final agent_64 (10)
    assert chosen == ([4, 7, 10] if version == "2.3" else [3, 6, 10])
    assert resume.iteration == r.job.max_iterations


@pytest.mark.slow
def test_a_relative_checkpoint_resolves_against_the_working_directory_and_a_missing_one_exits_1(tmp_path):
    (tmp_path / "logs").mkdir()
    r = resolve(skrl_job(tmp_path, max_iterations=2, save_interval=1))
    res = _launch(r, None, tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    run = _newest_run(r, set())
    # write_interval "auto" = int(32 / 100) = 0: no reward tracking, so no best_agent.pt either (as in skrl)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["agent_16.pt", "agent_32.pt"]
    base = [sys.executable, "-m", "isaacd_trainer.skrl_train", "--task", "Isaacd-Cartpole-v0", "--num_envs", "8",
            "--max_iterations", "1", "--device", "cpu", f"agent.agent.rollouts={R}"]
    rel = os.path.relpath(run / "checkpoints" / "agent_32.pt", tmp_path / "work")
    ok = subprocess.run(base + ["--checkpoint", rel], cwd=tmp_path / "work", capture_output=True, text=True,
                        timeout=240)
    assert ok.returncode == 0 and f"Loading model checkpoint from: {run / 'checkpoints' / 'agent_32.pt'}" in ok.stdout
    bad = subprocess.run(base + ["--checkpoint", "nope.pt"], cwd=tmp_path / "work", capture_output=True, text=True,
                         timeout=240)
    assert bad.returncode == 1 and "Unable to find the file: nope.pt" in bad.stderr
    stray = subprocess.run(base + ["True"], cwd=tmp_path / "work", capture_output=True, text=True, timeout=240)
    assert stray.returncode == 1 and "Error parsing override" in stray.stderr  # leftovers are Hydra's


@pytest.mark.slow
def test_rl_games_full_experiment_name_needs_plus_plus_like_real_hydra(tmp_path):
    """Isaac Lab's rl_games configs have no full_experiment_name: Hydra refuses a plain override (exit 1)."""
    base = [sys.executable, "-m", "isaacd_trainer.rl_games_train", "--task", "Isaacd-Cartpole-v0", "--num_envs",
            "8", "--max_iterations", "1", "--device", "cpu",
            "agent.params.config.device=cpu", "agent.params.config.device_name=cpu"]  # the policy's, as upstream
    plain = subprocess.run(base + ["agent.params.config.full_experiment_name=r"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=240)
    assert plain.returncode == 1 and "Could not override 'agent.params.config.full_experiment_name'" in plain.stderr
    ok = subprocess.run(base + ["++agent.params.config.full_experiment_name=r"], cwd=tmp_path, capture_output=True,
                        text=True, timeout=240)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert [p.name for p in (tmp_path / "logs/rl_games/cartpole_direct/r/nn").iterdir()][0].startswith("last_")


def test_a_rebuilt_history_keeps_each_runs_resume_point_so_skrl_counts_on(tmp_path):
    """The job's history document is lost: rebuilt from the run dirs and the journal, the resumed run's
    `agent_96.pt` must still count as iteration 10 (resumed at 4), not 6, or the job would train past its end."""
    from isaacd.history.rebuild import rebuild
    from isaacd.history.store import StateStore

    r = resolve(skrl_job(tmp_path))
    exp = r.workflow.experiment_dir(r.job)
    run1 = fake_run(exp, "2026-12-03_08-00-00_ppo_torch_j", [32, 64, 96])
    run2 = fake_run(exp, "2026-12-03_08-01-00_ppo_torch_j", [48, 96])
    store = StateStore(tmp_path / "state")
    resume = {"path": str(run1 / "checkpoints" / "agent_64.pt"), "iteration": 4}
    for attempt, run, resume_from in ((1, run1, None), (2, run2, resume)):
        store.append_event("j", "started", attempt=attempt, reason="initial", pid=1, resume_from=resume_from)
        store.append_event("j", "run_dir", attempt=attempt, run_dir=str(run))
    history, facts = rebuild(store, r.job, tmp_path / "state")
    assert [a.resume_from for a in history.attempts] == [None, resume]
    assert facts["checkpoint"] == 10  # what the history_corrupt event reports
    lineage = [Lineage(Path(a.run_dir), a.resume_from["iteration"] if a.resume_from else None)
               for a in history.attempts]
    best = choose_resume(lineage, layout=r.workflow.layout)
    assert (best.path.parent.parent, best.iteration) == (run2, 10) and r.workflow.is_complete(r.job, best, None)
