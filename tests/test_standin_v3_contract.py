"""The 3.x stand-ins (``isaacd_trainer.isaaclab30`` and the skrl / rl_games ``run_v3``) against isaaclab 3.0.0.

One test per point where the stand-in used to differ from the released ``isaaclab==3.0.0`` wheel (the code of
record, ``.venv-isaaclab3``); each fails on the stand-in as it was before. The last test runs a few of the same
argv against the real ``isaaclab train`` (they all end before the simulation starts, ~10 s each).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PY = sys.executable
V30 = [PY, "-m", "isaacd_trainer.isaaclab30"]
TASK = "Isaacd-Cartpole-v0"
REPO = Path(__file__).resolve().parents[1]
REAL_PY = Path(os.environ.get("ISAACLAB3_VENV", REPO / ".venv-isaaclab3")) / "bin" / "python"
# a short CPU run: --device moves only the simulation; the agent's device is its config's (3.0.0)
QUICK = {
    "rsl_rl": ["--task", TASK, "--num_envs", "16", "--max_iterations", "1", "--device", "cpu", "agent.device=cpu",
               "agent.num_steps_per_env=8"],
    "skrl": ["--task", TASK, "--num_envs", "16", "--max_iterations", "1", "--device", "cpu",
             "agent.agent.rollouts=8"],
    "rl_games": ["--task", TASK, "--num_envs", "16", "--max_iterations", "1", "--device", "cpu",
                 "agent.params.config.device=cpu", "agent.params.config.device_name=cpu",
                 "agent.params.config.horizon_length=8", "agent.params.config.minibatch_size=128"],
}


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **extra)
    for k in ("WORLD_SIZE", "LOCAL_RANK", "RANK", "JAX_RANK", "JAX_LOCAL_RANK", "ISAACD_SHIM_EVENTS",
              "HYDRA_FULL_ERROR"):
        if k not in extra:
            e.pop(k, None)
    return e


def run(args: list[str], cwd: Path, timeout: float = 180, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(V30 + args, cwd=cwd, env=env(**extra), capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------------------------------ parsers (in process)
def test_launcher_flags_are_the_kit_launchers():
    """kit_launcher.KitLauncher.add_launcher_args (3.0.0): no --headless / --enable_cameras (left over for Hydra,
    which rejects them), --livestream 0|1|2, --viz validated, --device default cuda:0, --xr & co exist."""
    from isaacd_trainer import isaaclab30, rl_games_train, skrl_train

    for build in (isaaclab30.build_parser, skrl_train.build_parser_v3, rl_games_train.build_parser_v3):
        p = build()
        a, rest = p.parse_known_args(["--headless", "--enable_cameras", "--xr", "--anim_recording_enabled",
                                      "--max_visible_envs", "4", "--viz", "kit,newton"])
        assert rest == ["--headless", "--enable_cameras"]
        assert a.device == "cuda:0" and a.visualizer == ["kit", "newton_gl"] and a.max_visible_envs == 4
        for bad in (["--livestream", "-1"], ["--viz", "bogus"]):
            with pytest.raises(SystemExit) as e:
                p.parse_known_args(bad)
            assert e.value.code == 2


def test_common_train_args_of_every_backend():
    """common.add_common_train_args (3.0.0): --run_timestamp (skrl too) and --capture_env_sensors* everywhere."""
    from isaacd_trainer import isaaclab30, rl_games_train, skrl_train

    argv = ["--run_timestamp", "2020-01-01_00-00-00", "--capture_env_sensors", "2", "--capture_env_sensors_format",
            "file", "-rid", "3", "--export_io_descriptors"]
    for build in (isaaclab30.build_parser, skrl_train.build_parser_v3, rl_games_train.build_parser_v3):
        a, rest = build().parse_known_args(argv)
        assert rest == [] and a.run_timestamp == "2020-01-01_00-00-00" and a.capture_env_sensors == 2


def test_rsl_rl_resume_optimizer_state_and_its_abbreviation():
    """train_rsl_rl._parse_args (3.0.0) has --[no-]resume_optimizer_state; argparse's prefix matching makes a bare
    --resume that flag (the real one accepts it too), --load_run stays a leftover."""
    from isaacd_trainer.isaaclab30 import _checkpoint_load_cfg, build_parser

    a, rest = build_parser().parse_known_args(["--no-resume_optimizer_state"])
    assert a.resume_optimizer_state is False and rest == []
    a, rest = build_parser().parse_known_args(["--resume", "--load_run", "x"])
    assert a.resume_optimizer_state is True and rest == ["--load_run", "x"]
    assert _checkpoint_load_cfg(True, runner_class="OnPolicyRunner") is None
    assert _checkpoint_load_cfg(False, runner_class="OnPolicyRunner")["optimizer"] is False


def test_help_anywhere_wins(tmp_path):
    """preset_cli.setup_preset_cli (3.0.0): -h anywhere prints help and exits 0, even after a bad flag value; and
    dispatch._normalize_argv fuses `--kit_args --x` first."""
    r = run(["--rl_library", "rsl_rl", "--livestream", "9", "-h"], tmp_path)
    assert r.returncode == 0 and "--resume_optimizer_state" in r.stdout, r.stderr
    r = run(["--rl_library", "skrl", "--kit_args", "--ext-folder=/x", "--help"], tmp_path)
    assert r.returncode == 0 and "--run_timestamp" in r.stdout, r.stderr


def test_torchrl_is_a_backend_choice(tmp_path):
    """dispatch._BACKEND_MODULES["train"] (3.0.0) has torchrl: not an argparse 'invalid choice'."""
    r = run(["--rl_library", "torchrl", "--task", TASK], tmp_path)
    assert r.returncode == 2 and "invalid choice" not in r.stderr and "torchrl" in r.stderr


# ------------------------------------------------------------------------------------------ Hydra / task config
def test_agent_entry_point_is_loaded(tmp_path):
    """hydra.register_task -> parse_cfg.load_cfg_from_registry (3.0.0): --agent names the agent config; one the
    task does not register is a ValueError (exit 1) before anything is written."""
    for lib in ("rsl_rl", "skrl", "rl_games"):
        r = run(["--rl_library", lib, "--agent", "foo_cfg_entry_point"] + QUICK[lib], tmp_path)
        assert r.returncode == 1, (lib, r.stderr[-2000:])
        assert "Could not find configuration for the environment: 'Isaacd-Cartpole-v0'" in r.stderr
        assert "|-- skrl_cfg_entry_point" in r.stderr
    assert not (tmp_path / "logs").exists()


def test_preset_selectors_are_not_hydra_overrides():
    """hydra.register_task (3.0.0): presets= / physics= / renderer= (dashes stripped) are preset selectors; the
    built-in tasks declare none, so a name is a ValueError and an empty value selects nothing."""
    from isaacd_trainer import upstream

    env_cfg, agent_cfg = upstream.resolve_task_config_v3(TASK, "rsl_rl_cfg_entry_point",
                                                         overrides=["presets=", "agent.seed=7"])
    assert agent_cfg["seed"] == 7
    with pytest.raises(ValueError, match=r"Unknown preset\(s\): foo"):
        upstream.resolve_task_config_v3(TASK, "rsl_rl_cfg_entry_point", overrides=["presets=foo"])
    with pytest.raises(ValueError, match=r"Typed preset selector\(s\) physics=x did not match"):
        upstream.resolve_task_config_v3(TASK, "rsl_rl_cfg_entry_point", overrides=["--physics=x"])


# ------------------------------------------------------------------------------------------ run dirs, checkpoints
def test_manifest_task_keeps_a_play_suffix(tmp_path):
    """common.normalize_task_name (3.0.0) drops only the namespace (062dd2ad also dropped '-Play')."""
    from isaacd_trainer import upstream

    upstream.write_run_manifest(str(tmp_path / "run"), library="rsl_rl", task="ns:Isaac-Foo-Play")
    assert json.loads((tmp_path / "run" / "run.json").read_text())["task"] == "Isaac-Foo-Play"


def test_get_checkpoint_path_v3(tmp_path):
    """parse_cfg.get_checkpoint_path (3.0.0): natural sort; a missing log dir is a ValueError."""
    from isaacd_trainer import upstream

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for n in (9, 10):
        (run_dir / f"checkpoint_model_{n}.pt").write_bytes(b"x")
    assert upstream.get_checkpoint_path_v3(str(tmp_path), "run", "checkpoint_model_").endswith("_10.pt")
    with pytest.raises(ValueError, match="No runs present"):
        upstream.get_checkpoint_path_v3(str(tmp_path / "nope"), "run", ".*")


def test_skrl_run_timestamp_names_the_run(tmp_path):
    """train_skrl._run (3.0.0): run dir = (--run_timestamp or now) + _<algorithm>_<ml_framework>."""
    r = run(["--rl_library", "skrl", "--run_timestamp", "2020-01-01_00-00-00"] + QUICK["skrl"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = tmp_path / "logs" / "skrl" / "cartpole_direct" / "2020-01-01_00-00-00_ppo_torch"
    assert (run_dir / "run.json").is_file() and (run_dir / "checkpoints" / "agent_8.pt").is_file()


def test_skrl_distributed(tmp_path):
    """train_skrl._run (3.0.0): validate_distributed_device (CPU refused), seed + RANK, the manifest on rank 0
    only, params/ of other ranks in <run>/rank_<r> (this torch has no CUDA: the env then fails, exit 1)."""
    r = run(["--rl_library", "skrl", "--distributed"] + QUICK["skrl"], tmp_path)
    assert r.returncode == 1 and "Distributed training is not supported when using CPU device" in r.stderr
    assert not (tmp_path / "logs").exists()
    args = [a if a != "cpu" else "cuda:0" for a in QUICK["skrl"]]
    r = run(["--rl_library", "skrl", "--distributed", "--run_timestamp", "2020-01-01_00-00-00", "--seed", "5"]
            + args, tmp_path, RANK="1", LOCAL_RANK="1", WORLD_SIZE="2")
    assert r.returncode == 1
    run_dir = tmp_path / "logs" / "skrl" / "cartpole_direct" / "2020-01-01_00-00-00_ppo_torch"
    assert not (run_dir / "run.json").exists()
    assert "seed: 6" in (run_dir / "rank_1" / "params" / "agent.yaml").read_text()


def test_skrl_algorithm_must_match_the_agent_class(tmp_path):
    """isaaclab_rl/skrl.py:resolve_skrl_algorithm (3.0.0)."""
    r = run(["--rl_library", "skrl", "--agent", "skrl_cfg_entry_point", "--algorithm", "AMP"] + QUICK["skrl"],
            tmp_path)
    assert r.returncode == 1
    assert "Requested SKRL algorithm 'AMP' does not match the resolved agent.class 'PPO'" in r.stderr


def test_rl_games_track_needs_an_entity(tmp_path):
    """train_rl_games.run (3.0.0): --track without --wandb-entity is a ValueError (after the run dir exists)."""
    r = run(["--rl_library", "rl_games", "--track"] + QUICK["rl_games"], tmp_path)
    assert r.returncode == 1 and "Weights and Biases entity must be specified for tracking" in r.stderr


def test_rsl_rl_external_callback_runs(tmp_path):
    """cli_args_rsl_rl.register_external_tasks (3.0.0): --external_callback is imported and called first."""
    (tmp_path / "cbmod.py").write_text("import pathlib\ndef cb():\n    pathlib.Path('called').write_text('1')\n"
                                       "    return []\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    r = run(["--rl_library", "rsl_rl", "--external_callback", "cbmod.cb", "-h"], tmp_path, PYTHONPATH=path)
    assert r.returncode == 0 and (tmp_path / "called").is_file(), r.stderr


def test_configure_seed_deterministic():
    """isaaclab/utils/seed.py:configure_seed (3.0.0), what --deterministic calls after the runner is built."""
    import torch

    from isaacd_trainer import runtime

    before = torch.are_deterministic_algorithms_enabled()
    try:
        assert runtime.configure_seed(None, torch_deterministic=True) == 42
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(before)


# ------------------------------------------------------------------------------------------ against the real one
@pytest.mark.slow
@pytest.mark.isaaclab3
@pytest.mark.parametrize("argv, rc, needle", [
    (["--headless"], 2, "unrecognized arguments: --headless"),
    (["--resume", "--load_run", "x"], 2, "unrecognized arguments: --load_run"),
    (["--livestream", "9", "-h"], 0, "--resume_optimizer_state"),
    (["--agent", "foo_cfg_entry_point"], 1, "Please check that the gym registry has the entry point"),
])
def test_same_argv_same_outcome_as_real_isaaclab(tmp_path, argv, rc, needle):
    if not REAL_PY.exists():
        pytest.skip(f"{REAL_PY} missing (scripts/isaaclab3-venv.sh builds it)")
    real = subprocess.run([str(REAL_PY), "-m", "isaaclab", "train", "--rl_library", "rsl_rl", "--task",
                           "Isaac-Cartpole-Direct"] + argv, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env(ISAACSIM_ASSET_ROOT=str(REPO / "tests" / "isaaclab3" / "asset_root")))
    ours = run(["--rl_library", "rsl_rl", "--task", TASK] + argv, tmp_path)
    assert real.returncode == rc and needle in real.stdout + real.stderr, real.stderr[-2000:]
    assert ours.returncode == rc and needle in ours.stdout + ours.stderr, ours.stderr[-2000:]
