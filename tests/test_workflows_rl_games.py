"""The rl_games contract (daemon/workflows/rl_games.py), Isaac Lab 2.x and 3.x, against the faithful stand-ins.

rl_games counts epochs and frames, and both are restored from the checkpoint: `_ep_<N>` holds N epochs, a resume
trains epochs N+1 ... max_epochs (`--max_iterations` is a total), and TensorBoard is stepped by frames. These tests
pin the argv, the frame -> epoch mapping, and that the stand-in (which follows Isaac Lab's rl_games/train.py and
3.x's `train.py --rl_library rl_games` + rl_games' a2c_common on every contract point) loads exactly what isaacd
chose and numbers epochs across two resumes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from isaacd.config.schema import parse_config
from isaacd.observations.checkpoints import Checkpoint, Lineage, choose_resume
from isaacd.observations.tensorboard import TensorBoardTail
from isaacd.workflows import WorkflowError, resolve
from isaacd.workflows.params import yaml_int

H, N_ENVS = 16, 8  # horizon_length (Isaac Lab's cartpole rl_games config has 32) and envs: 128 frames per epoch


def job(toml: str, base: Path = Path("/")):
    return parse_config('[[jobs]]\nname = "j"\n' + toml, "test.toml", base).jobs[0]


def _toml(v) -> str:  # noqa: ANN001
    return json.dumps(v)


def rlg_job(tmp: Path, version: str = "3.0", extra: list[str] | None = None, name: str = "j", **keys):
    fields = {"workflow": "rl_games", "isaaclab_version": version, "launcher": [sys.executable],
              "train_script": str(tmp / "train.py"), "log_root": str(tmp / "logs"), "task": "Isaacd-Cartpole-v0",
              "num_envs": N_ENVS, "device": "cpu", "max_iterations": 10, "save_interval": 3, **keys}
    (tmp / "train.py").write_text("# train.py\n")
    body = "\n".join(f"{k} = {_toml(v)}" for k, v in fields.items())
    args = [f"agent.params.config.horizon_length={H}"] if extra is None else extra
    return parse_config(f'[[jobs]]\nname = "{name}"\n' + body + f"\nextra_args = {_toml(args)}\n", "test.toml",
                        Path("/")).jobs[0]


def fake_run(run: Path, horizon: int | None = H, num_envs: int | None = N_ENVS) -> Path:
    """A run dir with params as Isaac Lab's dump_yaml writes them (block style, nested)."""
    (run / "params").mkdir(parents=True)
    if horizon is not None:
        (run / "params" / "agent.yaml").write_text(
            "params:\n  seed: 42\n  env:\n    clip_actions: 1.0\n  network:\n    mlp:\n      units:\n      - 32\n"
            f"      - 32\n  config:\n    name: j\n    num_actors: -1\n    horizon_length: {horizon}\n"
            "    minibatch_size: 512\n")
    if num_envs is not None:
        (run / "params" / "env.yaml").write_text(
            f"viewer:\n  eye:\n  - 7.5\n  num_envs: 999\nscene:\n  num_envs: {num_envs}\n  env_spacing: 4.0\n"
            "seed: 42\n")
    return run


# ---- pure: flags, layout, numbering -----------------------------------------------------------------------

@pytest.mark.parametrize("version, unified", [("2.3", False), ("3.0", True)])
def test_argv_fresh_and_resumed(tmp_path, version, unified):
    r = resolve(rlg_job(tmp_path, version, agent="rl_games_lstm_cfg_entry_point"))
    wf = r.workflow
    assert wf.unified == unified and "rl_games" in wf.contract
    args = wf.args(r.job, None, seed=7)
    assert args[args.index("--max_iterations") + 1] == "10"
    assert ("--headless" in args) == (not unified)
    assert args[args.index("--agent") + 1] == "rl_games_lstm_cfg_entry_point"
    assert "agent.params.config.name=j" in args and "agent.params.config.save_frequency=3" in args
    run = next(a for a in args if a.startswith("++agent.params.config.full_experiment_name="))
    assert wf.run_dir_re(r.job).match(run.split("=", 1)[1]) and "--checkpoint" not in args
    c = Checkpoint(tmp_path / "logs/rl_games/j/2026-12-03_08-00-00_j/nn/last_j_ep_6_rew_20.5.pth", 6, 0.0, 1)
    args = wf.args(r.job, c, seed=7)
    assert args[args.index("--max_iterations") + 1] == "10"  # max_epochs: a total, restore sets epoch_num = 6
    assert args[args.index("--checkpoint") + 1] == str(c.path) and Path(str(c.path)).is_absolute()
    assert "--resume" not in args and "--load_run" not in args and "latest" not in args
    assert not wf.run_dir_re(r.job).match("2026-12-03_08-00-00_jx")
    assert wf.is_complete(r.job, Checkpoint(c.path, 10, 0, 1), None)
    assert not wf.is_complete(r.job, c, 10**9)  # TensorBoard frames never complete it


def test_the_3x_unified_script_gets_rl_library(tmp_path):
    lab = tmp_path / "IsaacLab"
    (lab / "scripts/reinforcement_learning").mkdir(parents=True)
    (lab / "scripts/reinforcement_learning/train.py").write_text("")
    (lab / "isaaclab.sh").write_text("")
    j = job(f'workflow = "rl_games"\nisaaclab_dir = "{lab}"\nisaaclab_version = "3.0"\nlog_root = "{tmp_path}"\n')
    prog = resolve(j).program(in_container=False)
    assert prog.prefix == [str(lab / "isaaclab.sh"), "-p", str(lab / "scripts/reinforcement_learning/train.py"),
                           "--rl_library", "rl_games"]


def test_overrides_isaacd_owns_are_refused(tmp_path):
    for bad in ("agent.params.config.name=x", "++agent.params.config.full_experiment_name=x",
                "agent.params.config.max_epochs=5", "agent.params.config.save_frequency=1"):
        with pytest.raises(WorkflowError) as e:
            resolve(rlg_job(tmp_path, extra=[bad]))
        assert e.value.key == "extra_args" and bad.split("=")[0].lstrip("+") in e.value.message


def test_yaml_int_reads_the_nested_key_only(tmp_path):
    run = fake_run(tmp_path / "r")
    assert yaml_int(run / "params/agent.yaml", ("params", "config", "horizon_length")) == H
    assert yaml_int(run / "params/env.yaml", ("scene", "num_envs")) == N_ENVS  # not viewer.num_envs
    assert yaml_int(run / "params/agent.yaml", ("params", "config", "name")) is None  # not an int
    assert yaml_int(run / "params/nope.yaml", ("a",)) is None


def test_progress_iteration_maps_frames_to_epochs(tmp_path):
    wf = resolve(rlg_job(tmp_path)).workflow
    run = fake_run(tmp_path / "run")
    fpe = H * N_ENVS
    assert wf.frames_per_epoch(run) == fpe
    # epoch E is logged at the frame count before its own frames: 0 -> epoch 1, (E-1) * fpe -> E
    assert [wf.progress_iteration(s, run, None) for s in (0, 1, fpe - 1, fpe, 5 * fpe)] == [1, 1, 1, 2, 6]
    # frames are restored with the checkpoint: a run resumed from _ep_6 logs epoch 7 at 6 * fpe
    assert wf.progress_iteration(6 * fpe, run, 6) == 7
    # rewards/iter is stepped by the epoch itself (small); a resumed run never shows less than the epoch after
    assert wf.progress_iteration(7, run, 6) == 7
    # the run's own params win over the job (e.g. num_envs changed by a reload since)
    other = fake_run(tmp_path / "other", horizon=32, num_envs=4)
    assert wf.progress_iteration(3 * 128, other, None) == 4
    # no env.yaml: the job's num_envs; no agent.yaml: the job's horizon_length override
    assert wf.frames_per_epoch(fake_run(tmp_path / "a", num_envs=None)) == fpe
    assert wf.frames_per_epoch(fake_run(tmp_path / "b", horizon=None)) == fpe
    # multi-GPU: rank 0 adds curr_frames * world_size every epoch (2 ranks train on GPUs: a CPU device is refused)
    wf2 = resolve(rlg_job(tmp_path, nproc_per_node=2, device="cuda")).workflow
    assert wf2.progress_iteration(2 * fpe, run, None) == 2
    # nothing known (no params, no override): the resume point, never a guess ahead of it
    wf3 = resolve(rlg_job(tmp_path, extra=[])).workflow
    assert wf3.progress_iteration(10**6, tmp_path / "missing", 4) == 4
    assert wf3.progress_iteration(10**6, None, None) == 0


# ---- contract: isaacd's argv against the stand-ins ---------------------------------------------------------

def _launch(r, resume, tmp: Path, *extra: str,  # noqa: ANN001
            args: list[str] | None = None) -> subprocess.CompletedProcess:
    if r.generation.major >= 3:
        prefix = [sys.executable, "-m", "isaacd_trainer.isaaclab30", "--rl_library", "rl_games"]
    else:
        prefix = [sys.executable, "-m", "isaacd_trainer.rl_games_train"]
    cwd = tmp / "work"
    cwd.mkdir(exist_ok=True)
    if not (cwd / "logs").exists():
        (cwd / "logs").symlink_to(r.job.log_root)
    argv = prefix + (args if args is not None else r.workflow.args(r.job, resume, seed=1)) + list(extra)
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _newest_run(r, known: set[str]) -> Path:  # noqa: ANN001
    exp = r.workflow.experiment_dir(r.job)
    new = sorted(p for p in exp.iterdir() if p.name not in known)
    assert len(new) == 1 and r.workflow.run_dir_re(r.job).match(new[0].name), new
    return new[0]


def _epochs_logged(run: Path, wf, resume_iteration) -> list[tuple[int, int]]:  # noqa: ANN001
    """(info/epochs value, progress_iteration of its step) for every epoch the run logged."""
    tail = TensorBoardTail(run)
    return [(int(p.value), wf.progress_iteration(p.step, run, resume_iteration)) for p in tail.poll()
            if p.tag == "info/epochs"]


@pytest.mark.slow
@pytest.mark.parametrize("version", ["2.3", "3.0"])
def test_two_resumes_load_exactly_the_chosen_checkpoint_and_number_epochs_on(tmp_path, version):
    """Each launch exits (fault injection, like a crash) after 4 epochs; isaacd's choice is what loads."""
    (tmp_path / "logs").mkdir()
    r = resolve(rlg_job(tmp_path, version))
    wf = r.workflow
    # a sibling job in the same experiment whose run name shares the prefix, with a newer and further checkpoint
    sib = r.workflow.experiment_dir(r.job) / "2099-01-01_00-00-00_jx"
    (sib / "nn").mkdir(parents=True)
    torch.save({"epoch": 9, "frame": 0}, sib / "nn" / "last_j_ep_9_rew_1.0.pth")
    lineage: list[Lineage] = []
    resume = None
    seen: set[str] = {sib.name}
    chosen, firsts = [], []
    for _ in range(3):
        res = _launch(r, resume, tmp_path, "--fault_exit_after", "4:3")
        assert "Error" not in res.stderr.replace("FAULT", ""), res.stderr[-2000:]
        run = _newest_run(r, seen)
        seen.add(run.name)
        start = resume.iteration if resume else 0
        if resume is not None:
            assert f"Loading model checkpoint from: {resume.path}" in res.stdout
            assert f"=> loading checkpoint '{resume.path}'" in res.stdout  # rl_games' restore: that file, no other
        # rl_games restores epoch_num and frame: this run's first epoch is the one after the checkpoint, and every
        # TensorBoard frame step maps back to the epoch it was logged for
        logged = _epochs_logged(run, wf, resume.iteration if resume else None)
        assert logged and all(e == mapped for e, mapped in logged), logged
        firsts.append(logged[0][0])
        assert logged[0][0] == start + 1
        lineage.append(Lineage(run, resume.iteration if resume else None))
        resume = choose_resume(lineage, layout=wf.layout)
        assert resume.path.parent.parent == run  # never the sibling's _ep_9
        chosen.append(resume.iteration)
        if wf.is_complete(r.job, resume, None):
            assert res.returncode == 0
            break
        assert res.returncode == 3
    # save_frequency 3 of max_epochs 10: exits after epoch 4 with _ep_3; from 3 after 7 with _ep_6; from 6 the run
    # reaches max_epochs (10) and always saves _ep_10
    assert chosen == [3, 6, 10] and firsts == [1, 4, 7]
    names = sorted(p.name for p in (run / "nn").iterdir())
    assert any(n.startswith("last_j_ep_10_rew__") for n in names)  # the final save: str(array), [] -> _
    assert not any("_ep_11_" in n for n in names)
    if version == "3.0":
        manifest = json.loads((run / "run.json").read_text())
        assert manifest["library"] == "rl_games" and manifest["metadata"] == {"agent": "rl_games_cfg_entry_point"}


@pytest.mark.slow
def test_3x_checkpoint_resolution_and_hydra_like_upstream(tmp_path):
    """3.x: a missing file exits 1 before any run dir exists; `latest` takes the newest manifested run of the task,
    a sibling job's (why isaacd never passes it); `agent.*` leaves are set directly, so even a plain
    full_experiment_name works there; a stray token is Hydra's error (exit 1)."""
    (tmp_path / "logs").mkdir()
    r = resolve(rlg_job(tmp_path, "3.0", max_iterations=2, save_interval=1))
    mine = _launch(r, None, tmp_path)
    assert mine.returncode == 0, mine.stderr[-2000:]
    run = _newest_run(r, set())
    sib = resolve(rlg_job(tmp_path, "3.0", name="jx", experiment="j", max_iterations=2, save_interval=1))
    other = _launch(sib, None, tmp_path, args=sib.workflow.args(sib.job, None, seed=1))
    assert other.returncode == 0, other.stderr[-2000:]
    sib_run = next(p for p in r.workflow.experiment_dir(r.job).iterdir() if p.name.endswith("_jx"))
    base = ["--task", "Isaacd-Cartpole-v0", "--num_envs", "8", "--max_iterations", "3", "--device", "cpu",
            "agent.params.config.device=cpu", "agent.params.config.device_name=cpu",  # the policy's, as upstream
            "agent.params.config.name=j", f"agent.params.config.horizon_length={H}"]
    latest = _launch(r, None, tmp_path, args=base + ["--checkpoint", "latest",
                                                     "agent.params.config.full_experiment_name=plain"])
    assert latest.returncode == 0, latest.stderr[-2000:]
    loaded = latest.stdout.split("Loading model checkpoint from: ")[1].splitlines()[0]
    assert Path(loaded).parent.parent == sib_run and Path(loaded).parent.parent != run
    assert (r.workflow.experiment_dir(r.job) / "plain" / "nn").is_dir()
    before = set(p.name for p in r.workflow.experiment_dir(r.job).iterdir())
    missing = _launch(r, None, tmp_path, args=base + ["--checkpoint", "nope.pth",
                                                      "++agent.params.config.full_experiment_name=never"])
    assert missing.returncode == 1 and "Unable to find the file: nope.pth" in missing.stderr
    assert set(p.name for p in r.workflow.experiment_dir(r.job).iterdir()) == before
    stray = _launch(r, None, tmp_path, args=base + ["True"])
    assert stray.returncode == 1 and "Error parsing override" in stray.stderr


def test_finished_early_by_score_to_win_or_max_frames_from_the_runs_own_params(tmp_path):
    r = resolve(rlg_job(tmp_path))
    wf = r.workflow
    run = fake_run(tmp_path / "run")
    agent_yaml = run / "params" / "agent.yaml"
    assert wf.finished_early(r.job, run, {"rewards/iter": 10**9}, 5 * H * N_ENVS) is None  # neither is set
    agent_yaml.write_text(agent_yaml.read_text() + "    score_to_win: 20000\n    max_frames: -1\n"
                          "    save_best_after: 6\n")
    assert wf.finished_early(r.job, run, {"rewards/iter": 19999.5}, 5 * H * N_ENVS) is None
    # epoch 5 < save_best_after 6: rl_games takes no best yet, so it cannot have won; an exit 0 there is not a win
    assert wf.finished_early(r.job, run, {"rewards/iter": 20000.5}, 4 * H * N_ENVS) is None
    why = wf.finished_early(r.job, run, {"rewards/iter": 20000.5}, 5 * H * N_ENVS)
    assert why == "score_to_win reached: mean reward 20000.5 > 20000 (rl_games stops there)"
    assert wf.finished_early(r.job, None, {"rewards/iter": 20000.5}, None) is None  # no run dir: no evidence
    # max_frames: epoch E is logged at the frames before it, so after it ran `step + frames per epoch` are done
    agent_yaml.write_text(agent_yaml.read_text().replace("max_frames: -1", f"max_frames: {6 * H * N_ENVS}"))
    assert wf.finished_early(r.job, run, {}, 4 * H * N_ENVS) is None
    assert wf.finished_early(r.job, run, {}, 5 * H * N_ENVS) == \
        f"max_frames reached: {6 * H * N_ENVS} frames >= {6 * H * N_ENVS} (rl_games stops there)"
