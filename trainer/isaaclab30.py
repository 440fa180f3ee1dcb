"""The built-in trainer in Isaac Lab 3.x mode: the unified entry point with ``--rl_library rsl_rl``.

``python -m isaacd_trainer.isaaclab30 --rl_library rsl_rl --task ... [--checkpoint latest|best|FILE|RUN_DIR]``
(``--rl_library skrl``: ``skrl_train.run_v3``; ``--rl_library rl_games``: ``rl_games_train.run_v3``)
(console script ``isaacd-train-isaaclab30``) stands for ``isaaclab train --rl_library rsl_rl ...`` /
``scripts/reinforcement_learning/train.py --rl_library rsl_rl ...``. First written from isaac-sim/IsaacLab commit
062dd2adc443ad16832094830a9180a483c11016; every point below was checked against the released **isaaclab 3.0.0**
wheel (``isaaclab_rl/entrypoints/...``), which is the code of record where the two differ:

* ``dispatch.py`` (``run_cli``): argv goes through ``fuse_kit_args``; ``--rl_library`` (rl_games, rlinf, rsl_rl,
  sb3, skrl, torchrl; only three are built in) picks the backend; missing -> the task's ``default_agent`` (the
  built-in tasks declare none) -> selector help and exit 2 (0 with ``-h``). Success: exit 0.
* ``backends/train_rsl_rl.py`` (``_parse_args``): ``common.add_common_train_args`` (incl. ``--run_timestamp``,
  ``--capture_env_sensors*``), ``--external_callback`` (run before parsing; its return value filters the Hydra
  arguments), ``--[no-]resume_optimizer_state``, ``cli_args_rsl_rl`` (**no ``--resume``, no ``--load_run``**; a
  bare ``--resume`` is argparse's abbreviation of ``--resume_optimizer_state``, accepted: a fresh run) and
  the Kit launcher's flags (**no ``--headless``/``--enable_cameras``**; ``--device`` default ``cuda:0``);
  ``setup_preset_cli``: ``-h`` anywhere -> help, exit 0; otherwise ``parse_known_args``, leftovers to Hydra.
* ``isaaclab_tasks/utils/hydra.py`` (``register_task``): ``--agent`` names the agent config (unknown: ValueError,
  exit 1); ``env.*``/``agent.*`` ``key=value`` are set directly, ``presets=``/``physics=``/``renderer=`` are preset
  selectors, any other leftover goes to Hydra, which rejects it (exit 1; a leftover ``--flag``: exit 2).
* ``train_rsl_rl._run``: ``update_rsl_rl_cfg`` (``--seed -1`` -> random; ``load_checkpoint`` = the
  ``--checkpoint`` text), ``validate_distributed_device``, ``--max_iterations`` -> ``max_iterations`` (rsl_rl runs
  that many *more*), rank seed offset, run dir ``logs/rsl_rl/<experiment>/<--run_timestamp or now>[_<run_name>]``
  and its ``run.json`` written (rank 0 only; other ranks use ``<run dir>/rank_<r>``) *before* ``_resolve_checkpoint``:
  ``latest|best`` -> newest compatible manifested run's naturally last ``model_*.pt`` (none: ValueError); an
  existing directory -> ``get_checkpoint_path(dirname, basename, agent_cfg.load_checkpoint)`` (3.0.0 version;
  the regex is the directory text itself, so in practice ValueError); anything else -> ``retrieve_file_path``
  (missing: FileNotFoundError, exit 1). ``params/`` is dumped after the runner loaded the checkpoint.
* ``runner.learn(max_iterations, init_at_random_ep_len=...)`` inside ``contextlib.suppress(KeyboardInterrupt)``:
  Ctrl-C ends training *without saving* and the process exits 0 (checked against a real 3.0.0 run). SIGTERM keeps
  its default action (killed, -15; also checked). Vanilla rsl_rl numbering, as in 2.x.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from datetime import datetime
from typing import Sequence

from isaacd_trainer import eval_core, upstream
from isaacd_trainer.extras import add_isaacd_args
from isaacd_trainer.tasks import TASKS

BACKENDS = ("rl_games", "rlinf", "rsl_rl", "sb3", "skrl", "torchrl")  # dispatch._BACKEND_MODULES["train"]


def _print_selector_help(action: str) -> None:
    parser = argparse.ArgumentParser(prog="isaacd-train-isaaclab30",
                                     description=f"{action.capitalize()} an RL agent with a selected backend.")
    parser.add_argument("--rl_library", choices=list(BACKENDS), required=True,
                        help="Reinforcement learning backend to use (built in here: rsl_rl, skrl, rl_games).")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="Arguments forwarded to the selected backend.")
    parser.print_help()


def build_parser() -> argparse.ArgumentParser:
    """``train_rsl_rl._parse_args`` (isaaclab 3.0.0): common train args, ``--external_callback``,
    ``--resume_optimizer_state``, rsl_rl args, launcher args (+ isaacd's own fault flags)."""
    parser = argparse.ArgumentParser(prog="isaacd-train-isaaclab30 --rl_library rsl_rl",
                                     description="Train an RL agent with RSL-RL.",
                                     epilog=f"Built-in tasks: {', '.join(sorted(TASKS))}.")
    upstream.add_common_train_args_v3(parser, agent_default="rsl_rl_cfg_entry_point",
                                      agent_help="Name of the RL agent configuration entry point.")
    parser.add_argument("--external_callback", default=None,
                        help="Fully qualified path to an externally defined callback.")
    parser.add_argument("--resume_optimizer_state", action=argparse.BooleanOptionalAction, default=True,
                        help="Restore the policy optimizer; disable to keep a fresh optimizer and configured "
                             "learning rate.")
    upstream.add_rsl_rl_args_v3(parser)
    upstream.add_launcher_args_v3(parser)
    add_isaacd_args(parser)
    return parser


def _checkpoint_load_cfg(resume_optimizer_state: bool, *, runner_class: str) -> dict[str, bool] | None:
    """``cli_args_rsl_rl.checkpoint_load_cfg`` (isaaclab 3.0.0)."""
    if resume_optimizer_state:
        return None
    if runner_class == "DistillationRunner":
        return {"student": True, "teacher": True, "optimizer": False, "iteration": True}
    return {"actor": True, "critic": True, "optimizer": False, "iteration": True, "rnd": True}


def _resolve_checkpoint(args_cli: argparse.Namespace, agent_cfg: dict, log_root_path: str) -> str | None:
    """``train_rsl_rl._resolve_checkpoint`` (062dd2ad; the same in isaaclab 3.0.0), without the Weights & Biases
    branch (such a URL is looked up as a file here and fails)."""
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
        # isaaclab 3.0.0 parse_cfg.get_checkpoint_path: natural sort, missing dir -> ValueError (not the 2.x one)
        return upstream.get_checkpoint_path_v3(
            os.path.dirname(args_cli.checkpoint), os.path.basename(args_cli.checkpoint), agent_cfg["load_checkpoint"]
        )
    if args_cli.checkpoint:
        return upstream.retrieve_file_path(args_cli.checkpoint)
    if agent_cfg["algorithm"]["class_name"] == "Distillation":
        raise ValueError("Distillation training requires --checkpoint.")
    return None


def run(argv: list[str]) -> None:
    parser = build_parser()
    # train_rsl_rl._parse_args (isaaclab 3.0.0): the callback runs first, -h anywhere wins, leftovers go to Hydra
    remaining_args_env_registration = upstream.register_external_tasks(argv)
    args_cli, remaining_args = upstream.parse_v3(parser, argv)
    upstream_argv0 = sys.argv[0]
    sys.argv = [upstream_argv0] + upstream.list_intersection(remaining_args, remaining_args_env_registration)

    from isaacd_trainer import runtime  # torch, rsl_rl

    env_cfg, agent_cfg = upstream.resolve_task_config_v3(args_cli.task, args_cli.agent)

    cleanup = contextlib.ExitStack()
    with cleanup:
        agent_cfg = upstream.update_rsl_rl_cfg_v3(
            agent_cfg,
            seed=args_cli.seed, checkpoint=args_cli.checkpoint, experiment_name=args_cli.experiment_name,
            run_name=args_cli.run_name, logger=args_cli.logger, log_project_name=args_cli.log_project_name,
        )
        if args_cli.seed is not None:
            args_cli.seed = agent_cfg["seed"]
        if eval_core.requested():  # issue 41: isaacd evaluates a checkpoint with the job's own command line
            from isaacd_trainer.evaluate import run_builtin

            return run_builtin(args_cli.task, env_cfg, agent_cfg)
        upstream.validate_distributed_device(args_cli)  # after the launch in 3.0.0: still before any run dir
        # apply_env_overrides / _resolve_distributed_device (isaaclab 3.0.0)
        sim_device = runtime.distributed_sim_device() if args_cli.distributed else runtime.default_device(
            args_cli.device)
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

        runtime.check_frontend(args_cli.frontend)
        env = runtime.make_env(args_cli.task, env_cfg, args_cli.num_envs, sim_device, env_seed)
        cleanup.callback(env.close)

        start_time = time.time()
        runner = runtime.make_runner(env, agent_cfg, log_dir=log_dir, device=agent_cfg["device"])
        if args_cli.deterministic:
            # train_rsl_rl._run (isaaclab 3.0.0): after the runner is built, before the checkpoint is loaded
            runtime.configure_seed(env_seed, torch_deterministic=True)
        runtime.FaultInjection(args_cli, env, runner, agent_cfg["num_steps_per_env"], resumed=resume_path is not None)
        if resume_path is not None:
            print(f"[INFO] Loading model checkpoint from: {resume_path}")
            runner.load(
                resume_path,
                load_cfg=_checkpoint_load_cfg(args_cli.resume_optimizer_state, runner_class=agent_cfg["class_name"]),
                map_location=agent_cfg["device"],
            )
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
    """``dispatch.run_cli("train", argv)`` (isaaclab 3.0.0)."""
    argv = upstream.fuse_kit_args(list(sys.argv[1:] if argv is None else argv))  # dispatch._normalize_argv
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
    if eval_core.requested() and selected.rl_library != "rsl_rl":
        from isaacd_trainer.evaluate import refuse_library

        refuse_library(selected.rl_library)
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
