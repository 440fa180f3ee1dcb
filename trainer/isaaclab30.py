"""The built-in trainer in Isaac Lab 3.x mode: the unified entry point with ``--rl_library rsl_rl``.

``python -m isaacd_trainer.isaaclab30 --rl_library rsl_rl --task ... [--checkpoint latest|best|FILE|RUN_DIR]``
(``--rl_library skrl``: ``skrl_train.run_v3``; ``--rl_library rl_games``: ``rl_games_train.run_v3``)
(console script ``isaacd-train-isaaclab30``) stands for ``isaaclab train --rl_library rsl_rl ...`` /
``scripts/reinforcement_learning/train.py --rl_library rsl_rl ...``. It follows the newest stored upstream code,
isaac-sim/IsaacLab commit 062dd2adc443ad16832094830a9180a483c11016:

* ``source/isaaclab_rl/isaaclab_rl/entrypoints/dispatch.py`` (``run_cli``): ``--rl_library`` picks the backend;
  missing -> selector help and exit 2 (0 with ``-h``).
* ``entrypoints/backends/cli_args_rsl_rl.py``: **no ``--resume`` and no ``--load_run``**; ``--checkpoint`` alone.
* ``entrypoints/backends/train_rsl_rl.py`` (``_resolve_checkpoint``): ``--checkpoint latest|best`` -> newest run
  with a ``run.json`` manifest (same library, task, agent) that has a ``model_*.pt``, its naturally last checkpoint;
  an existing directory -> ``get_checkpoint_path(dirname, basename, agent_cfg.load_checkpoint)``; anything else ->
  ``retrieve_file_path`` (an existing file, relative to the working directory or absolute; else
  FileNotFoundError, exit 1); none -> fresh start. The run dir and its ``run.json`` are written *before* the
  checkpoint is resolved (rank 0 only; other ranks use ``<run dir>/rank_<r>``).
* ``hydra.py`` (commit 00b36b759c7f9a257f2750430bed99de09f01190): ``env.*``/``agent.*`` ``key=value`` are set
  directly, any other leftover token goes to Hydra, which rejects it (exit 1; a leftover ``--flag``: exit 2).
* ``runner.learn(max_iterations, init_at_random_ep_len=agent_cfg.init_at_random_ep_len)`` inside
  ``contextlib.suppress(KeyboardInterrupt)``: Ctrl-C ends training *without saving* and the process exits 0.
  SIGTERM keeps its default action (killed). Vanilla rsl_rl numbering, as in 2.x.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from datetime import datetime
from typing import Sequence

from isaacd_trainer import upstream
from isaacd_trainer.extras import add_isaacd_args
from isaacd_trainer.tasks import TASKS

BACKENDS = ("rl_games", "rlinf", "rsl_rl", "sb3", "skrl")


def _print_selector_help(action: str) -> None:
    parser = argparse.ArgumentParser(prog="isaacd-train-isaaclab30",
                                     description=f"{action.capitalize()} an RL agent with a selected backend.")
    parser.add_argument("--rl_library", choices=list(BACKENDS), required=True,
                        help="Reinforcement learning backend to use (built in here: rsl_rl, skrl, rl_games).")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="Arguments forwarded to the selected backend.")
    parser.print_help()


def build_parser() -> argparse.ArgumentParser:
    """``train_rsl_rl._parse_args``: common train args, ``--external_callback``, rsl_rl args, launcher args."""
    parser = argparse.ArgumentParser(prog="isaacd-train-isaaclab30 --rl_library rsl_rl",
                                     description="Train an RL agent with RSL-RL.",
                                     epilog=f"Built-in tasks: {', '.join(sorted(TASKS))}.")
    parser.add_argument("--video", action="store_true", default=False, help="Record videos during training.")
    parser.add_argument("--video_length", type=int, default=None, help="Length of each recorded video clip.")
    parser.add_argument("--video_interval", type=int, default=None, help="Interval between video clips.")
    parser.add_argument("--num_envs", type=int, default=None, help="Number of environments to simulate.")
    parser.add_argument("--task", type=str, default=None, help="Name of the task.")
    parser.add_argument("--frontend", type=str, choices=["torch", "warp"], default="torch",
                        help="Runtime that constructs the environment (only torch here).")
    parser.add_argument("--agent", type=str, default="rsl_rl_cfg_entry_point",
                        help="Name of the RL agent configuration entry point.")
    parser.add_argument("--seed", type=int, default=None, help="Seed used for the environment.")
    parser.add_argument("--distributed", action="store_true", default=False,
                        help="Run training with multiple GPUs or nodes.")
    parser.add_argument("--max_iterations", type=int, default=None, help="RL Policy training iterations.")
    parser.add_argument("--export_io_descriptors", action="store_true", default=False,
                        help="Deprecated: export IO descriptors (removed in Isaac Lab 3.2).")
    parser.add_argument("--ray-proc-id", "-rid", type=int, default=None,
                        help="Automatically configured by Ray integration, otherwise None.")
    parser.add_argument("--external_callback", default=None,
                        help="Fully qualified path to an externally defined callback (not supported here).")
    upstream.add_rsl_rl_args_v3(parser)
    upstream.add_app_launcher_args(parser)
    g = parser.add_argument_group("launcher (3.x)")
    g.add_argument("--run_timestamp", type=str, default=None,
                   help="Run folder timestamp shared by all ranks (default: now, %%Y-%%m-%%d_%%H-%%M-%%S).")
    g.add_argument("--deterministic", action="store_true", default=False, help="Request deterministic execution.")
    g.add_argument("--viz", type=str, default=None, help="Visualizer (ignored: no renderer).")
    add_isaacd_args(parser)
    return parser


def _resolve_checkpoint(args_cli: argparse.Namespace, agent_cfg: dict, log_root_path: str) -> str | None:
    """``train_rsl_rl._resolve_checkpoint`` (062dd2ad), without the Weights & Biases branch."""
    if args_cli.checkpoint in upstream.CHECKPOINT_SELECTORS:
        return upstream.resolve_checkpoint_selector(
            log_root_path,
            args_cli.checkpoint,
            library="rsl_rl",
            task=args_cli.task,
            checkpoint_pattern=r"model_.*\.pt",
            metadata={"agent": args_cli.agent},
        )
    if args_cli.checkpoint and os.path.isdir(args_cli.checkpoint):
        return upstream.get_checkpoint_path(
            os.path.dirname(args_cli.checkpoint), os.path.basename(args_cli.checkpoint), agent_cfg["load_checkpoint"]
        )
    if args_cli.checkpoint:
        return upstream.retrieve_file_path(args_cli.checkpoint)
    if agent_cfg["algorithm"]["class_name"] == "Distillation":
        raise ValueError("Distillation training requires --checkpoint.")
    return None


def run(argv: list[str]) -> None:
    parser = build_parser()
    args_cli, remaining_args = parser.parse_known_args(argv)
    upstream_argv0 = sys.argv[0]
    sys.argv = [upstream_argv0] + remaining_args  # set_hydra_args

    from isaacd_trainer import runtime  # torch, rsl_rl

    env_cfg, agent_cfg = upstream.resolve_task_config_v3(args_cli.task, runtime.load_cfgs)

    sim_device = runtime.default_device(args_cli.device)
    if args_cli.distributed:
        if args_cli.device is not None and "cpu" in args_cli.device:
            raise ValueError(
                "Distributed training is not supported when using CPU device. "
                "Please use GPU device (e.g., --device cuda) for distributed training."
            )
        sim_device = f"cuda:{int(os.getenv('LOCAL_RANK', '0'))}"
    cleanup = contextlib.ExitStack()
    with cleanup:
        agent_cfg = upstream.update_rsl_rl_cfg_v3(
            agent_cfg,
            seed=args_cli.seed, checkpoint=args_cli.checkpoint, experiment_name=args_cli.experiment_name,
            run_name=args_cli.run_name, logger=args_cli.logger, log_project_name=args_cli.log_project_name,
        )
        if args_cli.max_iterations is not None:
            agent_cfg["max_iterations"] = args_cli.max_iterations
        rank = int(os.getenv("RANK", "0")) if args_cli.distributed else None
        if rank is not None:
            # the only place 3.0.0 moves the policy: otherwise it stays on agent.device (config default cuda:0)
            agent_cfg["device"] = sim_device
            agent_cfg["seed"] += rank
        env_seed = agent_cfg["seed"]

        log_root_path = os.path.abspath(os.path.join("logs", "rsl_rl", agent_cfg["experiment_name"]))
        print(f"[INFO] Logging experiment in directory: {log_root_path}")
        run_name = args_cli.run_timestamp or datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        print(f"[INFO] Exact experiment name requested from command line: {run_name}")
        if agent_cfg["run_name"]:
            run_name += f"_{agent_cfg['run_name']}"
        log_dir = os.path.join(log_root_path, run_name)
        rank_dir = log_dir if rank in (None, 0) else os.path.join(log_dir, f"rank_{rank}")
        if rank in (None, 0):
            upstream.write_run_manifest(log_dir, library="rsl_rl", task=args_cli.task,
                                        metadata={"agent": args_cli.agent})

        resume_path = _resolve_checkpoint(args_cli, agent_cfg, log_root_path)

        env = runtime.make_env(args_cli.task, env_cfg, args_cli.num_envs, sim_device, env_seed)
        cleanup.callback(env.close)

        start_time = time.time()
        runner = runtime.make_runner(env, agent_cfg, log_dir=log_dir, device=agent_cfg["device"])
        runtime.FaultInjection(args_cli, env, runner, agent_cfg["num_steps_per_env"], resumed=resume_path is not None)
        if resume_path is not None:
            print(f"[INFO] Loading model checkpoint from: {resume_path}")
            runner.load(resume_path, map_location=agent_cfg["device"])
        runtime.dump_params(rank_dir, dict(env_cfg, num_envs=args_cli.num_envs, seed=env_seed, device=sim_device),
                            agent_cfg, pickles=False)

        with contextlib.suppress(KeyboardInterrupt):
            runner.learn(
                num_learning_iterations=agent_cfg["max_iterations"],
                init_at_random_ep_len=agent_cfg.get("init_at_random_ep_len", True),
            )
            print(f"Training time: {round(time.time() - start_time, 2)} seconds")
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    """``dispatch.run_cli("train", argv)``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--rl_library", choices=sorted(BACKENDS))
    selected, backend_argv = parser.parse_known_args(argv)
    if selected.rl_library is None:
        _print_selector_help("train")
        if "-h" in argv or "--help" in argv:
            return 0
        print("\ntrain: error: the following argument is required: --rl_library", file=sys.stderr)
        return 2
    if selected.rl_library not in ("rsl_rl", "skrl", "rl_games"):
        print(f"train: error: the built-in trainer implements only --rl_library rsl_rl, skrl and rl_games, not "
              f"{selected.rl_library}", file=sys.stderr)
        return 2
    original_argv = sys.argv
    try:
        if selected.rl_library == "skrl":
            from isaacd_trainer.skrl_train import run_v3

            run_v3(backend_argv)
        elif selected.rl_library == "rl_games":
            from isaacd_trainer.rl_games_train import run_v3 as run_rl_games_v3

            run_rl_games_v3(backend_argv)
        else:
            run(backend_argv)
    finally:
        sys.argv = original_argv
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
