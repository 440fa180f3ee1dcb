"""Isaac Lab's own helpers, re-implemented line for line for the built-in trainer (no torch, no Isaac Sim).

Everything here copies the behaviour of a named upstream function; the docstring of each says which file and
commit it follows (isaac-sim/IsaacLab). The 3.x pieces were first written from commit 062dd2ad and then checked
against the released ``isaaclab==3.0.0`` wheel (the code of record); those say "isaaclab 3.0.0". Differences are only where Isaac Sim / gymnasium configclasses are
replaced by the built-in trainer's plain dict configs, and each is named.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from isaacd_trainer import agent_cfgs

# --------------------------------------------------------------------------------------------------- rsl_rl cli_args


def add_rsl_rl_args_v21(parser: argparse.ArgumentParser) -> None:
    """``scripts/reinforcement_learning/rsl_rl/cli_args.py:add_rsl_rl_args`` of Isaac Lab 2.1 - 2.3.x.

    ``--resume`` is ``action="store_true"`` (IsaacLab PR #2299; e.g. commit 033a529fa9625e3db058ac5b8d049e45a992ba3f).
    """
    arg_group = parser.add_argument_group("rsl_rl", description="Arguments for RSL-RL agent.")
    arg_group.add_argument(
        "--experiment_name", type=str, default=None, help="Name of the experiment folder where logs will be stored."
    )
    arg_group.add_argument("--run_name", type=str, default=None, help="Run name suffix to the log directory.")
    arg_group.add_argument("--resume", action="store_true", default=False, help="Whether to resume from a checkpoint.")
    arg_group.add_argument("--load_run", type=str, default=None, help="Name of the run folder to resume from.")
    arg_group.add_argument("--checkpoint", type=str, default=None, help="Checkpoint file to resume from.")
    arg_group.add_argument(
        "--logger", type=str, default=None, choices={"wandb", "tensorboard", "neptune"}, help="Logger module to use."
    )
    arg_group.add_argument(
        "--log_project_name", type=str, default=None, help="Name of the logging project when using wandb or neptune."
    )


def add_rsl_rl_args_v20(parser: argparse.ArgumentParser) -> None:
    """The same up to Isaac Lab 2.0: ``--resume`` with ``type=bool, default=None``.

    ``bool("False")`` is True, so any non-empty value resumes; a bare ``--resume`` is an argparse error (exit 2).
    (cli_args.py at commit fe626787e5cd6ee2d7d54ec79a2e372ff8b22c3d.)
    """
    arg_group = parser.add_argument_group("rsl_rl", description="Arguments for RSL-RL agent.")
    arg_group.add_argument(
        "--experiment_name", type=str, default=None, help="Name of the experiment folder where logs will be stored."
    )
    arg_group.add_argument("--run_name", type=str, default=None, help="Run name suffix to the log directory.")
    arg_group.add_argument("--resume", type=bool, default=None, help="Whether to resume from a checkpoint.")
    arg_group.add_argument("--load_run", type=str, default=None, help="Name of the run folder to resume from.")
    arg_group.add_argument("--checkpoint", type=str, default=None, help="Checkpoint file to resume from.")
    arg_group.add_argument(
        "--logger", type=str, default=None, choices={"wandb", "tensorboard", "neptune"}, help="Logger module to use."
    )
    arg_group.add_argument(
        "--log_project_name", type=str, default=None, help="Name of the logging project when using wandb or neptune."
    )


def update_rsl_rl_cfg_v2x(agent_cfg: dict, args_cli: argparse.Namespace, *, apply_experiment_name: bool) -> dict:
    """``cli_args.update_rsl_rl_cfg`` of Isaac Lab 2.x on the agent config dict.

    Applied *after* Hydra, so CLI flags win over ``agent.*`` overrides. Note ``args_cli.resume`` is never None with
    the 2.1+ ``store_true`` flag (default False): there ``agent.resume=True`` on the Hydra side is always reset.
    The stored <= 2.0 version (fe626787) does not apply ``--experiment_name`` at all (``apply_experiment_name``
    False); 2.1+ (033a529f) does.
    """
    if getattr(args_cli, "seed", None) is not None:
        if args_cli.seed == -1:
            args_cli.seed = random.randint(0, 10000)
        agent_cfg["seed"] = args_cli.seed
    if args_cli.resume is not None:
        agent_cfg["resume"] = args_cli.resume
    if args_cli.load_run is not None:
        agent_cfg["load_run"] = args_cli.load_run
    if args_cli.checkpoint is not None:
        agent_cfg["load_checkpoint"] = args_cli.checkpoint
    if apply_experiment_name and args_cli.experiment_name is not None:
        agent_cfg["experiment_name"] = args_cli.experiment_name
    if args_cli.run_name is not None:
        agent_cfg["run_name"] = args_cli.run_name
    if args_cli.logger is not None:
        agent_cfg["logger"] = args_cli.logger
    if agent_cfg.get("logger") in {"wandb", "neptune"} and args_cli.log_project_name:
        agent_cfg["wandb_project"] = args_cli.log_project_name
        agent_cfg["neptune_project"] = args_cli.log_project_name
    return agent_cfg


def add_rsl_rl_args_v3(parser: argparse.ArgumentParser) -> None:
    """``isaaclab_rl/entrypoints/backends/cli_args_rsl_rl.py:add_rsl_rl_args`` (commit 062dd2ad; checked against the
    isaaclab 3.0.0 wheel: the same five flags).

    No ``--resume`` and no ``--load_run``: ``--checkpoint`` alone selects what to resume from (3.0.0 also reads a
    Weights & Biases run URL there; not supported here: such a text is looked up as a file and fails).
    """
    arg_group = parser.add_argument_group("rsl_rl", description="Arguments for RSL-RL agent.")
    arg_group.add_argument(
        "--experiment_name", type=str, default=None, help="Name of the experiment folder where logs will be stored."
    )
    arg_group.add_argument("--run_name", type=str, default=None, help="Run name suffix to the log directory.")
    arg_group.add_argument(
        "--checkpoint",
        type=str,
        default=None,
        help="Checkpoint path, latest/best (a Weights & Biases run is not supported by the built-in trainer).",
    )
    arg_group.add_argument(
        "--logger", type=str, default=None, choices={"wandb", "tensorboard", "neptune"}, help="Logger module to use."
    )
    arg_group.add_argument(
        "--log_project_name", type=str, default=None, help="Name of the logging project when using wandb or neptune."
    )


def update_rsl_rl_cfg_v3(agent_cfg: dict, *, seed=None, checkpoint=None, experiment_name=None,
                         run_name=None, logger=None, log_project_name=None) -> dict:
    """``cli_args_rsl_rl.update_rsl_rl_cfg`` (isaaclab 3.0.0): ``load_checkpoint`` becomes the ``--checkpoint`` text.
    It leaves ``device`` alone: ``--device`` moves only the simulation."""
    if seed is not None:
        agent_cfg["seed"] = random.randint(0, 10000) if seed == -1 else seed
    if checkpoint is not None:
        agent_cfg["load_checkpoint"] = checkpoint
    if experiment_name is not None:
        agent_cfg["experiment_name"] = experiment_name
    if run_name is not None:
        agent_cfg["run_name"] = run_name
    if logger is not None:
        agent_cfg["logger"] = logger
    if agent_cfg.get("logger") in {"wandb", "neptune"} and log_project_name:
        agent_cfg["wandb_project"] = log_project_name
        agent_cfg["neptune_project"] = log_project_name
    return agent_cfg


def add_app_launcher_args(parser: argparse.ArgumentParser) -> None:
    """The subset of ``isaaclab.app.AppLauncher.add_app_launcher_args`` that a headless training job uses.

    Accepted for parity; only ``--device`` has an effect here. Upstream's ``--device`` default is ``cuda:0``;
    the built-in trainer's default is ``cuda:0`` when CUDA is available, else ``cpu``.
    """
    arg_group = parser.add_argument_group("app_launcher arguments", description="Arguments for the AppLauncher.")
    arg_group.add_argument("--headless", action="store_true", default=False, help="Force display off at all times.")
    arg_group.add_argument("--livestream", type=int, default=-1, choices={-1, 0, 1, 2}, help="Force enable livestreaming.")
    arg_group.add_argument("--enable_cameras", action="store_true", default=False, help="Enable camera sensors.")
    arg_group.add_argument("--device", type=str, default=None, help="The device to run the simulation on.")
    arg_group.add_argument("--verbose", action="store_true", help="Enable verbose-level log output from the SimulationApp.")
    arg_group.add_argument("--info", action="store_true", help="Enable info-level log output from the SimulationApp.")
    arg_group.add_argument("--experience", type=str, default="", help="The experience file to load.")
    arg_group.add_argument("--kit_args", type=str, default="", help="Command line arguments for Omniverse Kit.")


# --------------------------------------------------------------------------------------- 3.x command line (3.0.0)


def fuse_kit_args(argv: list[str]) -> list[str]:
    """``isaaclab/app/sim_launcher.py:fuse_kit_args`` (isaaclab 3.0.0), applied by ``dispatch._normalize_argv``:
    ``--kit_args <option-like value>`` becomes one ``--kit_args=<value>`` token."""
    fused: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        next_token = argv[index + 1] if index + 1 < len(argv) else None
        if token == "--kit_args" and next_token is not None and next_token.startswith("-") and " " not in next_token:
            fused.append(f"--kit_args={next_token}")
            index += 2
        else:
            fused.append(token)
            index += 1
    return fused


def add_common_train_args_v3(parser: argparse.ArgumentParser, *, agent_default: str | None, agent_help: str) -> None:
    """``isaaclab_rl/entrypoints/common.py:add_common_train_args`` (isaaclab 3.0.0), as the rsl_rl, skrl and
    rl_games train backends call it (``--agent``, ``--distributed`` and ``--run_timestamp`` included)."""
    parser.add_argument("--video", action="store_true", default=False, help="Record videos during training.")
    parser.add_argument("--video_length", type=int, default=None, help="Length of each recorded video clip.")
    parser.add_argument("--video_interval", type=int, default=None, help="Interval between video clips.")
    parser.add_argument("--num_envs", type=int, default=None, help="Number of environments to simulate.")
    parser.add_argument("--task", type=str, default=None, help="Name of the task.")
    parser.add_argument("--frontend", type=str, choices=["torch", "warp"], default="torch",
                        help="Runtime that constructs the environment (only torch here).")
    parser.add_argument("--agent", type=str, default=agent_default, help=agent_help)
    parser.add_argument("--seed", type=int, default=None, help="Seed used for the environment.")
    parser.add_argument("--distributed", action="store_true", default=False,
                        help="Run training with multiple GPUs or nodes.")
    parser.add_argument("--run_timestamp", type=str, default=None,
                        help="Timestamp naming the run folder; train_multigpu passes one so that every rank shares "
                             "the folder.")
    parser.add_argument("--max_iterations", type=int, default=None, help="RL Policy training iterations.")
    parser.add_argument("--export_io_descriptors", action="store_true", default=False,
                        help="Deprecated: export IO descriptors (removed in Isaac Lab 3.2).")
    parser.add_argument("--ray-proc-id", "-rid", type=int, default=None,
                        help="Automatically configured by Ray integration, otherwise None.")
    parser.add_argument("--capture_env_sensors", type=int, default=0,
                        help="Number of environment views to capture from each image-like scene sensor (none here).")
    parser.add_argument("--capture_env_sensors_length", type=int, default=200,
                        help="Length of each captured sensor frame window (in steps).")
    parser.add_argument("--capture_env_sensors_interval", type=int, default=2000,
                        help="Interval between captured sensor frame windows (in steps).")
    parser.add_argument("--capture_env_sensors_format", choices=["tensorboard", "file"], default="tensorboard",
                        help="Format used to save the captured sensor frames.")


_VISUALIZER_TYPES = ("kit", "newton_gl", "newton_rtx", "rerun", "viser")  # isaaclab/visualizers/visualizer_cfg.py
_VISUALIZER_ALIASES = {"newton": "newton_gl"}


def _parse_visualizer_csv(value: str) -> list[str]:
    """``isaaclab/app/sim_launcher.py:_parse_visualizer_csv`` (isaaclab 3.0.0): a bad name is an argparse error."""
    token = value.strip()
    if not token:
        raise argparse.ArgumentTypeError(
            "Invalid --visualizer value: empty string. Use a comma-separated list, e.g. --viz kit,newton_gl.")
    if " " in token:
        raise argparse.ArgumentTypeError(
            "Invalid --visualizer value: spaces are not allowed. "
            "Use a comma-separated list without spaces, e.g. --viz kit,newton_gl,rerun,viser.")
    names = [item.strip().lower() for item in token.split(",")]
    if any(not name for name in names):
        raise argparse.ArgumentTypeError(
            "Invalid --visualizer value: empty visualizer entry detected. "
            "Use a comma-separated list without empty items.")
    invalid = [name for name in names if name not in (*_VISUALIZER_TYPES, *_VISUALIZER_ALIASES, "none")]
    if invalid:
        raise argparse.ArgumentTypeError(
            f"Invalid --visualizer value(s): {', '.join(invalid)}. "
            f"Valid options: {', '.join(sorted((*_VISUALIZER_TYPES, 'none')))}.")
    names = [_VISUALIZER_ALIASES.get(name, name) for name in names]
    if "none" in names:
        if len(names) > 1:
            raise argparse.ArgumentTypeError(
                "Invalid --visualizer value: 'none' cannot be combined with other visualizer types.")
        return []
    return list(dict.fromkeys(names))


def add_launcher_args_v3(parser: argparse.ArgumentParser) -> None:
    """``isaaclab_physx/app/kit_launcher.py:KitLauncher.add_launcher_args`` (isaaclab 3.0.0, via
    ``isaaclab.app.add_launcher_args``). Accepted for parity; only ``--device`` (and ``--deterministic``) act here.

    3.0.0 has **no** ``--headless`` and no ``--enable_cameras``: such a flag is left over for Hydra, which rejects
    it (exit 2). ``--livestream`` takes 0/1/2 only. ``--device`` defaults to ``cuda:0`` like upstream (no CPU
    fallback: the simulation then needs CUDA, as the real one does).
    """
    g = parser.add_argument_group("launcher arguments", description="Arguments for the KitLauncher.")
    g.add_argument("--livestream", type=int, default=-1, choices={0, 1, 2}, help="Force enable livestreaming.")
    g.add_argument("--xr", action="store_true", default=False, help="Enable XR mode (no effect here).")
    g.add_argument("--device", type=str, default="cuda:0",
                   help='The device to run the simulation on. Can be "cpu", "cuda", "cuda:N".')
    g.add_argument("--visualizer", "--viz", type=_parse_visualizer_csv, default=None,
                   help="Visualizer backends to enable as CSV (no renderer here).")
    g.add_argument("--verbose", action="store_true", help="Enable verbose-level log output from the SimulationApp.")
    g.add_argument("--info", action="store_true", help="Enable info-level log output from the SimulationApp.")
    g.add_argument("--experience", type=str, default="", help="The experience file to load.")
    g.add_argument("--deterministic", action="store_true", default=False,
                   help="Request reproducible execution (configure_seed(..., torch_deterministic=True)).")
    g.add_argument("--kit_args", type=str, default="", help="Command line arguments for Omniverse Kit.")
    g.add_argument("--anim_recording_enabled", action="store_true", help="Record USD animations (no effect here).")
    g.add_argument("--anim_recording_start_time", type=float, default=0, help="Animation recording start time.")
    g.add_argument("--anim_recording_stop_time", type=float, default=10, help="Animation recording stop time.")
    g.add_argument("--max_visible_envs", type=int, default=argparse.SUPPRESS,
                   help="When set, caps the nums of envs shown in the launched visualizers.")


def parse_v3(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """``isaaclab_tasks/utils/preset_cli.py:setup_preset_cli`` (isaaclab 3.0.0): ``-h``/``--help`` *anywhere* in
    argv prints the help and exits 0 (before any parse error); otherwise ``parse_known_args`` -- every unknown
    token is left over for Hydra."""
    if "-h" in argv or "--help" in argv:
        parser.print_help()
        raise SystemExit(0)
    return parser.parse_known_args(argv)


def resolve_seed(seed: int | None) -> int | None:
    """``common.py:resolve_seed`` (isaaclab 3.0.0): -1 draws ``random.randint(0, 10000)``."""
    return random.randint(0, 10000) if seed == -1 else seed


def distributed_sim_device(device_count: int) -> str:
    """``sim_launcher.py:_resolve_distributed_device`` (isaaclab 3.0.0): with ``--distributed`` the simulation runs on
    ``cuda:<LOCAL_RANK + JAX_LOCAL_RANK>``, or ``cuda:0`` when that index is not visible."""
    local_rank = int(os.getenv("LOCAL_RANK", "0")) + int(os.getenv("JAX_LOCAL_RANK", "0"))
    return f"cuda:{local_rank}" if local_rank < device_count else "cuda:0"


def validate_distributed_device(args_cli: argparse.Namespace) -> None:
    """``common.py:validate_distributed_device`` (isaaclab 3.0.0)."""
    device = getattr(args_cli, "device", None)
    if getattr(args_cli, "distributed", False) and device is not None and "cpu" in device:
        raise ValueError(
            "Distributed training is not supported when using CPU device. "
            "Please use GPU device (e.g., --device cuda) for distributed training."
        )


def register_external_tasks(argv: list[str]) -> list[str] | None:
    """``cli_args_rsl_rl.py:register_external_tasks`` (isaaclab 3.0.0): runs ``--external_callback`` (resolved like
    ``string_to_callable(name, separator=".")``) and returns what it returns (the arguments left for Hydra)."""
    import importlib

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--external_callback")
    args, _ = parser.parse_known_args(argv)
    if not args.external_callback:
        return None
    name = args.external_callback
    try:
        mod_name, attr_name = name.rsplit(".", 1)
        callable_object = getattr(importlib.import_module(mod_name), attr_name)
    except (ValueError, ModuleNotFoundError) as e:
        raise ValueError(
            f"Could not resolve the input string '{name}' into callable object."
            " The format of input should be 'module:attribute_name'.\n"
            f"Received the error:\n {e}."
        )
    if not callable(callable_object):
        raise AttributeError(f"The imported object is not callable: '{name}'")
    return callable_object()


def list_intersection(list1: list, list2: list | None) -> list:
    """``isaaclab/utils/string.py:list_intersection`` (isaaclab 3.0.0)."""
    if list2 is None:
        return list1
    set2 = set(list2)
    return [x for x in list1 if x in set2]


# --------------------------------------------------------------------------------------------------- checkpoints


def get_checkpoint_path(
    log_path: str, run_dir: str | None, checkpoint: str = ".*", other_dirs: list[str] | None = None,
    sort_alpha: bool = True,
) -> str:
    """``isaaclab_tasks/utils/parse_cfg.py:get_checkpoint_path`` (commit 03cd804ac3dcbc2e02aee0b96976de70d91c522f).

    ``run_dir`` and ``checkpoint`` are regular expressions matched with ``re.match`` (a *prefix* match); the last
    run in alphabetical order wins, then the last checkpoint with the sort key ``f"{name:0>15}"``. A missing
    ``log_path`` raises ``FileNotFoundError`` from ``os.scandir`` (not caught upstream either).
    """
    if run_dir is None:
        run_dir = ".*"
    run_path = _last_run(log_path, run_dir, other_dirs, sort_alpha, missing_log_path_is_value_error=False)

    model_checkpoints = [f for f in os.listdir(run_path) if re.match(checkpoint, f)]
    if len(model_checkpoints) == 0:
        raise ValueError(f"No checkpoints in the directory: '{run_path}' match '{checkpoint}'.")
    model_checkpoints.sort(key=lambda m: f"{m:0>15}")
    checkpoint_file = model_checkpoints[-1]
    return os.path.join(run_path, checkpoint_file)


def _last_run(log_path: str, run_dir: str, other_dirs: list[str] | None, sort_alpha: bool,
              missing_log_path_is_value_error: bool) -> str:
    """The run-selection half both generations of ``get_checkpoint_path`` share: ``re.match`` on the run names,
    alphabetical (or by mtime), the last wins. A missing ``log_path`` raises FileNotFoundError in 2.x and the
    "No runs present" ValueError in 3.0.0."""
    caught = (IndexError, FileNotFoundError) if missing_log_path_is_value_error else (IndexError,)
    try:
        runs = [
            os.path.join(log_path, run) for run in os.scandir(log_path) if run.is_dir() and re.match(run_dir, run.name)
        ]
        if sort_alpha:
            runs.sort()
        else:
            runs = sorted(runs, key=os.path.getmtime)
        return os.path.join(runs[-1], *other_dirs) if other_dirs is not None else runs[-1]
    except caught:
        raise ValueError(f"No runs present in the directory: '{log_path}' match: '{run_dir}'.")


def retrieve_file_path(path: str) -> str:
    """``isaaclab.utils.assets.retrieve_file_path`` for local files: the absolute path, else FileNotFoundError.

    (Upstream also downloads Nucleus/S3/HTTP paths; the built-in trainer has no network.)
    """
    if os.path.isfile(path):
        return os.path.abspath(path)
    raise FileNotFoundError(f"Unable to find the file: {path}")


def get_checkpoint_path_v3(
    log_path: str, run_dir: str = ".*", checkpoint: str = ".*", other_dirs: list[str] | None = None,
    sort_alpha: bool = True, preferred_checkpoint: str | None = None,
) -> str:
    """``isaaclab_tasks/utils/parse_cfg.py:get_checkpoint_path`` of isaaclab 3.0.0 (differs from the 2.x one above):
    a missing ``log_path`` is a ValueError too (not FileNotFoundError), an optional preferred pattern, and the
    checkpoints are sorted *naturally* (``model_10`` after ``model_9`` whatever the prefix length)."""
    run_path = _last_run(log_path, run_dir, other_dirs, sort_alpha, missing_log_path_is_value_error=True)
    model_checkpoints = []
    if preferred_checkpoint is not None:
        model_checkpoints = [f for f in os.listdir(run_path) if re.match(preferred_checkpoint, f)]
    if len(model_checkpoints) == 0:
        model_checkpoints = [f for f in os.listdir(run_path) if re.match(checkpoint, f)]
    if len(model_checkpoints) == 0:
        patterns = f"'{checkpoint}'"
        if preferred_checkpoint is not None:
            patterns = f"'{preferred_checkpoint}' nor '{checkpoint}'"
        raise ValueError(f"No checkpoints in the directory: '{run_path}' match {patterns}.")
    model_checkpoints.sort(key=lambda m: [int(token) if token.isdigit() else token for token in re.split(r"(\d+)", m)])
    return os.path.join(run_path, model_checkpoints[-1])


RUN_MANIFEST_FILENAME = "run.json"
RUN_MANIFEST_VERSION = 1
CHECKPOINT_SELECTORS = frozenset({"latest", "best"})


def normalize_task_name(task: str) -> str:
    """``common.py:normalize_task_name`` (isaaclab 3.0.0): only the namespace prefix goes. (062dd2ad also dropped a
    ``-Play`` suffix; 3.0.0 does not, so a ``...-Play`` run's manifest names the ``-Play`` task.)"""
    return task.split(":")[-1]


def write_run_manifest(log_dir: str, *, library: str, task: str, metadata: dict[str, str] | None = None) -> None:
    """``common.py:write_run_manifest`` (commit 1e3c0ddb6d18a7cac271347f08e1641e0a94a587; the same in isaaclab 3.0.0):
    creates the run dir."""
    run_dir = Path(log_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = {
        "version": RUN_MANIFEST_VERSION,
        "library": library,
        "task": normalize_task_name(task),
        "created_at": datetime.now(timezone.utc).isoformat(),
        "metadata": metadata or {},
    }
    manifest_path = run_dir / RUN_MANIFEST_FILENAME
    temporary_path = run_dir / f".{RUN_MANIFEST_FILENAME}.{os.getpid()}.tmp"
    temporary_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(temporary_path, manifest_path)


def _natural_sort_key(value: str) -> list[int | str]:
    return [int(token) if token.isdigit() else token for token in re.split(r"(\d+)", value)]


def resolve_checkpoint_selector(
    log_root_path: str, selector: str, *, library: str, task: str, checkpoint_pattern: str,
    other_dirs: list[str] | None = None, preferred_checkpoint_pattern: str | None = None,
    metadata: dict[str, str] | None = None,
) -> str:
    """``common.py:resolve_checkpoint_selector`` (1e3c0ddb; checked against isaaclab 3.0.0, whose ``recursive`` flag
    no train backend sets): ``latest``/``best`` over runs that have a ``run.json``.

    Newest compatible manifested run (by ``created_at``) that has a checkpoint; in it the naturally last
    checkpoint (``best`` = the same unless a preferred pattern exists, which rsl_rl does not pass).
    """
    if selector not in CHECKPOINT_SELECTORS:
        raise ValueError(f"Unknown checkpoint selector '{selector}'. Expected one of: {sorted(CHECKPOINT_SELECTORS)}.")
    log_root = Path(log_root_path)
    expected_task = normalize_task_name(task)
    expected_metadata = metadata or {}
    runs: list[tuple[datetime, Path]] = []
    if log_root.is_dir():
        for run_dir in log_root.iterdir():
            if not run_dir.is_dir():
                continue
            manifest_path = run_dir / RUN_MANIFEST_FILENAME
            try:
                manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
                created_at = datetime.fromisoformat(manifest["created_at"])
            except (FileNotFoundError, KeyError, TypeError, ValueError, json.JSONDecodeError):
                continue
            if manifest.get("version") != RUN_MANIFEST_VERSION:
                continue
            if manifest.get("library") != library or manifest.get("task") != expected_task:
                continue
            manifest_metadata = manifest.get("metadata", {})
            if not isinstance(manifest_metadata, dict):
                continue
            if any(manifest_metadata.get(key) != value for key, value in expected_metadata.items()):
                continue
            runs.append((created_at, run_dir))
    for _, run_dir in sorted(runs, reverse=True):
        checkpoint_dir = run_dir.joinpath(*(other_dirs or []))
        if not checkpoint_dir.is_dir():
            continue
        checkpoints = [
            path for path in checkpoint_dir.iterdir() if path.is_file() and re.fullmatch(checkpoint_pattern, path.name)
        ]
        if not checkpoints:
            continue
        if selector == "best" and preferred_checkpoint_pattern is not None:
            preferred = [p for p in checkpoints if re.fullmatch(preferred_checkpoint_pattern, p.name) is not None]
            if preferred:
                checkpoints = preferred
        checkpoints.sort(key=lambda path: _natural_sort_key(path.name))
        return str(checkpoints[-1].resolve())
    raise ValueError(
        f"No compatible manifested run with a checkpoint was found in '{log_root}'. "
        f"Run training with the current unified training entrypoint before using '--checkpoint {selector}'."
    )


# --------------------------------------------------------------------------------------------------- Hydra


def hydra_task_config(task_name: str, load_cfgs: Callable[[str], tuple[dict, dict]]) -> Callable:
    """``isaaclab_tasks/utils/hydra.py:hydra_task_config`` of Isaac Lab 2.x (commit f6e936b3a89ec1f00e6fd8bf9fce4505af213cee).

    The task's env and agent configs are stored in Hydra's ConfigStore as ``{"env": ..., "agent": ...}`` under the
    task name, and ``hydra.main(config_path=None, config_name=task, version_base="1.3")`` parses ``sys.argv[1:]``
    as overrides -- the real hydra-core machinery, so a stray token such as ``True`` fails with Hydra's
    "Error parsing override" and exit status 1, an unknown key with "Could not override", and Hydra writes its
    ``outputs/<date>/<time>/.hydra`` directory in the working directory like upstream. ``load_cfgs`` stands in for
    ``load_cfg_from_registry`` (plain dicts here, so the agent config is replaced by Hydra's dict like upstream's
    ``isinstance(agent_cfg, dict)`` branch).
    """
    import functools

    try:
        import hydra
        from hydra.core.config_store import ConfigStore
        from omegaconf import DictConfig, OmegaConf
    except ImportError:
        raise ImportError("Hydra is not installed. Please install it by running 'pip install hydra-core'.")

    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            env_cfg, agent_cfg = load_cfgs(task_name)
            ConfigStore.instance().store(name=task_name, node={"env": env_cfg, "agent": agent_cfg})

            @hydra.main(config_path=None, config_name=task_name, version_base="1.3")
            def hydra_main(hydra_env_cfg: DictConfig, env_cfg=env_cfg, agent_cfg=agent_cfg):
                hydra_env_cfg = OmegaConf.to_container(hydra_env_cfg, resolve=True)
                env_cfg = hydra_env_cfg["env"]
                agent_cfg = hydra_env_cfg["agent"]
                func(env_cfg, agent_cfg, *args, **kwargs)

            hydra_main()

        return wrapper

    return decorator


_LITERAL_MAP = {"true": True, "false": False, "none": None, "null": None}


def _parse_val(s: str) -> Any:
    """``isaaclab_tasks/utils/hydra.py:_parse_val`` (commit 00b36b759c7f9a257f2750430bed99de09f01190)."""
    if s.lower() in _LITERAL_MAP:
        return _LITERAL_MAP[s.lower()]
    try:
        return ast.literal_eval(s)
    except (ValueError, SyntaxError):
        return s


def _setattr(obj: Any, path: str, val: Any) -> None:
    """``hydra.py:_setattr`` (00b36b75): nested set; a missing *intermediate* key raises, a new leaf is added."""
    *parts, leaf = path.split(".")
    for p in parts:
        obj = obj[p] if isinstance(obj, dict) else getattr(obj, p)
    if isinstance(obj, dict):
        obj[leaf] = val
    else:
        setattr(obj, leaf, val)


_RL_LIBRARIES = ("rl_games", "rlinf", "rsl_rl", "sb3", "skrl", "torchrl")
# the agent configs every built-in task registers (and no ``default_agent``, no ``PresetCfg``)
BUILTIN_AGENT_ENTRY_POINTS = ("rl_games_cfg_entry_point", "rsl_rl_cfg_entry_point", "skrl_cfg_entry_point")


def load_cfg_from_registry_v3(task_name: str, entry_point_key: str) -> dict:
    """``isaaclab_tasks/utils/parse_cfg.py:load_cfg_from_registry`` (isaaclab 3.0.0) over the built-in tasks.

    An entry point the task does not register (e.g. ``--agent foo``) is a ValueError with upstream's message.
    """
    from isaacd_trainer.tasks import get_task

    task = get_task(task_name.split(":")[-1])
    if entry_point_key == "env_cfg_entry_point":
        return task.make_env_cfg()
    if entry_point_key == "rsl_rl_cfg_entry_point":
        return task.make_agent_cfg()
    if entry_point_key == "skrl_cfg_entry_point":
        return agent_cfgs.skrl_agent_cfg()
    if entry_point_key == "rl_games_cfg_entry_point":
        return agent_cfgs.rl_games_agent_cfg()
    supported = [lib for lib in _RL_LIBRARIES if f"{lib}_cfg_entry_point" in BUILTIN_AGENT_ENTRY_POINTS]
    if entry_point_key in {f"{lib}_cfg_entry_point" for lib in _RL_LIBRARIES}:
        raise ValueError(
            f"Could not find RL configuration '{entry_point_key}' for task '{task_name}'. "
            f"This task supports {', '.join(supported)}; "
            f"use {' or '.join(f'--rl_library {lib}' for lib in supported)}. "
            "If you supplied --agent, remove it to use the selected library's default configuration."
        )
    raise ValueError(
        f"Could not find configuration for the environment: '{task_name}'."
        f"\nPlease check that the gym registry has the entry point: '{entry_point_key}'."
        "\nExisting agent configuration entry points:"
        + "".join(f"\n  |-- {key}" for key in sorted(BUILTIN_AGENT_ENTRY_POINTS))
    )


# isaaclab_tasks/utils/preset_target.py:PresetTarget legacy aliases (isaaclab 3.0.0)
_PRESET_LEGACY_ALIASES = {"newton": "newton_mjwarp", "kamino": "newton_kamino", "ovrtx_renderer": "ovrtx",
                          "isaacsim_rtx_renderer": "isaacsim_rtx"}


def _reject_presets(global_presets: list[str], requested: dict[str, set[str]]) -> None:
    """What ``hydra.py:register_task`` (isaaclab 3.0.0) does with ``presets=``/``physics=``/``renderer=`` names for
    a task that declares no ``PresetCfg`` (every built-in task): a ``presets=`` name is an unknown preset, a typed
    selector name matches no preset of its type; both ValueError. Empty values select nothing and pass."""
    unknown = set(global_presets) - {name for names in requested.values() for name in names}
    if unknown:
        lines = [f"Unknown preset(s): {', '.join(sorted(unknown))}"]
        for legacy in sorted(name for name in unknown if name in _PRESET_LEGACY_ALIASES):
            replacement = _PRESET_LEGACY_ALIASES[legacy]
            lines.append(f"  '{legacy}' was renamed to '{replacement}'; this task does not declare '{replacement}' "
                         "either.")
        lines += ["", "Available presets (grouped by affected paths):", ""]
        raise ValueError("\n".join(lines))
    missing = sorted((label, name) for label, names in requested.items() for name in names)
    if missing:
        clauses = ", ".join(f"{label}={name}" for label, name in missing)
        raise ValueError(
            f"Typed preset selector(s) {clauses} did not match a selectable preset of that type for this task. "
            "Choose a declared preset, or remove the selector(s) to use the task's registered default configuration."
        )


def resolve_task_config_v3(task_name: str, agent_entry: str | None,
                           overrides: list[str] | None = None) -> tuple[dict, dict]:
    """``hydra.py:resolve_task_config`` + ``register_task`` (isaaclab 3.0.0; first written from 00b36b75).

    The agent config is the one ``agent_entry`` (``--agent``) names (``load_cfg_from_registry_v3``: an unknown
    entry point is a ValueError, exit 1). ``presets=``/``physics=``/``renderer=`` tokens (also with leading dashes)
    are preset selectors, never Hydra's (see ``_reject_presets``). ``env.*``/``agent.*`` ``key=value`` tokens are
    set directly (``_parse_val``/``_setattr``, no Hydra); every other token (anything without ``=``, e.g. a stray
    ``True`` or ``--resume``, and ``++``/``+`` keys) goes to the real Hydra, which rejects what it cannot apply.
    Hydra only runs when such tokens exist.
    """
    task = task_name.split(":")[-1]
    env_cfg = load_cfg_from_registry_v3(task, "env_cfg_entry_point")
    agent_cfg = load_cfg_from_registry_v3(task, agent_entry) if agent_entry else None
    hydra_args: list[str] = []
    override_items: list[tuple[str, str, str]] = []
    global_presets: list[str] = []
    requested: dict[str, set[str]] = {}
    for arg in sys.argv[1:] if overrides is None else overrides:
        if "=" not in arg:
            hydra_args.append(arg)
            continue
        key, val = arg.split("=", 1)
        token = key.lstrip("-")
        if token == "presets":
            global_presets.extend(v.strip() for v in val.split(",") if v.strip())
        elif token in ("physics", "renderer"):
            for name in (v.strip() for v in val.split(",") if v.strip()):
                global_presets.append(name)
                requested.setdefault(token, set()).add(name)
        else:
            override_items.append((key, val, arg))
    _reject_presets(global_presets, requested)
    cfgs = {"env": env_cfg, "agent": agent_cfg}
    for key, val, arg in override_items:
        if key.startswith(("env.", "agent.")) and not key.endswith("+"):
            sec, path = key.split(".", 1)
            _setattr(cfgs[sec], path, _parse_val(val))
        else:
            hydra_args.append(arg)
    if not hydra_args:
        return env_cfg, agent_cfg

    import hydra
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    ConfigStore.instance().store(name=task, node=OmegaConf.create({"env": env_cfg, "agent": agent_cfg}))
    resolved: dict = {}
    original_argv, sys.argv = sys.argv, [sys.argv[0]] + hydra_args

    @hydra.main(config_path=None, config_name=task, version_base="1.3")
    def hydra_main(hydra_cfg):
        hydra_cfg = OmegaConf.to_container(hydra_cfg, resolve=True)
        resolved.update(env_cfg=hydra_cfg["env"], agent_cfg=hydra_cfg["agent"])

    try:
        hydra_main()
    finally:
        sys.argv = original_argv
    return resolved["env_cfg"], resolved["agent_cfg"]
