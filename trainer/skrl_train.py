"""Isaac Lab's skrl train script on the built-in cart-pole: ``python -m isaacd_trainer.skrl_train`` (2.x) and
``python -m isaacd_trainer.isaaclab30 --rl_library skrl`` (3.x).

2.x follows ``scripts/reinforcement_learning/skrl/train.py`` (isaac-sim/IsaacLab @011c373c; the same contract at
@ddc7b239) step by step:

1. argparse: its flags + the AppLauncher's, ``parse_known_args()``; leftovers are Hydra overrides
   (``sys.argv = [sys.argv[0]] + hydra_args``), parsed by real hydra-core (a bad one: exit 1).
2. ``--max_iterations N`` -> ``agent_cfg["trainer"]["timesteps"] = N * agent_cfg["agent"]["rollouts"]``.
3. ``log_root_path = abspath("logs/skrl/<agent.experiment.directory>")``; run dir
   ``<%Y-%m-%d_%H-%M-%S>_<algorithm>_<ml_framework>[_<agent.experiment.experiment_name>]``; params dumped (this
   creates the run dir) *before* ``--checkpoint`` is resolved with ``retrieve_file_path`` (absolute, or relative
   to the working directory; missing: FileNotFoundError, exit 1).
4. ``Runner(env, agent_cfg)``; ``runner.agent.load(resume_path)`` restores the modules only; ``runner.run()``
   counts timesteps from 0 (see ``minilib.SkrlAgent``). No signal handling; nothing saved at the end beyond the
   periodic ``checkpoints/agent_<timestep>.pt``.

3.x follows ``isaaclab_rl/entrypoints/backends/train_skrl.py`` (@07f4b680) and ``cli_args_skrl.py`` (@c5c51f0c):
``--checkpoint latest|best|<file>`` (selectors over ``run.json`` manifests), ``--algorithm`` defaults to the agent
config's class, a ``run.json`` manifest, and after ``runner.run()`` -- inside ``contextlib.suppress(
KeyboardInterrupt)``, so not after a Ctrl-C, which exits 0 -- a final ``agent_<timesteps>.pt``.

Only ``--ml_framework torch`` and the PPO agent exist here (others: the error upstream gives for a missing agent
entry point, or a clear one).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
from datetime import datetime
from typing import Sequence

from isaacd_trainer import upstream
from isaacd_trainer.extras import add_isaacd_args
from isaacd_trainer.tasks import TASKS


def skrl_agent_cfg() -> dict:
    """Shaped like Isaac Lab's ``direct/cartpole/agents/skrl_ppo_cfg.yaml`` (@39a7f586), smaller rollouts."""
    return {
        "seed": 42,
        "models": {"separate": False,
                   "policy": {"class": "GaussianMixin", "clip_actions": False, "initial_log_std": 0.0,
                              "network": [{"name": "net", "input": "STATES", "layers": [32, 32],
                                           "activations": "elu"}], "output": "ACTIONS"},
                   "value": {"class": "DeterministicMixin", "clip_actions": False,
                             "network": [{"name": "net", "input": "STATES", "layers": [32, 32],
                                          "activations": "elu"}], "output": "ONE"}},
        "memory": {"class": "RandomMemory", "memory_size": -1},
        "agent": {
            "class": "PPO", "rollouts": 16, "learning_epochs": 8, "mini_batches": 8, "discount_factor": 0.99,
            "lambda": 0.95, "learning_rate": 5.0e-04, "learning_starts": 0,
            "experiment": {"directory": "cartpole_direct", "experiment_name": "", "write_interval": "auto",
                           "checkpoint_interval": "auto"},
        },
        "trainer": {"class": "SequentialTrainer", "timesteps": 4800, "environment_info": "log"},
    }


def load_cfgs(task_name: str) -> tuple[dict, dict]:
    """``load_cfg_from_registry(task, "env_cfg_entry_point" / "skrl_cfg_entry_point")``."""
    from isaacd_trainer.tasks import get_task

    return get_task(task_name).make_env_cfg(), skrl_agent_cfg()


def build_parser_v2(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Train an RL agent with skrl.",
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
    parser.add_argument("--checkpoint", type=str, default=None, help="Path to model checkpoint to resume training.")
    parser.add_argument("--max_iterations", type=int, default=None, help="RL Policy training iterations.")
    parser.add_argument("--ml_framework", type=str, default="torch", choices=["torch", "jax", "jax-numpy"],
                        help="The ML framework used for training the skrl agent.")
    parser.add_argument("--algorithm", type=str, default="PPO", choices=["AMP", "PPO", "IPPO", "MAPPO"],
                        help="The RL algorithm used for training the skrl agent.")
    parser.add_argument("--viz", action="store_true", default=False, help="Enable visualization.")
    upstream.add_app_launcher_args(parser)
    add_isaacd_args(parser)
    return parser


def _check_supported(ml_framework: str, algorithm: str) -> None:
    if not ml_framework.startswith("torch"):
        raise SystemExit(f"isaacd-train (skrl): only --ml_framework torch is built in, not {ml_framework}")
    if algorithm != "ppo":
        # upstream: load_cfg_from_registry finds no skrl_<algorithm>_cfg_entry_point for the task
        raise ValueError(f"Could not find configuration for the environment: 'skrl_{algorithm}_cfg_entry_point'.")


def _train(args_cli: argparse.Namespace, env_cfg: dict, agent_cfg: dict, log_dir: str, resume_path: str | None,
           *, final_checkpoint: bool) -> None:
    from isaacd_trainer import minilib, runtime

    sim_device = runtime.default_device(args_cli.device)
    env = runtime.make_env(args_cli.task, env_cfg, args_cli.num_envs, sim_device, agent_cfg["seed"])
    pacer = minilib.step_pacer(args_cli.step_delay, args_cli.fault_exit_after, int(agent_cfg["agent"]["rollouts"]))
    if args_cli.fault_once and resume_path is not None:
        pacer = minilib.step_pacer(args_cli.step_delay, None, 1)
    wrapped = minilib.GymLikeEnv(env, pre_step=pacer)
    runner = minilib.SkrlRunner(wrapped, agent_cfg, sim_device)
    if resume_path:
        print(f"[INFO] Loading model checkpoint from: {resume_path}")
        runner.agent.load(resume_path)
    if not final_checkpoint:
        runner.run()
        env.close()
        return
    with contextlib.suppress(KeyboardInterrupt):
        runner.run()
        total_timesteps = agent_cfg["trainer"]["timesteps"]
        os.makedirs(os.path.join(log_dir, "checkpoints"), exist_ok=True)
        runner.agent.write_checkpoint(total_timesteps, total_timesteps)
        print(f"[INFO] Saved final agent checkpoint to: {log_dir}/checkpoints")
    env.close()


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Isaac Lab 2.x ``scripts/reinforcement_learning/skrl/train.py``."""
    parser = build_parser_v2(prog)
    args_cli, hydra_args = parser.parse_known_args(argv)
    sys.argv = [sys.argv[0]] + hydra_args
    algorithm = args_cli.algorithm.lower()
    _check_supported(args_cli.ml_framework, algorithm)

    from isaacd_trainer import runtime

    @upstream.hydra_task_config(args_cli.task, load_cfgs)
    def train(env_cfg: dict, agent_cfg: dict) -> None:
        if args_cli.max_iterations:
            agent_cfg["trainer"]["timesteps"] = args_cli.max_iterations * agent_cfg["agent"]["rollouts"]
        agent_cfg["trainer"]["close_environment_at_exit"] = False
        if args_cli.seed == -1:
            args_cli.seed = random.randint(0, 10000)
        agent_cfg["seed"] = args_cli.seed if args_cli.seed is not None else agent_cfg["seed"]

        log_root_path = os.path.join("logs", "skrl", agent_cfg["agent"]["experiment"]["directory"])
        log_root_path = os.path.abspath(log_root_path)
        print(f"[INFO] Logging experiment in directory: {log_root_path}")
        log_dir = datetime.now().strftime("%Y-%m-%d_%H-%M-%S") + f"_{algorithm}_{args_cli.ml_framework}"
        print(f"Exact experiment name requested from command line: {log_dir}")
        if agent_cfg["agent"]["experiment"]["experiment_name"]:
            log_dir += f'_{agent_cfg["agent"]["experiment"]["experiment_name"]}'
        agent_cfg["agent"]["experiment"]["directory"] = log_root_path
        agent_cfg["agent"]["experiment"]["experiment_name"] = log_dir
        log_dir = os.path.join(log_root_path, log_dir)

        sim_device = runtime.default_device(args_cli.device)
        runtime.dump_params(log_dir, dict(env_cfg, num_envs=args_cli.num_envs, seed=agent_cfg["seed"],
                                          device=sim_device), agent_cfg, pickles=True)
        resume_path = upstream.retrieve_file_path(args_cli.checkpoint) if args_cli.checkpoint else None
        _train(args_cli, env_cfg, agent_cfg, log_dir, resume_path, final_checkpoint=False)

    train()
    return 0


# ------------------------------------------------------------------------------------------------------ 3.x


def build_parser_v3() -> argparse.ArgumentParser:
    """``train_skrl._parse_args``: common train args (agent default None), ``--checkpoint``, skrl args, launcher."""
    parser = argparse.ArgumentParser(prog="isaacd-train-isaaclab30 --rl_library skrl",
                                     description="Train an RL agent with skrl.")
    parser.add_argument("--video", action="store_true", default=False, help="Record videos during training.")
    parser.add_argument("--video_length", type=int, default=None, help="Length of each recorded video clip.")
    parser.add_argument("--video_interval", type=int, default=None, help="Interval between video clips.")
    parser.add_argument("--num_envs", type=int, default=None, help="Number of environments to simulate.")
    parser.add_argument("--task", type=str, default=None, help="Name of the task.")
    parser.add_argument("--frontend", type=str, choices=["torch", "warp"], default="torch",
                        help="Runtime that constructs the environment (only torch here).")
    parser.add_argument("--agent", type=str, default=None,
                        help="Agent configuration entry point (default: the task's canonical SKRL configuration).")
    parser.add_argument("--seed", type=int, default=None, help="Seed used for the environment.")
    parser.add_argument("--distributed", action="store_true", default=False,
                        help="Run training with multiple GPUs or nodes.")
    parser.add_argument("--max_iterations", type=int, default=None, help="RL Policy training iterations.")
    parser.add_argument("--checkpoint", type=str, default=None, help="Checkpoint path, or latest/best.")
    g = parser.add_argument_group("skrl", description="Arguments for skrl agent.")
    g.add_argument("--ml_framework", type=str, default="torch", choices=["torch", "jax"],
                   help="The ML framework used for training the skrl agent.")
    g.add_argument("--algorithm", type=str, default=None, choices=["AMP", "PPO", "IPPO", "MAPPO"],
                   help="Optional algorithm selector; with --agent, the resolved agent.class must match.")
    upstream.add_app_launcher_args(parser)
    g = parser.add_argument_group("launcher (3.x)")
    g.add_argument("--deterministic", action="store_true", default=False, help="Request deterministic execution.")
    add_isaacd_args(parser)
    return parser


def run_v3(argv: list[str]) -> None:
    parser = build_parser_v3()
    args_cli, remaining = parser.parse_known_args(argv)
    sys.argv = [sys.argv[0]] + remaining  # set_hydra_args
    entry_point = args_cli.agent or ("skrl_cfg_entry_point" if args_cli.algorithm in (None, "PPO")
                                     else f"skrl_{args_cli.algorithm.lower()}_cfg_entry_point")
    env_cfg, agent_cfg = upstream.resolve_task_config_v3(args_cli.task, load_cfgs)
    algorithm = (args_cli.algorithm or agent_cfg["agent"]["class"]).lower()  # resolve_skrl_algorithm
    _check_supported(args_cli.ml_framework, algorithm)
    if args_cli.max_iterations:
        agent_cfg["trainer"]["timesteps"] = args_cli.max_iterations * agent_cfg["agent"]["rollouts"]
    agent_cfg["trainer"]["close_environment_at_exit"] = False
    if args_cli.seed == -1:
        args_cli.seed = random.randint(0, 10000)
    if args_cli.seed is not None:
        agent_cfg["seed"] = args_cli.seed
    experiment_cfg = agent_cfg["agent"]["experiment"]
    log_root_path = os.path.abspath(os.path.join("logs", "skrl", experiment_cfg["directory"]))
    print(f"[INFO] Logging experiment in directory: {log_root_path}")
    run_name = datetime.now().strftime("%Y-%m-%d_%H-%M-%S") + f"_{algorithm}_{args_cli.ml_framework}"
    print(f"Exact experiment name requested from command line: {run_name}")
    if experiment_cfg["experiment_name"]:
        run_name += f"_{experiment_cfg['experiment_name']}"
    experiment_cfg["directory"] = log_root_path
    experiment_cfg["experiment_name"] = run_name
    log_dir = os.path.join(log_root_path, run_name)
    metadata = {"agent": entry_point, "algorithm": algorithm, "ml_framework": args_cli.ml_framework}
    upstream.write_run_manifest(log_dir, library="skrl", task=args_cli.task, metadata=metadata)

    from isaacd_trainer import runtime

    runtime.dump_params(log_dir, dict(env_cfg, num_envs=args_cli.num_envs, seed=agent_cfg["seed"]), agent_cfg,
                        pickles=False)
    if args_cli.checkpoint in upstream.CHECKPOINT_SELECTORS:
        resume_path = upstream.resolve_checkpoint_selector(
            log_root_path, args_cli.checkpoint, library="skrl", task=args_cli.task, checkpoint_pattern=r".*",
            other_dirs=["checkpoints"], metadata=metadata)
    else:
        resume_path = upstream.retrieve_file_path(args_cli.checkpoint) if args_cli.checkpoint else None
    _train(args_cli, env_cfg, agent_cfg, log_dir, resume_path, final_checkpoint=True)


if __name__ == "__main__":
    sys.exit(main())
