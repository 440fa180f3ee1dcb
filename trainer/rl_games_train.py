"""Isaac Lab 2.x ``scripts/reinforcement_learning/rl_games/train.py`` on the built-in cart-pole:
``python -m isaacd_trainer.rl_games_train``.

Follows upstream (isaac-sim/IsaacLab @011c373c) step by step (``run_v3``: the 3.x backend, see its docstring):

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


def rl_games_agent_cfg() -> dict:
    """Shaped like Isaac Lab's cart-pole ``rl_games_ppo_cfg.yaml`` (no ``full_experiment_name``), small horizon."""
    return {
        "params": {
            "seed": 42,
            "env": {"clip_observations": 5.0, "clip_actions": 1.0},
            "algo": {"name": "a2c_continuous"},
            "model": {"name": "continuous_a2c_logstd"},
            "network": {"name": "actor_critic", "separate": False, "mlp": {"units": [32, 32], "activation": "elu"}},
            "load_checkpoint": False,
            "load_path": "",
            "config": {
                "name": "cartpole_direct", "env_name": "rlgpu", "device": "cuda:0", "device_name": "cuda:0",
                "multi_gpu": False, "ppo": True, "normalize_input": True, "num_actors": -1,
                "gamma": 0.99, "tau": 0.95, "learning_rate": 5e-4, "lr_schedule": "adaptive", "kl_threshold": 0.008,
                "score_to_win": 20000, "max_epochs": 150, "save_best_after": 50, "save_frequency": 25,
                "grad_norm": 1.0, "entropy_coef": 0.0, "truncate_grads": True, "e_clip": 0.2,
                "horizon_length": 16, "minibatch_size": 512, "mini_epochs": 8, "critic_coef": 4,
                "clip_value": True, "seq_length": 4, "bounds_loss_coef": 0.0001,
            },
        }
    }


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


def _make_runner(args_cli, env_cfg: dict, agent_cfg: dict, sim_device: str, env_seed: int, resume_path):  # noqa: ANN001
    """The env, ``RlGamesVecEnvWrapper`` (+ isaacd's pacing/fault hook), ``num_actors``, ``Runner``, load, reset."""
    from isaacd_trainer import minilib, runtime

    env = runtime.make_env(args_cli.task, env_cfg, args_cli.num_envs, sim_device, env_seed)
    horizon = int(agent_cfg["params"]["config"]["horizon_length"])
    exit_after = None if (args_cli.fault_once and resume_path) else args_cli.fault_exit_after
    wrapped = minilib.GymLikeEnv(env, pre_step=minilib.step_pacer(args_cli.step_delay, exit_after, horizon))
    agent_cfg["params"]["config"]["num_actors"] = env.num_envs
    # rl_games' agent runs on config["device"] (the yaml's cuda:0 unless overridden), not on --device
    runner = minilib.RlGamesRunner(wrapped, agent_cfg["params"]["config"]["device"])
    runner.load(agent_cfg)
    runner.reset()
    return env, runner


# ------------------------------------------------------------------------------------------------------ 3.x


def build_parser_v3() -> argparse.ArgumentParser:
    """``train_rl_games._parse_args``: common train args (``--agent`` default ``rl_games_cfg_entry_point``),
    ``--checkpoint`` (a file, or latest/best), ``--sigma``, wandb flags, launcher args."""
    parser = argparse.ArgumentParser(prog="isaacd-train-isaaclab30 --rl_library rl_games",
                                     description="Train an RL agent with RL-Games.",
                                     epilog=f"Built-in tasks: {', '.join(sorted(TASKS))}.")
    parser.add_argument("--video", action="store_true", default=False, help="Record videos during training.")
    parser.add_argument("--video_length", type=int, default=None, help="Length of each recorded video clip.")
    parser.add_argument("--video_interval", type=int, default=None, help="Interval between video clips.")
    parser.add_argument("--num_envs", type=int, default=None, help="Number of environments to simulate.")
    parser.add_argument("--task", type=str, default=None, help="Name of the task.")
    parser.add_argument("--frontend", type=str, choices=["torch", "warp"], default="torch",
                        help="Runtime that constructs the environment (only torch here).")
    parser.add_argument("--agent", type=str, default="rl_games_cfg_entry_point",
                        help="Name of the RL agent configuration entry point.")
    parser.add_argument("--seed", type=int, default=None, help="Seed used for the environment.")
    parser.add_argument("--distributed", action="store_true", default=False,
                        help="Run training with multiple GPUs or nodes.")
    parser.add_argument("--max_iterations", type=int, default=None, help="RL Policy training iterations.")
    parser.add_argument("--export_io_descriptors", action="store_true", default=False,
                        help="Deprecated: export IO descriptors (removed in Isaac Lab 3.2).")
    parser.add_argument("--ray-proc-id", "-rid", type=int, default=None,
                        help="Automatically configured by Ray integration, otherwise None.")
    parser.add_argument("--capture_env_sensors", type=int, default=0, help="Sensor views to capture (none here).")
    parser.add_argument("--capture_env_sensors_length", type=int, default=200, help="Captured window length.")
    parser.add_argument("--capture_env_sensors_interval", type=int, default=2000, help="Capture interval.")
    parser.add_argument("--capture_env_sensors_format", choices=["tensorboard", "file"], default="tensorboard",
                        help="Format of captured sensor frames.")
    parser.add_argument("--checkpoint", type=str, default=None, help="Checkpoint path, or latest/best.")
    parser.add_argument("--sigma", type=str, default=None, help="The policy's initial standard deviation.")
    parser.add_argument("--wandb-project-name", type=str, default=None, help="Weights and Biases project name.")
    parser.add_argument("--wandb-entity", type=str, default=None, help="Weights and Biases entity (team).")
    parser.add_argument("--wandb-name", type=str, default=None, help="Weights and Biases run name.")
    parser.add_argument("--track", type=_strtobool, default=False, nargs="?", const=True,
                        help="Track this experiment with Weights and Biases (not supported here).")
    upstream.add_app_launcher_args(parser)
    g = parser.add_argument_group("launcher (3.x)")
    g.add_argument("--run_timestamp", type=str, default=None,
                   help="Run folder timestamp shared by all ranks (default: now, %%Y-%%m-%%d_%%H-%%M-%%S).")
    g.add_argument("--deterministic", action="store_true", default=False, help="Request deterministic execution.")
    g.add_argument("--viz", type=str, default=None, help="Visualizer (ignored: no renderer).")
    add_isaacd_args(parser)
    return parser


def _resolve_checkpoint_v3(args_cli: argparse.Namespace, agent_cfg: dict, log_root_path: str) -> str | None:
    """``train_rl_games._resolve_checkpoint`` (062dd2ad): latest/best by manifest, else ``retrieve_file_path``."""
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
    """``train_rl_games.run`` (isaac-sim/IsaacLab 062dd2ad; bd315106 has the same contract points)."""
    parser = build_parser_v3()
    args_cli, hydra_args = parser.parse_known_args(argv)
    sys.argv = [sys.argv[0]] + hydra_args  # set_hydra_args
    env_cfg, agent_cfg = upstream.resolve_task_config_v3(args_cli.task, load_cfgs)

    from isaacd_trainer import runtime

    sim_device = runtime.default_device(args_cli.device)
    if args_cli.distributed:
        if args_cli.device is not None and "cpu" in args_cli.device:
            raise ValueError("Distributed training is not supported when using CPU device. "
                             "Please use GPU device (e.g., --device cuda) for distributed training.")
        sim_device = f"cuda:{int(os.getenv('LOCAL_RANK', '0'))}"
    params = agent_cfg["params"]
    config = params["config"]
    if args_cli.seed is not None:
        params["seed"] = random.randint(0, 10000) if args_cli.seed == -1 else args_cli.seed
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

    start_time = time.time()
    env, runner = _make_runner(args_cli, env_cfg, agent_cfg, sim_device, env_seed, resume_path)
    train_sigma = float(args_cli.sigma) if args_cli.sigma is not None else None
    run_args = {"train": True, "play": False, "sigma": train_sigma}
    if resume_path is not None:
        run_args["checkpoint"] = resume_path
    try:
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: training ends without a save, exit 0
            runner.run(run_args)
            print(f"Training time: {round(time.time() - start_time, 2)} seconds")
    finally:
        env.close()  # cleanup.callback(close_env)


if __name__ == "__main__":
    sys.exit(main())
