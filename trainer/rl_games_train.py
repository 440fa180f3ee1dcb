"""Isaac Lab 2.x ``scripts/reinforcement_learning/rl_games/train.py`` on the built-in cart-pole:
``python -m isaacd_trainer.rl_games_train``.

Follows upstream (isaac-sim/IsaacLab @011c373c) step by step (``run_v3``: the 3.x backend, written from 062dd2ad
and checked against isaaclab 3.0.0, see its docstring; there ``agent.*`` leaves are set without Hydra, so a plain
``agent.params.config.full_experiment_name=X`` works too):

1. argparse: its flags + the AppLauncher's, ``parse_known_args()``; leftovers are Hydra overrides parsed by real
   hydra-core. The agent config has no ``full_experiment_name`` key (like every Isaac Lab rl_games yaml), so a
   plain ``agent.params.config.full_experiment_name=X`` is refused by Hydra's struct mode (exit 1); ``++`` works.
2. ``--max_iterations`` sets ``params.config.max_epochs`` (a total); ``--checkpoint`` -> ``retrieve_file_path``
   (absolute or relative to the working directory; missing: FileNotFoundError, exit 1) -> ``load_checkpoint``,
   ``load_path``.
3. ``log_root_path = abspath("logs/rl_games/<params.config.name>")``; run dir
   ``params.config.get("full_experiment_name", <%Y-%m-%d_%H-%M-%S>)``; params dumped.
4. rl_games' ``Runner``: restore (``epoch_num`` and ``frame`` from the checkpoint) and ``train()`` until
   ``epoch_num >= max_epochs`` (see ``minilib.RlGamesAgent`` for names and numbering). No signal handling.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import sys
import time
from datetime import datetime
from typing import Sequence

from isaacd_trainer import upstream
from isaacd_trainer.agent_cfgs import rl_games_agent_cfg
from isaacd_trainer.extras import add_isaacd_args
from isaacd_trainer.tasks import TASKS


def _strtobool(x: str) -> bool:
    """upstream's ``lambda x: bool(distutils.util.strtobool(x))`` (distutils is gone in Python 3.12)."""
    v = x.lower()
    if v in ("y", "yes", "t", "true", "on", "1"):
        return True
    if v in ("n", "no", "f", "false", "off", "0"):
        return False
    raise ValueError(f"invalid truth value {x!r}")


def load_cfgs(task_name: str) -> tuple[dict, dict]:
    from isaacd_trainer.tasks import get_task

    return get_task(task_name).make_env_cfg(), rl_games_agent_cfg()


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Train an RL agent with RL-Games.",
                                     epilog=f"Built-in tasks: {', '.join(sorted(TASKS))}.")
    parser.add_argument("--video", action="store_true", default=False, help="Record videos during training.")
    parser.add_argument("--video_length", type=int, default=200, help="Length of the recorded video (in steps).")
    parser.add_argument("--video_interval", type=int, default=2000, help="Interval between video recordings (in steps).")
    parser.add_argument("--num_envs", type=int, default=None, help="Number of environments to simulate.")
    parser.add_argument("--task", type=str, default=None, help="Name of the task.")
    parser.add_argument("--seed", type=int, default=None, help="Seed used for the environment")
    parser.add_argument(
        "--distributed", action="store_true", default=False, help="Run training with multiple GPUs or nodes."
    )
    parser.add_argument("--checkpoint", type=str, default=None, help="Path to model checkpoint.")
    parser.add_argument("--sigma", type=str, default=None, help="The policy's initial standard deviation.")
    parser.add_argument("--max_iterations", type=int, default=None, help="RL Policy training iterations.")
    parser.add_argument("--wandb-project-name", type=str, default=None, help="the wandb's project name")
    parser.add_argument("--wandb-entity", type=str, default=None, help="the entity (team) of wandb's project")
    parser.add_argument("--wandb-name", type=str, default=None, help="the name of wandb's run")
    parser.add_argument("--track", type=_strtobool, default=False, nargs="?", const=True,
                        help="if toggled, this experiment will be tracked with Weights and Biases")
    parser.add_argument("--viz", action="store_true", default=False, help="Enable visualization.")
    upstream.add_app_launcher_args(parser)
    add_isaacd_args(parser)
    return parser


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    parser = build_parser(prog)
    args_cli, hydra_args = parser.parse_known_args(argv)
    sys.argv = [sys.argv[0]] + hydra_args

    from isaacd_trainer import runtime

    @upstream.hydra_task_config(args_cli.task, load_cfgs)
    def train(env_cfg: dict, agent_cfg: dict) -> None:
        if args_cli.seed == -1:
            args_cli.seed = random.randint(0, 10000)
        agent_cfg["params"]["seed"] = args_cli.seed if args_cli.seed is not None else agent_cfg["params"]["seed"]
        agent_cfg["params"]["config"]["max_epochs"] = (
            args_cli.max_iterations if args_cli.max_iterations is not None
            else agent_cfg["params"]["config"]["max_epochs"]
        )
        resume_path = None
        if args_cli.checkpoint is not None:
            resume_path = upstream.retrieve_file_path(args_cli.checkpoint)
            agent_cfg["params"]["load_checkpoint"] = True
            agent_cfg["params"]["load_path"] = resume_path
            print(f"[INFO]: Loading model checkpoint from: {agent_cfg['params']['load_path']}")
        sim_device = runtime.default_device(args_cli.device)
        if args_cli.distributed:
            local_rank = int(os.getenv("LOCAL_RANK", "0"))
            agent_cfg["params"]["seed"] += int(os.getenv("RANK", "0"))
            agent_cfg["params"]["config"]["device"] = f"cuda:{local_rank}"
            agent_cfg["params"]["config"]["multi_gpu"] = True
            sim_device = f"cuda:{local_rank}"
        env_seed = agent_cfg["params"]["seed"]

        config_name = agent_cfg["params"]["config"]["name"]
        log_root_path = os.path.abspath(os.path.join("logs", "rl_games", config_name))
        print(f"[INFO] Logging experiment in directory: {log_root_path}")
        log_dir = agent_cfg["params"]["config"].get("full_experiment_name", datetime.now().strftime("%Y-%m-%d_%H-%M-%S"))
        agent_cfg["params"]["config"]["train_dir"] = log_root_path
        agent_cfg["params"]["config"]["full_experiment_name"] = log_dir
        runtime.dump_params(os.path.join(log_root_path, log_dir),
                            _env_params(args_cli.task, env_cfg, args_cli.num_envs, env_seed, sim_device), agent_cfg,
                            pickles=True)

        env, runner = _make_runner(args_cli, env_cfg, agent_cfg, sim_device, env_seed, resume_path)
        train_sigma = float(args_cli.sigma) if args_cli.sigma is not None else None
        if args_cli.checkpoint is not None:
            runner.run({"train": True, "play": False, "sigma": train_sigma, "checkpoint": resume_path})
        else:
            runner.run({"train": True, "play": False, "sigma": train_sigma})
        env.close()

    train()
    return 0


def _env_params(task: str, env_cfg: dict, num_envs: int | None, seed: int, device: str) -> dict:
    """What ``dump_yaml(params/env.yaml, env_cfg)`` shows: ``env_cfg.scene.num_envs`` is set from ``--num_envs``
    before the dump (isaacd reads it back to count rl_games' frames per epoch)."""
    from isaacd_trainer.tasks import get_task

    n = num_envs or get_task(task).default_num_envs
    return dict(env_cfg, num_envs=n, scene={"num_envs": n}, seed=seed, device=device)


def _make_runner(args_cli, env_cfg: dict, agent_cfg: dict, sim_device: str, env_seed: int, resume_path,  # noqa: ANN001
                 *, deterministic: bool = False):
    """The env, ``RlGamesVecEnvWrapper`` (+ isaacd's pacing/fault hook), ``num_actors``, ``Runner``, load, reset.
    ``deterministic`` (3.x ``--deterministic``): ``configure_seed(seed, torch_deterministic=True)`` after
    ``Runner()``, before ``runner.load`` (train_rl_games.run, isaaclab 3.0.0)."""
    from isaacd_trainer import minilib, runtime

    env = runtime.make_env(args_cli.task, env_cfg, args_cli.num_envs, sim_device, env_seed)
    horizon = int(agent_cfg["params"]["config"]["horizon_length"])
    exit_after = None if (args_cli.fault_once and resume_path) else args_cli.fault_exit_after
    wrapped = minilib.GymLikeEnv(env, pre_step=minilib.step_pacer(args_cli.step_delay, exit_after, horizon))
    agent_cfg["params"]["config"]["num_actors"] = env.num_envs
    # rl_games' agent runs on config["device"] (the yaml's cuda:0 unless overridden), not on --device
    runner = minilib.RlGamesRunner(wrapped, agent_cfg["params"]["config"]["device"])
    if deterministic:
        runtime.configure_seed(env_seed, torch_deterministic=True)
    runner.load(agent_cfg)
    runner.reset()
    return env, runner


# ------------------------------------------------------------------------------------------------------ 3.x


def build_parser_v3() -> argparse.ArgumentParser:
    """``train_rl_games._parse_args`` (isaaclab 3.0.0): common train args (``--agent`` default
    ``rl_games_cfg_entry_point``), ``--checkpoint`` (a file, or latest/best), ``--sigma``, wandb flags, launcher
    args (no ``--headless``; ``--device`` default ``cuda:0``) (+ isaacd's own fault flags)."""
    parser = argparse.ArgumentParser(prog="isaacd-train-isaaclab30 --rl_library rl_games",
                                     description="Train an RL agent with RL-Games.",
                                     epilog=f"Built-in tasks: {', '.join(sorted(TASKS))}.")
    upstream.add_common_train_args_v3(parser, agent_default="rl_games_cfg_entry_point",
                                      agent_help="Name of the RL agent configuration entry point.")
    parser.add_argument("--checkpoint", type=str, default=None, help="Checkpoint path, or latest/best.")
    parser.add_argument("--sigma", type=str, default=None, help="The policy's initial standard deviation.")
    parser.add_argument("--wandb-project-name", type=str, default=None, help="Weights and Biases project name.")
    parser.add_argument("--wandb-entity", type=str, default=None, help="Weights and Biases entity (team).")
    parser.add_argument("--wandb-name", type=str, default=None, help="Weights and Biases run name.")
    parser.add_argument("--track", type=_strtobool, default=False, nargs="?", const=True,
                        help="Track this experiment with Weights and Biases (not supported here).")
    upstream.add_launcher_args_v3(parser)
    add_isaacd_args(parser)
    return parser


def _resolve_checkpoint_v3(args_cli: argparse.Namespace, agent_cfg: dict, log_root_path: str) -> str | None:
    """``train_rl_games._resolve_checkpoint`` (062dd2ad; the same in isaaclab 3.0.0): latest/best by manifest (the
    best: ``nn/<name>.pth`` if there), else ``retrieve_file_path``."""
    if args_cli.checkpoint is None:
        return None
    if args_cli.checkpoint in upstream.CHECKPOINT_SELECTORS:
        config_name = agent_cfg["params"]["config"]["name"]
        return upstream.resolve_checkpoint_selector(
            log_root_path, args_cli.checkpoint, library="rl_games", task=args_cli.task,
            checkpoint_pattern=r".*\.pth", other_dirs=["nn"],
            preferred_checkpoint_pattern=rf"{re.escape(config_name)}\.pth", metadata={"agent": args_cli.agent})
    return upstream.retrieve_file_path(args_cli.checkpoint)


def run_v3(argv: list[str]) -> None:
    """``train_rl_games.run`` (first from isaac-sim/IsaacLab 062dd2ad), checked point by point against the released
    **isaaclab 3.0.0** wheel: ``_parse_args`` (common train args, ``-h`` anywhere -> exit 0, leftovers to Hydra);
    ``--agent`` names the agent config; ``validate_distributed_device``; ``--seed -1`` -> random; ``--max_iterations``
    -> ``max_epochs`` (a total); ``--distributed``: seed + RANK, agent on the simulation device, ``multi_gpu``;
    ``--checkpoint latest|best|<file>`` resolved *before* the run dir exists (missing file: FileNotFoundError, exit
    1); run dir ``logs/rl_games/<config.name>/<config.get("full_experiment_name", --run_timestamp or now)>`` with
    ``run.json`` (rank 0) and ``params/``; ``--track`` needs ``--wandb-entity``; ``runner.run`` inside
    ``contextlib.suppress(KeyboardInterrupt)`` (Ctrl-C: exit 0, nothing saved)."""
    parser = build_parser_v3()
    args_cli, hydra_args = upstream.parse_v3(parser, argv)  # setup_preset_cli: -h anywhere -> help, exit 0
    sys.argv = [sys.argv[0]] + hydra_args  # set_hydra_args
    env_cfg, agent_cfg = upstream.resolve_task_config_v3(args_cli.task, args_cli.agent)

    from isaacd_trainer import runtime

    upstream.validate_distributed_device(args_cli)
    # apply_env_overrides / _resolve_distributed_device (isaaclab 3.0.0)
    sim_device = runtime.distributed_sim_device() if args_cli.distributed else runtime.default_device(args_cli.device)
    params = agent_cfg["params"]
    config = params["config"]
    args_cli.seed = upstream.resolve_seed(args_cli.seed)
    if args_cli.seed is not None:
        params["seed"] = args_cli.seed
    if args_cli.max_iterations is not None:
        config["max_epochs"] = args_cli.max_iterations
    rank = int(os.getenv("RANK", "0")) if args_cli.distributed else None
    if rank is not None:
        params["seed"] += rank
        # train_rl_games.run (isaaclab 3.0.0): only a distributed run moves the agent to the simulation device;
        # otherwise it stays on the agent yaml's `device: 'cuda:0'` unless agent.params.config.device=... says
        config["device"] = config["device_name"] = sim_device
        config["multi_gpu"] = True
    env_seed = params["seed"]

    config_name = config["name"]
    log_root_path = os.path.abspath(os.path.join("logs", "rl_games", config_name))
    print(f"[INFO] Logging experiment in directory: {log_root_path}")
    resume_path = _resolve_checkpoint_v3(args_cli, agent_cfg, log_root_path)
    if resume_path is not None:
        params["load_checkpoint"] = True
        params["load_path"] = resume_path
        print(f"[INFO]: Loading model checkpoint from: {resume_path}")  # bd315106 prints; 062dd2ad logs
    run_name = config.get("full_experiment_name",
                          args_cli.run_timestamp or datetime.now().strftime("%Y-%m-%d_%H-%M-%S"))
    config["train_dir"] = log_root_path
    config["full_experiment_name"] = run_name
    log_dir = os.path.join(log_root_path, run_name)
    rank_dir = log_dir if rank in (None, 0) else os.path.join(log_dir, f"rank_{rank}")
    if rank in (None, 0):
        upstream.write_run_manifest(log_dir, library="rl_games", task=args_cli.task, metadata={"agent": args_cli.agent})
    runtime.dump_params(rank_dir, _env_params(args_cli.task, env_cfg, args_cli.num_envs, env_seed, sim_device),
                        agent_cfg, pickles=False)
    print(f"Exact experiment name requested from command line: {log_dir}")

    runtime.check_frontend(args_cli.frontend)
    start_time = time.time()
    env, runner = _make_runner(args_cli, env_cfg, agent_cfg, sim_device, env_seed, resume_path,
                               deterministic=args_cli.deterministic)
    try:
        if args_cli.track and rank in (None, 0):
            # train_rl_games.run (isaaclab 3.0.0): tracking needs an entity; then wandb.init (no network here)
            if args_cli.wandb_entity is None:
                raise ValueError("Weights and Biases entity must be specified for tracking.")
            raise RuntimeError("--track (Weights and Biases) is not supported by the built-in trainer.")
        train_sigma = float(args_cli.sigma) if args_cli.sigma is not None else None
        run_args = {"train": True, "play": False, "sigma": train_sigma}
        if resume_path is not None:
            run_args["checkpoint"] = resume_path
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: training ends without a save, exit 0
            runner.run(run_args)
            print(f"Training time: {round(time.time() - start_time, 2)} seconds")
    finally:
        env.close()  # cleanup.callback(close_env)


if __name__ == "__main__":
    sys.exit(main())
