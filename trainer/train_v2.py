"""Isaac Lab 2.x ``scripts/reinforcement_learning/rsl_rl/train.py`` on the built-in tasks (both 2.x flavours).

Follows upstream train.py (isaac-sim/IsaacLab, e.g. commit 011c373c1ffaaeb7a1bf240bd189548a3dd9b092) step by step:

1. argparse: train.py's flags + ``cli_args.add_rsl_rl_args`` + the AppLauncher flags, ``parse_known_args()``;
   every leftover token becomes a Hydra override (``sys.argv = [sys.argv[0]] + hydra_args``).
2. ``@hydra_task_config(task, agent)``: real hydra-core parses the overrides (a bad one: exit 1).
3. ``update_rsl_rl_cfg`` (CLI flags win over Hydra), ``--num_envs``, ``--max_iterations``, seed, device.
4. ``log_root_path = abspath("logs/rsl_rl/<experiment_name>")`` relative to the working directory; the new run dir
   ``<%Y-%m-%d_%H-%M-%S>[_<run_name>]`` is named (not created) before the env is made.
5. On ``resume``: ``get_checkpoint_path(log_root_path, load_run, load_checkpoint)`` -- before the new run dir
   exists; ValueError (exit 1) when nothing matches.
6. ``OnPolicyRunner(env, agent_cfg, log_dir=...)``, ``runner.load(resume_path)``, params dump (creates the run dir),
   ``runner.learn(max_iterations, init_at_random_ep_len=True)``: vanilla rsl_rl numbering (after loading
   ``model_N.pt`` the first iteration is N; ``--max_iterations M`` runs N..N+M-1 and ends with ``model_{N+M-1}.pt``).
7. No signal handling at all: SIGINT raises KeyboardInterrupt out of ``learn`` (Hydra only catches ``Exception``),
   SIGTERM kills. Nothing is saved. (isaacd's launcher shim adds save-on-stop from outside; see ``shim.py``.)
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime
from typing import Sequence

from isaacd_trainer import eval_core, upstream
from isaacd_trainer.extras import add_isaacd_args
from isaacd_trainer.tasks import TASKS


def build_parser(flavour: str, prog: str | None = None) -> argparse.ArgumentParser:
    """``flavour``: "2.1" (2.1 - 2.3.x, ``--resume`` store_true) or "2.0" (<= 2.0, ``--resume`` type=bool)."""
    parser = argparse.ArgumentParser(prog=prog, description="Train an RL agent with RSL-RL.",
                                     epilog=f"Built-in tasks: {', '.join(sorted(TASKS))}. Leftover words are Hydra "
                                            "overrides, e.g. agent.save_interval=10 env.max_episode_length=200.")
    parser.add_argument("--video", action="store_true", default=False, help="Record videos during training.")
    parser.add_argument("--video_length", type=int, default=200, help="Length of the recorded video (in steps).")
    parser.add_argument("--video_interval", type=int, default=2000, help="Interval between video recordings (in steps).")
    parser.add_argument("--num_envs", type=int, default=None, help="Number of environments to simulate.")
    parser.add_argument("--task", type=str, default=None, help="Name of the task.")
    parser.add_argument(
        "--agent", type=str, default="rsl_rl_cfg_entry_point", help="Name of the RL agent configuration entry point."
    )
    parser.add_argument("--seed", type=int, default=None, help="Seed used for the environment")
    parser.add_argument("--max_iterations", type=int, default=None, help="RL Policy training iterations.")
    parser.add_argument(
        "--distributed", action="store_true", default=False, help="Run training with multiple GPUs or nodes."
    )
    if flavour != "2.0":
        parser.add_argument("--export_io_descriptors", action="store_true", default=False,
                            help="Export IO descriptors.")
    if flavour == "2.0":
        upstream.add_rsl_rl_args_v20(parser)
    else:
        upstream.add_rsl_rl_args_v21(parser)
    upstream.add_app_launcher_args(parser)
    add_isaacd_args(parser)
    return parser


def main(flavour: str = "2.1", argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    parser = build_parser(flavour, prog)
    args_cli, hydra_args = parser.parse_known_args(argv)
    # clear out sys.argv for Hydra
    sys.argv = [sys.argv[0]] + hydra_args

    from isaacd_trainer import runtime  # torch, rsl_rl

    @upstream.hydra_task_config(args_cli.task, runtime.load_cfgs)
    def train(env_cfg: dict, agent_cfg: dict) -> None:
        agent_cfg = upstream.update_rsl_rl_cfg_v2x(agent_cfg, args_cli, apply_experiment_name=(flavour != "2.0"))
        if eval_core.requested():  # issue 41: isaacd evaluates a checkpoint with the job's own command line
            from isaacd_trainer.evaluate import run_builtin

            return run_builtin(args_cli.task, env_cfg, agent_cfg)
        num_envs = args_cli.num_envs
        agent_cfg["max_iterations"] = (
            args_cli.max_iterations if args_cli.max_iterations is not None else agent_cfg["max_iterations"]
        )
        # set the environment seed; sim device from AppLauncher's --device
        env_seed = agent_cfg["seed"]
        sim_device = runtime.default_device(args_cli.device)
        # agent_cfg["device"] is the config's (cuda:0) or Hydra's agent.device=...: upstream never applies --device
        # to it outside --distributed (scripts/reinforcement_learning/rsl_rl/train.py @011c373c)
        # multi-gpu training configuration
        if args_cli.distributed:
            local_rank = int(os.getenv("LOCAL_RANK", "0"))
            sim_device = f"cuda:{local_rank}"
            agent_cfg["device"] = f"cuda:{local_rank}"
            seed = agent_cfg["seed"] + local_rank
            env_seed = seed
            agent_cfg["seed"] = seed

        # specify directory for logging experiments
        log_root_path = os.path.join("logs", "rsl_rl", agent_cfg["experiment_name"])
        log_root_path = os.path.abspath(log_root_path)
        print(f"[INFO] Logging experiment in directory: {log_root_path}")
        log_dir = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        print(f"Exact experiment name requested from command line: {log_dir}")
        if agent_cfg["run_name"]:
            log_dir += f"_{agent_cfg['run_name']}"
        log_dir = os.path.join(log_root_path, log_dir)

        if args_cli.video:
            print("[WARNING] --video: the built-in trainer has no renderer; no videos are recorded.")

        # create environment
        env = runtime.make_env(args_cli.task, env_cfg, num_envs, sim_device, env_seed)

        # save resume path before creating a new log_dir
        resume_path = None
        if agent_cfg["resume"] or agent_cfg["algorithm"]["class_name"] == "Distillation":
            resume_path = upstream.get_checkpoint_path(log_root_path, agent_cfg["load_run"],
                                                       agent_cfg["load_checkpoint"])

        runner = runtime.make_runner(env, agent_cfg, log_dir=log_dir, device=agent_cfg["device"])
        runtime.FaultInjection(args_cli, env, runner, agent_cfg["num_steps_per_env"], resumed=resume_path is not None)
        if resume_path is not None:
            print(f"[INFO]: Loading model checkpoint from: {resume_path}")
            runner.load(resume_path)

        # dump the configuration into log-directory
        runtime.dump_params(log_dir, dict(env_cfg, num_envs=num_envs, seed=env_seed, device=sim_device), agent_cfg,
                            pickles=True)

        # run training
        runner.learn(num_learning_iterations=agent_cfg["max_iterations"], init_at_random_ep_len=True)

        # close the simulator
        env.close()

    train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
