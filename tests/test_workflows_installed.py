"""Isaac Lab 3.x installed with pip or uv (no checkout), and the device the policy runs on.

Pure and fast, on this venv's Python and on small launcher scripts that print what a Python with (or without)
isaaclab prints; tests/test_isaaclab3_real.py runs the real Isaac Lab 3.0.0 through the same code paths.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from isaacd.runtimes import trainer_command
from isaacd.config.schema import parse_config
from isaacd.observations.checkpoints import Checkpoint
from isaacd.workflows import WorkflowError, config_issues, resolve
from isaacd.workflows.installed import forget

SHIM = Path(__file__).resolve().parents[1] / "trainer" / "shim.py"


def job(toml: str, base: Path = Path("/")):
    return parse_config('[[jobs]]\nname = "j"\n' + toml, "test.toml", base).jobs[0]


def fake_python(tmp: Path, version: str | None, name: str = "python") -> Path:
    """A launcher that answers isaacd's probe like a Python whose `isaaclab` distribution is `version` (None:
    none installed) and otherwise runs this venv's Python."""
    p = tmp / name
    answer = f"isaaclab={version or ''}"
    p.write_text(f'#!/bin/sh\nif [ "$1" = "-c" ]; then echo "{answer}"; exit 0; fi\nexec {sys.executable} "$@"\n')
    p.chmod(0o755)
    forget()
    return p


def test_a_launcher_alone_runs_python_dash_m_isaaclab_train_through_the_shim(tmp_path):
    py = fake_python(tmp_path, "3.0.0")
    r = resolve(job(f'workflow = "rsl_rl"\ntask = "Isaac-Cartpole-Direct"\nlauncher = ["{py}"]\ndevice = "cpu"\n'))
    assert r.generation.label == "3.0" and r.generation.source == f"isaaclab installed in {py}"
    argv = r.program(in_container=False).argv(r.workflow.args(r.job, None, 1))
    assert argv[:7] == [str(py), str(SHIM), "-m", "isaaclab", "train", "--rl_library", "rsl_rl"]
    assert "--headless" not in argv and argv[argv.index("--device") + 1] == "cpu" and "agent.device=cpu" in argv


@pytest.mark.parametrize("library", ["skrl", "rl_games"])
def test_skrl_and_rl_games_run_the_module_without_the_shim(tmp_path, library):
    py = fake_python(tmp_path, "3.0.0")
    extra = 'extra_args = ["agent.agent.rollouts=16"]\n' if library == "skrl" else ""
    r = resolve(job(f'workflow = "{library}"\nlauncher = ["{py}"]\n' + extra))
    argv = r.program(in_container=False).argv(r.workflow.args(r.job, None, 1))
    assert argv[:6] == [str(py), "-m", "isaaclab", "train", "--rl_library", library]


def test_a_uv_style_launcher_is_kept_whole(tmp_path):
    py = fake_python(tmp_path, "3.1.2")
    launcher = ["/usr/bin/env", "UV_NO_SYNC=1", str(py)]  # any command line that ends in a Python
    r = resolve(job(f'workflow = "rsl_rl"\nlauncher = {json.dumps(launcher)}\n'))
    assert r.generation.label == "3.1"
    assert r.program(in_container=False).argv([])[:5] == [*launcher, str(SHIM), "-m"]


def test_isaaclab_version_wins_but_the_launcher_must_still_have_isaaclab(tmp_path):
    py = fake_python(tmp_path, "3.0.0")
    assert resolve(job(f'workflow = "rsl_rl"\nlauncher = ["{py}"]\nisaaclab_version = "3.1"\n')).generation.source \
        == "isaaclab_version"
    bare = fake_python(tmp_path, None, "bare")
    with pytest.raises(WorkflowError) as exc:
        resolve(job(f'workflow = "rsl_rl"\nlauncher = ["{bare}"]\nisaaclab_version = "3.0"\n'))
    assert exc.value.key == "launcher" and "has no isaaclab installed" in exc.value.message


@pytest.mark.parametrize("launcher,words", [
    (["/nonexistent/bin/python"], "/nonexistent/bin/python does not exist"),
    ([sys.executable], "has no isaaclab installed"),  # this venv: isaacd, no Isaac Lab
])
def test_a_launcher_without_isaaclab_is_a_config_error_naming_launcher(launcher, words):
    forget()
    cfg = parse_config(f'[[jobs]]\nname = "j"\nworkflow = "rsl_rl"\nlauncher = {json.dumps(launcher)}\n',
                       "test.toml", Path("/"))
    (issue,) = config_issues(cfg)
    assert issue.key == 'jobs[0] (name = "j").launcher' and words in issue.message


def test_pip_installed_2x_has_no_train_entry_point(tmp_path):
    py = fake_python(tmp_path, "2.3.2")
    with pytest.raises(WorkflowError) as exc:
        resolve(job(f'workflow = "rsl_rl"\nlauncher = ["{py}"]\n'))
    assert exc.value.key == "isaaclab_dir" and "no `python -m isaaclab train`" in exc.value.message


def test_an_unknown_generation_from_the_install_names_isaaclab_version(tmp_path):
    py = fake_python(tmp_path, "7.0.0")
    with pytest.raises(WorkflowError) as exc:
        resolve(job(f'workflow = "rsl_rl"\nlauncher = ["{py}"]\n'))
    assert exc.value.key == "isaaclab_version" and "Isaac Lab 7.0" in exc.value.message


def test_the_probe_is_asked_once_per_launcher_until_forgotten(tmp_path):
    count = tmp_path / "count"
    py = tmp_path / "python"
    py.write_text(f'#!/bin/sh\necho x >> {count}\necho isaaclab=3.0.0\n')
    py.chmod(0o755)
    forget()
    for _ in range(3):
        resolve(job(f'workflow = "rsl_rl"\nlauncher = ["{py}"]\n'))
    assert count.read_text().count("x") == 1
    forget()  # what a config reload does
    resolve(job(f'workflow = "rsl_rl"\nlauncher = ["{py}"]\n'))
    assert count.read_text().count("x") == 2


def test_a_missing_or_relative_asset_root_names_the_environment_key(tmp_path):
    py = fake_python(tmp_path, "3.0.0")
    for root, words in ((tmp_path / "nope", "is not a directory"), ("assets", "is relative")):
        with pytest.raises(WorkflowError) as exc:
            resolve(job(f'workflow = "rsl_rl"\nlauncher = ["{py}"]\n[jobs.environment]\nISAACSIM_ASSET_ROOT = "{root}"\n'))
        assert exc.value.key == "environment.ISAACSIM_ASSET_ROOT" and words in exc.value.message
    (tmp_path / "assets").mkdir()
    resolve(job(f'workflow = "rsl_rl"\nlauncher = ["{py}"]\n[jobs.environment]\n'
                f'ISAACSIM_ASSET_ROOT = "{tmp_path / "assets"}"\n'))


@pytest.mark.parametrize("device", ["cpu", "cuda:1"])
def test_the_policy_follows_the_jobs_device_not_isaac_labs_cuda_0(tmp_path, device):
    """Isaac Lab's --device moves only the simulation; the agent stays on cuda:0 unless told (issue 19)."""
    py = fake_python(tmp_path, "3.0.0")
    rsl = resolve(job(f'workflow = "rsl_rl"\nlauncher = ["{py}"]\ndevice = "{device}"\n'))
    args = rsl.workflow.args(rsl.job, None, 1)
    assert args[args.index("--device") + 1] == device and f"agent.device={device}" in args
    rlg = resolve(job(f'workflow = "rl_games"\nlauncher = ["{py}"]\ndevice = "{device}"\n'))
    args = rlg.workflow.args(rlg.job, None, 1)
    assert f"agent.params.config.device={device}" in args and f"agent.params.config.device_name={device}" in args
    skrl = resolve(job(f'workflow = "skrl"\nlauncher = ["{py}"]\ndevice = "{device}"\n'
                       'extra_args = ["agent.agent.rollouts=16"]\n'))
    assert not any(a.startswith("agent.device") for a in skrl.workflow.args(skrl.job, None, 1))  # follows the env
    builtin = resolve(job(f'device = "{device}"\n'))  # the built-in trainer (2.3 contract) is told the same
    assert f"agent.device={device}" in builtin.workflow.args(builtin.job, None, 1)


def test_multi_rank_jobs_leave_the_device_to_upstreams_distributed_path():
    r = resolve(job('device = "cuda"\ngpus = [0, 1]\n'))
    assert not any(a.startswith("agent.device") for a in r.workflow.args(r.job, None, 1))


def test_one_wandb_run_id_for_every_attempt_of_a_job():
    j = job("")
    first = 1_790_000_000.5
    env1 = trainer_command.trainer_env(j, wandb_run=trainer_command.wandb_run_id(j, first))
    env2 = trainer_command.trainer_env(j, wandb_run=trainer_command.wandb_run_id(j, first))
    assert env1["WANDB_RUN_ID"] == env2["WANDB_RUN_ID"] == f"j-{int(first):x}" and env1["WANDB_RESUME"] == "allow"
    assert trainer_command.wandb_run_id(j, first + 60) != env1["WANDB_RUN_ID"]  # trained again from scratch: a new run
    own = job('[jobs.environment]\nWANDB_RUN_ID = "mine"\n')  # the job's own environment wins
    assert trainer_command.trainer_env(own, wandb_run="j-1")["WANDB_RUN_ID"] == "mine"


def test_the_shim_runs_a_module_exactly_as_python_dash_m(tmp_path):
    pkg = tmp_path / "pkgx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(
        "import os, sys\n"
        "print(repr(sys.argv), __name__, __spec__.name, __package__, sys.path[0] == os.getcwd(),\n"
        "      sys.modules['__main__'].__dict__.get('__file__'))\n")
    env = {**os.environ, "ISAACD_SHIM_SAVE_ON_STOP": "0"}
    direct = subprocess.run([sys.executable, "-m", "pkgx", "train", "--x", "1"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    shimmed = subprocess.run([sys.executable, str(SHIM), "-m", "pkgx", "train", "--x", "1"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60)
    assert direct.returncode == shimmed.returncode == 0, shimmed.stderr
    assert shimmed.stdout == direct.stdout and str(pkg / "__main__.py") in direct.stdout


def test_resume_argv_of_the_pip_form_names_the_absolute_checkpoint(tmp_path):
    py = fake_python(tmp_path, "3.0.0")
    r = resolve(job(f'workflow = "rsl_rl"\nlauncher = ["{py}"]\nmax_iterations = 100\n'))
    ck = Checkpoint(tmp_path / "logs/rsl_rl/j/2026-12-04_00-00-00_j/model_40.pt", 40, mtime=0.0, size=1)
    args = r.workflow.args(r.job, ck, 1)
    assert args[args.index("--checkpoint") + 1] == str(ck.path) and args[args.index("--max_iterations") + 1] == "60"


def test_a_wrappers_forwarded_signal_is_one_stop_request_and_another_signal_still_exits_at_once(tmp_path):
    """`uv run ... python` forwards the SIGINT its process group already got: the shim sees it twice (measured
    with uv 0.13). The same signal again within 1 s is the same request; a different one exits at once."""
    script = tmp_path / "probe.py"
    script.write_text(
        "import importlib.util, os, signal, sys, time\n"
        f"spec = importlib.util.spec_from_file_location('isaacd_shim', {str(SHIM)!r})\n"
        "shim = importlib.util.module_from_spec(spec); spec.loader.exec_module(shim)\n"
        "shim._Progress.iterations = 1  # training has begun: a stop waits for the next boundary\n"
        "shim.install_signal_handlers()\n"
        "os.kill(os.getpid(), signal.SIGINT); os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(0.05)\n"
        "print('still running, stop requested by', signal.Signals(shim._Stop.signum).name, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGTERM); time.sleep(5)\n")
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "ISAACD_SHIM_SAVE_ON_STOP": "1"})
    assert "still running, stop requested by SIGINT" in res.stdout, res.stderr
    assert res.returncode == 128 + 15


@pytest.mark.parametrize("library,keys", [("rsl_rl", ["agent.device"]),
                                          ("rl_games", ["agent.params.config.device", "agent.params.config.device_name"])])
def test_in_a_container_the_policys_device_is_renumbered_with_the_simulations(library, keys):
    """CDI shows the job's GPU 2 as cuda:0 inside: `agent.device=cuda:2` there would name a GPU that is not
    there (the same rewrite as --device). The kit-less 3.x image's venv Python gives the pip form."""
    from isaacd.runtimes.container_spec import container_command

    j = job(f'workflow = "{library}"\nruntime = "podman"\ndevice = "cuda:2"\ngpus = [2]\n'
            'launcher = ["/opt/isaaclab-venv/bin/python"]\n[jobs.container]\nimage = "nvcr.io/nvidia/isaac-lab:3.0.0"\n')
    r = resolve(j)
    cmd = container_command(j, r.workflow.args(j, None, 1))
    head = ["/opt/isaaclab-venv/bin/python"] + (["/opt/isaacd/isaacd_shim.py"] if library == "rsl_rl" else [])
    assert cmd[:len(head) + 3] == [*head, "-m", "isaaclab", "train"]
    assert cmd[cmd.index("--device") + 1] == "cuda:0"
    assert [f"{k}=cuda:0" for k in keys] == [a for a in cmd if a.split("=")[0] in keys]
