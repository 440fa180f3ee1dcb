"""Torch-free preparation of a training run: config, device request, seed, paths and the resume checkpoint.

Everything that can be rejected without torch is rejected here (exit 2 / 3 within a fraction of a second, no run
directory created): unknown override keys, bad values, distributed-on-CPU, a missing run or checkpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from isaacd_trainer.tasks import TaskSpec, get_task


class UsageError(Exception):
    """Bad configuration or device; exit 2."""


class ResumeError(Exception):
    """The checkpoint to resume from is missing, unreadable or incompatible; exit 3."""


@dataclass
class Plan:
    task: TaskSpec
    env_cfg: dict
    agent_cfg: dict
    num_envs: int
    device_request: str | None  # validated string (cpu / cuda / cuda:N) or None for the default
    distributed: bool  # --distributed or WORLD_SIZE > 1
    world_size: int
    local_rank: int
    global_rank: int
    seed: int
    log_root_path: str  # absolute <log_root>/rsl_rl/<experiment_name>
    resume_path: str | None

    @property
    def is_main(self) -> bool:
        return self.global_rank == 0


def apply_override(cfg: dict, root: str, keys: list[str], value: Any) -> None:
    node = cfg
    for i, k in enumerate(keys):
        if not isinstance(node, dict) or k not in node:
            where = ".".join([root, *keys[:i]])
            avail = sorted(node) if isinstance(node, dict) else []
            raise UsageError(f"unknown override key {root}.{'.'.join(keys)} ({where} has keys: {', '.join(avail)})")
        if i == len(keys) - 1:
            old = node[k]
            if isinstance(old, dict):
                raise UsageError(f"override {root}.{'.'.join(keys)} must name a leaf, not a section")
            if isinstance(old, float) and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            node[k] = value
        else:
            node = node[k]


def to_yaml(obj: Any, indent: int = 0) -> str:
    """Minimal YAML for nested dicts of scalars/lists (keeps PyYAML out of the trainer's dependencies)."""

    def scalar(v: Any) -> str:
        if v is None:
            return "null"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            if math.isnan(v):
                return ".nan"
            if math.isinf(v):
                return ".inf" if v > 0 else "-.inf"
            return repr(v)
        if isinstance(v, int):
            return str(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(scalar(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(str(k))}: {scalar(x)}" for k, x in v.items()) + "}"
        return json.dumps(str(v))

    lines = []
    pad = " " * indent
    for k, v in obj.items():
        if isinstance(v, dict) and v:
            lines.append(f"{pad}{k}:")
            lines.append(to_yaml(v, indent + 2).rstrip("\n"))
        else:
            lines.append(f"{pad}{k}: {scalar(v)}")
    return "\n".join(lines) + "\n"


def check_device_request(requested: str | None, distributed: bool) -> str | None:
    if requested is None:
        if distributed:
            return "cuda"
        return None
    device = requested.strip().lower()
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise UsageError(f"invalid --device {requested!r}: expected cpu, cuda or cuda:N")
    if distributed and device == "cpu":
        raise UsageError(
            "distributed training needs CUDA: rsl_rl 5.x initialises torch.distributed with the NCCL backend and "
            "requires device == cuda:<LOCAL_RANK> (no CPU/gloo multi-process mode)"
        )
    return device


_REGEX_META = re.compile(r"[*+?\[\](){}|^$\\]")


def resolve_checkpoint_path(log_root_path: str, load_run: str, checkpoint: str) -> str:
    """Isaac Lab's ``get_checkpoint_path`` semantics, but literal names (and absolute paths) are taken as such.

    ``load_run``/``checkpoint`` naming an existing directory/file are used as is; a name without regex
    metacharacters that does not exist is an error naming the path; otherwise they are regular expressions
    (``re.match``) and the newest match wins (runs sorted alphabetically, checkpoints by ``f"{name:0>15}"``).
    """
    if os.path.isabs(load_run) or os.path.isdir(os.path.join(log_root_path, load_run)):
        run_path = load_run if os.path.isabs(load_run) else os.path.join(log_root_path, load_run)
        if not os.path.isdir(run_path):
            raise ResumeError(f"run directory to resume from does not exist: {run_path}")
    else:
        if not _REGEX_META.search(load_run):
            raise ResumeError(f"run directory to resume from does not exist: {os.path.join(log_root_path, load_run)}")
        if not os.path.isdir(log_root_path):
            raise ResumeError(f"nothing to resume: experiment directory does not exist: {log_root_path}")
        runs = sorted(e.path for e in os.scandir(log_root_path) if e.is_dir() and re.match(load_run, e.name))
        if not runs:
            raise ResumeError(f"no runs present in the directory: '{log_root_path}' match: '{load_run}'")
        run_path = runs[-1]
    literal = checkpoint if os.path.isabs(checkpoint) else os.path.join(run_path, checkpoint)
    if os.path.isfile(literal):
        return literal
    if not _REGEX_META.search(checkpoint):
        raise ResumeError(f"checkpoint file not found: {literal}")
    found = [f for f in os.listdir(run_path) if re.match(checkpoint, f) and os.path.isfile(os.path.join(run_path, f))]
    if not found:
        raise ResumeError(f"no checkpoints in the directory: '{run_path}' match '{checkpoint}' (looked for {literal})")
    found.sort(key=lambda m: f"{m:0>15}")
    return os.path.join(run_path, found[-1])


def make_run_dir(log_root_path: str, run_name: str | None) -> str:
    """Create ``<YYYY-mm-dd_HH-MM-SS>[_<run_name>]``; if the name is taken (same second), wait for the next one."""
    os.makedirs(log_root_path, exist_ok=True)
    deadline = time.monotonic() + 5.0
    while True:
        name = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        if run_name:
            name += f"_{run_name}"
        path = os.path.join(log_root_path, name)
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name, str(default))
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"environment variable {name}={raw!r} is not an integer") from None


def make_plan(args: argparse.Namespace, overrides: list[tuple[str, list[str], Any]]) -> Plan:
    task = get_task(args.task)
    env_cfg = task.make_env_cfg()
    agent_cfg = task.make_agent_cfg()
    for root, keys, value in overrides:
        apply_override(agent_cfg if root == "agent" else env_cfg, root, keys, value)

    # CLI flags win over overrides (Isaac Lab applies update_rsl_rl_cfg after Hydra)
    for flag, key in (("seed", "seed"), ("resume", "resume"), ("load_run", "load_run"),
                      ("checkpoint", "load_checkpoint"), ("run_name", "run_name"),
                      ("experiment_name", "experiment_name"), ("logger", "logger"),
                      ("max_iterations", "max_iterations"), ("save_interval", "save_interval"),
                      ("num_steps_per_env", "num_steps_per_env")):
        value = getattr(args, flag, None)
        if value is not None:
            agent_cfg[key] = value
    if args.learning_rate is not None:
        agent_cfg["algorithm"]["learning_rate"] = args.learning_rate

    if agent_cfg.get("logger", "tensorboard") != "tensorboard":
        raise UsageError(f"logger {agent_cfg['logger']!r} is not supported; only tensorboard")
    for key, low in (("max_iterations", 0), ("save_interval", 1), ("num_steps_per_env", 1)):
        v = agent_cfg[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise UsageError(f"agent.{key} must be an integer >= {low}, got {v!r}")
    if not isinstance(agent_cfg["experiment_name"], str) or not agent_cfg["experiment_name"]:
        raise UsageError("experiment_name must be a non-empty string")
    for key in ("experiment_name", "run_name"):
        if agent_cfg[key] and ("/" in str(agent_cfg[key]) or str(agent_cfg[key]) in (".", "..")):
            raise UsageError(f"{key} must not contain '/': {agent_cfg[key]!r}")
    seed = agent_cfg["seed"]
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise UsageError(f"seed must be an integer, got {seed!r}")
    num_envs = args.num_envs if args.num_envs is not None else task.default_num_envs

    world_size = _int_env("WORLD_SIZE", 1)
    local_rank = _int_env("LOCAL_RANK", 0)
    global_rank = _int_env("RANK", 0)
    distributed = bool(args.distributed) or world_size > 1
    device_request = check_device_request(args.device, distributed)

    # Isaac Lab: seed -1 draws one; with several processes every rank gets its own
    if seed is None or seed == -1:
        seed = random.randint(0, 10000)
    if world_size > 1:
        seed += global_rank
    agent_cfg["seed"] = seed

    log_root_path = os.path.abspath(os.path.join(args.log_root, "rsl_rl", agent_cfg["experiment_name"]))
    resume_path = None
    if agent_cfg["resume"]:
        resume_path = resolve_checkpoint_path(log_root_path, str(agent_cfg["load_run"]),
                                              str(agent_cfg["load_checkpoint"]))
    return Plan(
        task=task, env_cfg=env_cfg, agent_cfg=agent_cfg, num_envs=num_envs, device_request=device_request,
        distributed=distributed, world_size=world_size, local_rank=local_rank, global_rank=global_rank, seed=seed,
        log_root_path=log_root_path, resume_path=resume_path,
    )
