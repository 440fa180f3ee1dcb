"""Isaac Lab 2.x ``scripts/reinforcement_learning/rl_games/train.py`` on the built-in cart-pole:
``python -m isaacd_trainer.rl_games_train``.

Follows upstream (isaac-sim/IsaacLab @011c373c) step by step:

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
import os
import random
import sys
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

    from isaacd_trainer import minilib, runtime

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
                            dict(env_cfg, num_envs=args_cli.num_envs, seed=env_seed, device=sim_device), agent_cfg,
                            pickles=True)

        env = runtime.make_env(args_cli.task, env_cfg, args_cli.num_envs, sim_device, env_seed)
        horizon = int(agent_cfg["params"]["config"]["horizon_length"])
        exit_after = None if (args_cli.fault_once and resume_path) else args_cli.fault_exit_after
        wrapped = minilib.GymLikeEnv(env, pre_step=minilib.step_pacer(args_cli.step_delay, exit_after, horizon))
        agent_cfg["params"]["config"]["num_actors"] = env.num_envs
        runner = minilib.RlGamesRunner(wrapped, sim_device)
        runner.load(agent_cfg)
        runner.reset()
        train_sigma = float(args_cli.sigma) if args_cli.sigma is not None else None
        if args_cli.checkpoint is not None:
            runner.run({"train": True, "play": False, "sigma": train_sigma, "checkpoint": resume_path})
        else:
            runner.run({"train": True, "play": False, "sigma": train_sigma})
        env.close()

    train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
