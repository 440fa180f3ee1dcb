"""The trainer contracts (daemon/workflows/): argv per Isaac Lab generation, detection, numbering.

Pure and fast. The proof that these command lines are what the real contracts accept is in
test_workflow_contracts.py, which runs them against the faithful trainer (real rsl-rl-lib and
hydra-core); these tests pin the decisions that a user would notice when they go wrong.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from isaacd.config.schema import parse_config
from isaacd.observations.checkpoints import Checkpoint
from isaacd.workflows import WorkflowError, config_issues, regex_literal, resolve
from isaacd.workflows.detect import resume_flavour
from isaacd.observations.shim_events import ShimEvents

CLI_ARGS_23 = '''
    arg_group.add_argument("--resume", action="store_true", default=False, help="Whether to resume from a checkpoint.")
'''
CLI_ARGS_20 = '''
    arg_group.add_argument("--resume", type=bool, default=None, help="Whether to resume from a checkpoint.")
'''


def job(toml: str, base: Path = Path("/")):
    return parse_config("[[jobs]]\nname = \"j\"\n" + toml, "test.toml", base).jobs[0]


def fake_isaaclab(root: Path, version: str | None, cli_args: str = CLI_ARGS_23, unified: bool = False) -> Path:
    """The files isaacd reads from an Isaac Lab checkout: VERSION, isaaclab.sh, train scripts, cli_args.py."""
    (root / "scripts/reinforcement_learning/rsl_rl").mkdir(parents=True)
    (root / "scripts/reinforcement_learning/rl_games").mkdir(parents=True)
    (root / "isaaclab.sh").write_text("#!/bin/sh\n")
    if version is not None:
        (root / "VERSION").write_text(version + "\n")
    (root / "scripts/reinforcement_learning/rsl_rl/train.py").write_text("# train\n")
    (root / "scripts/reinforcement_learning/rl_games/train.py").write_text("# train\n")
    (root / "scripts/reinforcement_learning/rsl_rl/cli_args.py").write_text(cli_args)
    if unified:
        (root / "scripts/reinforcement_learning/train.py").write_text("# dispatch_library_entrypoint\n")
    return root


def ckpt(run: str, it: int, root: Path = Path("/logs/rsl_rl/j")) -> Checkpoint:
    return Checkpoint(root / run / f"model_{it}.pt", it, 0.0, 1)


def argv_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# ---- resume flags per generation ------------------------------------------------------------

def test_isaaclab_23_resumes_with_a_bare_store_true_flag_and_anchored_regexes(tmp_path):
    root = fake_isaaclab(tmp_path / "IsaacLab", "2.3.2")
    r = resolve(job(f'workflow = "rsl_rl"\nisaaclab_dir = "{root}"\n'))
    args = r.workflow.args(r.job, ckpt("2026-12-03_08-00-00_j", 40), seed=7)
    i = args.index("--resume")
    assert args[i + 1] == "--load_run"  # never "--resume True": a stray "True" is a Hydra error on 2.1-2.3
    assert argv_value(args, "--load_run") == "^2026-12-03_08-00-00_j$"
    assert argv_value(args, "--checkpoint") == "^model_40[.]pt$"
    assert "True" not in args


def test_isaaclab_20_resumes_with_resume_true(tmp_path):
    root = fake_isaaclab(tmp_path / "IsaacLab", "2.0.0.post12", CLI_ARGS_20)
    r = resolve(job(f'workflow = "rsl_rl"\nisaaclab_dir = "{root}"\n'))
    args = r.workflow.args(r.job, ckpt("2026-12-03_08-00-00_j", 40), seed=7)
    assert args[args.index("--resume") + 1] == "True"


def test_an_extension_projects_own_cli_args_decides_the_flavour(tmp_path):
    """Extension templates copy cli_args.py: an old copy on a new Isaac Lab still declares type=bool."""
    root = fake_isaaclab(tmp_path / "IsaacLab", "2.3.2")
    ext = tmp_path / "my_ext/scripts/rsl_rl"
    ext.mkdir(parents=True)
    (ext / "train.py").write_text("# extension train\n")
    (ext / "cli_args.py").write_text(CLI_ARGS_20)
    r = resolve(job(f'workflow = "rsl_rl"\nisaaclab_dir = "{root}"\ntrain_script = "{ext / "train.py"}"\n'))
    assert r.workflow.resume_flag == "bool"
    prefix = r.program(in_container=False).prefix
    assert prefix[:2] == [str(root / "isaaclab.sh"), "-p"] and prefix[2].endswith("shim.py")
    assert prefix[3:] == [str(ext / "train.py")]  # the extension's script, through Isaac Lab's launcher


def test_regex_literal_matches_only_its_own_name():
    pat = regex_literal("2026-12-03_08-00-00_job")
    assert re.match(pat, "2026-12-03_08-00-00_job")
    assert not re.match(pat, "2026-12-03_08-00-00_jobx")  # the sibling that an unanchored name lets win
    assert not re.match(regex_literal("model_7.pt"), "model_7xpt") and not re.match(regex_literal("model_7.pt"), "model_70.pt")
    with pytest.raises(ValueError):
        regex_literal("a b")


# ---- numbering ----------------------------------------------------------------------------

def test_resume_asks_for_total_minus_n_because_rsl_rl_reruns_iteration_n():
    r = resolve(job("max_iterations = 100\n"))
    wf = r.workflow
    fresh = wf.args(r.job, None, seed=1)
    assert argv_value(fresh, "--max_iterations") == "100"
    resumed = wf.args(r.job, ckpt("run", 40), seed=1)
    assert argv_value(resumed, "--max_iterations") == "60"  # runs 40..99 again, ending with model_99
    assert wf.iterations_done(ckpt("run", 99)) == 100
    assert wf.is_complete(r.job, ckpt("run", 99), None) and not wf.is_complete(r.job, ckpt("run", 98), None)
    assert wf.is_complete(r.job, None, 99) and not wf.is_complete(r.job, None, 98)


def test_save_interval_is_a_hydra_override_and_managed_flags_are_refused():
    r = resolve(job("save_interval = 25\n"))
    assert "agent.save_interval=25" in r.workflow.args(r.job, None, seed=1)
    from isaacd.config.schema import ConfigError

    for bad in ('"--run_name", "x"', '"agent.save_interval=3"', '"--resume"'):
        with pytest.raises(ConfigError, match="set by isaacd"):
            job(f"extra_args = [{bad}]\n")


# ---- generations ----------------------------------------------------------------------------

@pytest.mark.parametrize("version, major, unified_script", [("2.3.2", 2, False), ("3.0.0", 3, True)])
def test_generation_from_the_version_file(tmp_path, version, major, unified_script):
    root = fake_isaaclab(tmp_path / "IsaacLab", version, unified=unified_script)
    r = resolve(job(f'workflow = "rsl_rl"\nisaaclab_dir = "{root}"\n'))
    assert r.generation.major == major
    prefix = r.program(in_container=False).prefix
    if major == 3:  # the unified entry point, told which library; headless is 3.x's default
        assert prefix[-3:] == [str(root / "scripts/reinforcement_learning/train.py"), "--rl_library", "rsl_rl"]
        assert "--headless" not in r.workflow.args(r.job, None, seed=1)
    else:
        assert prefix[-1] == str(root / "scripts/reinforcement_learning/rsl_rl/train.py")
        assert "--headless" in r.workflow.args(r.job, None, seed=1)


def test_generation_without_version_file_from_the_scripts(tmp_path):
    root = fake_isaaclab(tmp_path / "a", None, unified=True)
    assert resolve(job(f'workflow = "rsl_rl"\nisaaclab_dir = "{root}"\n')).generation.major == 3
    root = fake_isaaclab(tmp_path / "b", None, CLI_ARGS_20)
    assert resolve(job(f'workflow = "rsl_rl"\nisaaclab_dir = "{root}"\n')).workflow.resume_flag == "bool"


def test_generation_from_the_image_tag_and_the_explicit_key():
    r = resolve(job('workflow = "rsl_rl"\nruntime = "podman"\n[jobs.container]\nimage = "nvcr.io/nvidia/isaac-lab:2.3.2"\n'))
    assert (r.generation.major, r.generation.minor) == (2, 3) and r.workflow.resume_flag == "store_true"
    r = resolve(job('workflow = "rsl_rl"\nruntime = "podman"\nisaaclab_version = "3.0"\n'
                    '[jobs.container]\nimage = "localhost/my-lab:latest"\n'))
    assert r.generation.major == 3


@pytest.mark.parametrize("toml, key, words", [
    ('workflow = "rsl_rl"\n', "isaaclab_dir", "isaaclab_dir"),
    ('workflow = "rsl_rl"\nisaaclab_dir = "/nonexistent/IsaacLab"\n', "isaaclab_dir", "not a directory"),
    ('workflow = "rsl_rl"\nruntime = "podman"\n[jobs.container]\nimage = "localhost/mine:1"\n', "isaaclab_version",
     "isaaclab_version"),
    ('isaaclab_version = "7.1"\n', "isaaclab_version", "not a generation isaacd knows"),
])
def test_unknown_generation_or_missing_install_names_the_key(toml, key, words):
    with pytest.raises(WorkflowError) as info:
        resolve(job(toml))
    assert info.value.key == key and words in info.value.message


def test_missing_train_script_is_reported_by_check_config(tmp_path):
    root = fake_isaaclab(tmp_path / "IsaacLab", "2.3.2")
    cfg = parse_config(f'[[jobs]]\nname = "a"\nworkflow = "rsl_rl"\nisaaclab_dir = "{root}"\n'
                       'train_script = "source/my_ext/scripts/rsl_rl/train.py"\n', "host.toml", tmp_path)
    issues = config_issues(cfg)
    assert len(issues) == 1 and issues[0].key == 'jobs[0] (name = "a").train_script'
    assert "does not exist" in issues[0].message


def test_resume_flavour_sniffing(tmp_path):
    p = tmp_path / "cli_args.py"
    p.write_text(CLI_ARGS_23)
    assert resume_flavour(p) == "store_true"
    p.write_text(CLI_ARGS_20)
    assert resume_flavour(p) == "bool"
    assert resume_flavour(tmp_path / "missing.py") is None


# ---- rl_games -----------------------------------------------------------------------------

def test_rl_games_resumes_with_a_checkpoint_path_and_a_total_epoch_count(tmp_path):
    root = fake_isaaclab(tmp_path / "IsaacLab", "2.3.2")
    r = resolve(job(f'workflow = "rl_games"\nisaaclab_dir = "{root}"\nmax_iterations = 500\n'))
    c = Checkpoint(Path("/l/rl_games/j/2026-12-03_08-00-00_j/nn/last_j_ep_200_rew_12.5.pth"), 200, 0, 1)
    args = r.workflow.args(r.job, c, seed=1)
    assert argv_value(args, "--checkpoint") == str(c.path) and "--resume" not in args
    assert argv_value(args, "--max_iterations") == "500"  # max_epochs is a total: restore sets epoch_num
    assert r.workflow.iterations_done(c) == 200
    assert r.workflow.layout.pattern.match("last_j_ep_200_rew_-3.25.pth").group(1) == "200"
    assert not r.workflow.layout.pattern.match("j.pth")  # the best-reward copy is not on the timeline
    # `++`: the key is not in the agent config, and Hydra refuses a plain override of a missing key
    run = next(a for a in args if a.startswith("++agent.params.config.full_experiment_name="))
    assert r.workflow.run_dir_re(r.job).match(run.split("=", 1)[1])


# ---- the shim's side channel ------------------------------------------------------------------

def test_side_channel_reads_whole_lines_and_skips_a_torn_one(tmp_path):
    path = tmp_path / "attempt-1.jsonl"
    ev = ShimEvents(path)
    assert ev.poll() == []  # not there yet
    lines = [{"event": "runner_started", "run_dir": "/l/run", "start_iteration": 40, "rank": 0},
             {"event": "runner_started", "run_dir": "/l/other", "rank": 1}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"event": "checkpoint_sa')
    got = ev.poll()
    assert [e["event"] for e in got] == ["runner_started"] and ev.report.run_dir == "/l/run"  # rank 1 ignored
    with open(path, "a") as fh:  # the trainer crashed mid-line; the next attempt's words follow
        fh.write('\n{"event": "checkpoint_saved", "path": "/l/run/model_42.pt", "iteration": 42, "rank": 0}\n')
    assert [e["event"] for e in ev.poll()] == ["checkpoint_saved"]
    assert ev.bad_lines == 1 and ev.report.checkpoints == [(42, "/l/run/model_42.pt")]


def test_isaaclab_3_resumes_with_the_absolute_checkpoint_file_and_no_resume_flag(tmp_path):
    root = fake_isaaclab(tmp_path / "IsaacLab", "3.0.0", unified=True)
    r = resolve(job(f'workflow = "rsl_rl"\nisaaclab_dir = "{root}"\n'))
    c = ckpt("2026-12-03_08-00-00_j", 40, tmp_path / "logs/rsl_rl/j")
    args = r.workflow.args(r.job, c, seed=7)
    assert argv_value(args, "--checkpoint") == str(c.path)
    assert "--resume" not in args and "--load_run" not in args  # 3.x has neither: Hydra would reject them
    b = resolve(job('isaaclab_version = "3.0"\n'))
    assert b.program(in_container=False).prefix[-4:] == ["-m", "isaacd_trainer.isaaclab30", "--rl_library", "rsl_rl"]


def test_isaaclab_20_names_the_experiment_through_hydra_too(tmp_path):
    """<= 2.0's update_rsl_rl_cfg ignores --experiment_name: without the override runs land in the task's default dir."""
    root = fake_isaaclab(tmp_path / "IsaacLab", "2.0.0", CLI_ARGS_20)
    r = resolve(job(f'workflow = "rsl_rl"\nisaaclab_dir = "{root}"\nexperiment = "exp"\n'))
    assert "agent.experiment_name=exp" in r.workflow.args(r.job, None, seed=1)
