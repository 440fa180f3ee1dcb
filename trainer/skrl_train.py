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

3.x follows ``isaaclab_rl/entrypoints/backends/train_skrl.py`` (@07f4b680) and ``cli_args_skrl.py`` (@c5c51f0c),
checked point by point against the released **isaaclab 3.0.0** wheel (and skrl 2.1.1): ``common.add_common_train_args``
(``--agent`` default None, ``--run_timestamp``) + ``--checkpoint`` + skrl args + the Kit launcher's flags (no
``--headless``); ``-h`` anywhere -> help, exit 0; the agent config is ``--agent``, else ``skrl_cfg_entry_point``
(``skrl_<algorithm>_cfg_entry_point`` for another ``--algorithm``), and ``--algorithm`` must match its
``agent.class``; ``--max_iterations N`` (if non-zero) -> ``timesteps = N * rollouts``; ``--seed -1`` -> random;
``--distributed``: CPU device refused, seed + RANK; run dir ``<--run_timestamp or now>_<algorithm>_<ml_framework>
[_<experiment_name>]`` with a ``run.json`` (rank 0; other ranks dump ``params/`` to ``rank_<r>``) and ``params/``
dumped *before* ``--checkpoint latest|best|<file>`` is resolved (a missing file: FileNotFoundError, exit 1); then,
after ``runner.run()`` -- inside ``contextlib.suppress(KeyboardInterrupt)``, so not after a Ctrl-C, which exits 0 --
rank 0 writes a final ``checkpoints/agent_<timesteps>.pt`` (checked against a real 3.0.0 run: ``agent_6 .. agent_60``
every ``timesteps / 10`` and ``agent_64`` for 2 x 32 timesteps).

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
from isaacd_trainer.agent_cfgs import skrl_agent_cfg
from isaacd_trainer.extras import add_isaacd_args
from isaacd_trainer.tasks import TASKS


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
           *, final_checkpoint: bool | None, sim_device: str | None = None) -> None:
    """``final_checkpoint`` None: 2.x (no suppress, nothing at the end); True/False: 3.x, with/without the final save."""
    from isaacd_trainer import minilib, runtime

    sim_device = sim_device or runtime.default_device(args_cli.device)
    env = runtime.make_env(args_cli.task, env_cfg, args_cli.num_envs, sim_device, agent_cfg["seed"])
    pacer = minilib.step_pacer(args_cli.step_delay, args_cli.fault_exit_after, int(agent_cfg["agent"]["rollouts"]))
    if args_cli.fault_once and resume_path is not None:
        pacer = minilib.step_pacer(args_cli.step_delay, None, 1)
    wrapped = minilib.GymLikeEnv(env, pre_step=pacer)
    runner = minilib.SkrlRunner(wrapped, agent_cfg, sim_device)
    if final_checkpoint is not None and args_cli.deterministic:
        # train_skrl._run (isaaclab 3.0.0): after Runner(), before the checkpoint is loaded
        runtime.configure_seed(agent_cfg["seed"], torch_deterministic=True)
    if resume_path:
        print(f"[INFO] Loading model checkpoint from: {resume_path}")
        runner.agent.load(resume_path)
    if final_checkpoint is None:
        runner.run()
        env.close()
        return
    try:
        with contextlib.suppress(KeyboardInterrupt):
            runner.run()
            if final_checkpoint:  # train_skrl._run (isaaclab 3.0.0): `if rank in (None, 0)`
                total_timesteps = agent_cfg["trainer"]["timesteps"]
                os.makedirs(os.path.join(log_dir, "checkpoints"), exist_ok=True)
                runner.agent.write_checkpoint(total_timesteps, total_timesteps)
                print(f"[INFO] Saved final agent checkpoint to: {log_dir}/checkpoints")
    finally:
        env.close()  # cleanup.callback(close_env)


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
        _train(args_cli, env_cfg, agent_cfg, log_dir, resume_path, final_checkpoint=None)

    train()
    return 0


# ------------------------------------------------------------------------------------------------------ 3.x


def build_parser_v3() -> argparse.ArgumentParser:
    """``train_skrl._parse_args`` (isaaclab 3.0.0): common train args (agent default None), ``--checkpoint``, skrl
    args (``cli_args_skrl.add_skrl_args``), launcher args (+ isaacd's own fault flags)."""
    parser = argparse.ArgumentParser(prog="isaacd-train-isaaclab30 --rl_library skrl",
                                     description="Train an RL agent with skrl.")
    upstream.add_common_train_args_v3(
        parser, agent_default=None,
        agent_help="Agent configuration entry point (default: the task's canonical SKRL configuration).")
    parser.add_argument("--checkpoint", type=str, default=None, help="Checkpoint path, or latest/best.")
    g = parser.add_argument_group("skrl", description="Arguments for skrl agent.")
    g.add_argument("--ml_framework", type=str, default="torch", choices=["torch", "jax"],
                   help="The ML framework used for training the skrl agent.")
    g.add_argument("--algorithm", type=str, default=None, choices=["AMP", "PPO", "IPPO", "MAPPO"],
                   help="Optional algorithm selector; with --agent, the resolved agent.class must match.")
    upstream.add_launcher_args_v3(parser)
    add_isaacd_args(parser)
    return parser


def resolve_skrl_agent_cfg_entry_point(agent: str | None, algorithm: str | None) -> str:
    """``isaaclab_rl/skrl.py:resolve_skrl_agent_cfg_entry_point`` (isaaclab 3.0.0)."""
    if agent is not None:
        return agent
    if algorithm is None or algorithm.lower() == "ppo":
        return "skrl_cfg_entry_point"
    return f"skrl_{algorithm.lower()}_cfg_entry_point"


def resolve_skrl_algorithm(agent_cfg: dict, requested_algorithm: str | None = None) -> str:
    """``isaaclab_rl/skrl.py:resolve_skrl_algorithm`` (isaaclab 3.0.0): ``agent.class`` lowercased; an explicit
    ``--algorithm`` that does not match it is a ValueError."""
    agent = agent_cfg.get("agent") if isinstance(agent_cfg, dict) else None
    agent_class = agent.get("class") if isinstance(agent, dict) else None
    if not isinstance(agent_class, str) or not agent_class.strip():
        raise ValueError("The resolved SKRL configuration must define a non-empty 'agent.class' string.")
    algorithm = agent_class.lower()
    if requested_algorithm is not None and requested_algorithm.lower() != algorithm:
        raise ValueError(
            f"Requested SKRL algorithm {requested_algorithm!r} does not match the resolved agent.class {agent_class!r}."
        )
    return algorithm


def run_v3(argv: list[str]) -> None:
    """``train_skrl.run`` / ``_run`` (isaaclab 3.0.0)."""
    parser = build_parser_v3()
    args_cli, remaining = upstream.parse_v3(parser, argv)  # setup_preset_cli: -h anywhere -> help, exit 0
    sys.argv = [sys.argv[0]] + remaining  # set_hydra_args
    entry_point = resolve_skrl_agent_cfg_entry_point(args_cli.agent, args_cli.algorithm)
    env_cfg, agent_cfg = upstream.resolve_task_config_v3(args_cli.task, entry_point)
    algorithm = resolve_skrl_algorithm(agent_cfg, args_cli.algorithm)
    _check_supported(args_cli.ml_framework, algorithm)

    from isaacd_trainer import runtime

    upstream.validate_distributed_device(args_cli)
    # apply_env_overrides / _resolve_distributed_device (isaaclab 3.0.0)
    sim_device = runtime.distributed_sim_device() if args_cli.distributed else runtime.default_device(args_cli.device)
    if args_cli.max_iterations:
        agent_cfg["trainer"]["timesteps"] = args_cli.max_iterations * agent_cfg["agent"]["rollouts"]
    agent_cfg["trainer"]["close_environment_at_exit"] = False
    args_cli.seed = upstream.resolve_seed(args_cli.seed)
    if args_cli.seed is not None:
        agent_cfg["seed"] = args_cli.seed
    rank_env = "JAX_RANK" if args_cli.ml_framework == "jax" else "RANK"
    rank = int(os.getenv(rank_env, "0")) if args_cli.distributed else None
    if rank is not None:
        agent_cfg["seed"] += rank
    experiment_cfg = agent_cfg["agent"]["experiment"]
    log_root_path = os.path.abspath(os.path.join("logs", "skrl", experiment_cfg["directory"]))
    print(f"[INFO] Logging experiment in directory: {log_root_path}")
    run_name = (args_cli.run_timestamp or datetime.now().strftime("%Y-%m-%d_%H-%M-%S")) + \
        f"_{algorithm}_{args_cli.ml_framework}"
    print(f"Exact experiment name requested from command line: {run_name}")
    if experiment_cfg["experiment_name"]:
        run_name += f"_{experiment_cfg['experiment_name']}"
    experiment_cfg["directory"] = log_root_path
    experiment_cfg["experiment_name"] = run_name
    log_dir = os.path.join(log_root_path, run_name)
    rank_dir = log_dir if rank in (None, 0) else os.path.join(log_dir, f"rank_{rank}")
    metadata = {"agent": entry_point, "algorithm": algorithm, "ml_framework": args_cli.ml_framework}
    if rank in (None, 0):  # all ranks share the run folder, so its manifest is written once
        upstream.write_run_manifest(log_dir, library="skrl", task=args_cli.task, metadata=metadata)

    runtime.dump_params(rank_dir, dict(env_cfg, num_envs=args_cli.num_envs, seed=agent_cfg["seed"]), agent_cfg,
                        pickles=False)
    if args_cli.checkpoint in upstream.CHECKPOINT_SELECTORS:
        resume_path = upstream.resolve_checkpoint_selector(
            log_root_path, args_cli.checkpoint, library="skrl", task=args_cli.task, checkpoint_pattern=r".*",
            other_dirs=["checkpoints"], metadata=metadata)
    else:
        resume_path = upstream.retrieve_file_path(args_cli.checkpoint) if args_cli.checkpoint else None
    runtime.check_frontend(args_cli.frontend)
    _train(args_cli, env_cfg, agent_cfg, log_dir, resume_path, final_checkpoint=rank in (None, 0),
           sim_device=sim_device)


if __name__ == "__main__":
    sys.exit(main())
