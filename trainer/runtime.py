"""What stands in for Isaac Sim in the built-in trainer: the env, the device, the config dump, fault injection.

Imports torch and rsl_rl. The training itself is rsl_rl's unchanged ``OnPolicyRunner`` (or ``DistillationRunner``),
constructed, loaded and run exactly like Isaac Lab's train scripts do.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import pickle
import random
import signal
import sys
import time
from typing import Any

# rsl_rl's logger imports GitPython, which refuses to import without a git executable unless told to be quiet.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import torch  # noqa: E402

from isaacd_trainer.tasks import get_task  # noqa: E402


def load_cfgs(task_name: str) -> tuple[dict, dict]:
    """Stand-in for ``load_cfg_from_registry(task, "env_cfg_entry_point" / "rsl_rl_cfg_entry_point")``."""
    task = get_task(task_name)
    return task.make_env_cfg(), task.make_agent_cfg()


def default_device(requested: str | None) -> str:
    """AppLauncher's ``--device`` (upstream default ``cuda:0``; here ``cuda:0`` only when CUDA is available)."""
    if requested:
        return "cuda:0" if requested == "cuda" else requested
    return "cuda:0" if torch.cuda.is_available() else "cpu"


def seed_everything(seed: int | None) -> None:
    """What Isaac Lab's env constructor does with ``env_cfg.seed`` (``configure_seed``)."""
    if seed is None:
        return
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:
        pass
    torch.manual_seed(seed)


def configure_seed(seed: int | None, torch_deterministic: bool = False) -> int:
    """``isaaclab/utils/seed.py:configure_seed`` (isaaclab 3.0.0) without warp; the 3.x backends call it with
    ``torch_deterministic=True`` after building the runner when ``--deterministic`` is given."""
    if seed is None or seed == -1:
        seed = 42 if torch_deterministic else random.randint(0, 10000)
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    torch.manual_seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    torch.cuda.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    if torch_deterministic:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        torch.use_deterministic_algorithms(True)
    else:
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.deterministic = False
    return seed


def distributed_sim_device() -> str:
    """The simulation device of a ``--distributed`` 3.x run (``sim_launcher._resolve_distributed_device``,
    isaaclab 3.0.0): ``cuda:<LOCAL_RANK + JAX_LOCAL_RANK>`` if visible, else ``cuda:0``."""
    from isaacd_trainer.upstream import distributed_sim_device as _device

    return _device(torch.cuda.device_count())


def check_frontend(frontend: str) -> None:
    """``common.py:create_isaaclab_env`` (isaaclab 3.0.0) builds ``--frontend warp`` envs with isaaclab_experimental's
    ``WarpFrontend``; the built-in tasks have no Warp runtime, so that is an error here, never a silent torch run."""
    if frontend != "torch":
        raise ValueError(f"--frontend {frontend!r} is not built in: the built-in tasks run on the torch frontend only.")


def make_env(task_name: str, env_cfg: dict, num_envs: int | None, device: str, seed: int | None) -> Any:
    """``gym.make(task, cfg=env_cfg)`` + ``RslRlVecEnvWrapper``: the built-in env already is an rsl_rl ``VecEnv``."""
    task = get_task(task_name)
    seed_everything(seed)
    mod_name, cls_name = task.env_entry_point.split(":")
    env_class = getattr(importlib.import_module(mod_name), cls_name)
    return env_class(num_envs=num_envs or task.default_num_envs, device=device, cfg=env_cfg, seed=seed)


def make_runner(env: Any, agent_cfg: dict, log_dir: str | None, device: str) -> Any:
    from rsl_rl.runners import DistillationRunner, OnPolicyRunner

    if agent_cfg["class_name"] == "OnPolicyRunner":
        runner = OnPolicyRunner(env, agent_cfg, log_dir=log_dir, device=device)
    elif agent_cfg["class_name"] == "DistillationRunner":
        runner = DistillationRunner(env, agent_cfg, log_dir=log_dir, device=device)
    else:
        raise ValueError(f"Unsupported runner class: {agent_cfg['class_name']}")
    # Upstream calls runner.add_git_repo_to_log(__file__), and rsl_rl logs `git diff` of its own install location
    # (for a venv inside a checkout: that whole checkout). Nothing of ours is worth that; git/ stays empty.
    runner.logger.git_status_repos = []
    return runner


def dump_params(log_dir: str, env_cfg: dict, agent_cfg: dict, *, pickles: bool) -> None:
    """``dump_yaml(params/env.yaml)`` etc.: this is what creates the new run directory on disk in 2.x."""
    import yaml

    params = os.path.join(log_dir, "params")
    os.makedirs(params, exist_ok=True)
    for name, cfg in (("env", env_cfg), ("agent", agent_cfg)):
        with open(os.path.join(params, f"{name}.yaml"), "w", encoding="utf-8") as f:
            yaml.safe_dump(cfg, f, default_flow_style=False, sort_keys=False)
        if pickles:
            with open(os.path.join(params, f"{name}.pkl"), "wb") as f:
                pickle.dump(cfg, f)


class FaultInjection:
    """isaacd's fault flags, run from the env's ``pre_step_hook`` (before every environment step).

    The iteration being run is ``start + steps // num_steps_per_env``, where ``start`` is the runner's
    ``current_learning_iteration`` when ``learn`` starts (the loaded checkpoint's ``iter`` on resume).
    """

    def __init__(self, args: argparse.Namespace, env: Any, runner: Any, num_steps_per_env: int, resumed: bool):
        inject = not (args.fault_once and resumed)
        self.inf_reward_after = args.fault_inf_reward_after if inject else None
        self.hang_after = args.fault_hang_after if inject else None
        self.exit_after = args.fault_exit_after if inject else None
        self.reward_scale_after = args.fault_reward_scale_after if inject else None
        self.oom_after = args.fault_cuda_oom_after_iterations if inject else None
        fits = args.fault_cuda_oom_above_envs
        if fits is not None and env.num_envs > fits:  # the start-up's allocations do not fit: before iteration 0
            print(f"isaacd-train: FAULT INJECTION: CUDA out of memory at start-up ({env.num_envs} environments, "
                  f"the GPU fits {fits})", file=sys.stderr, flush=True)
            raise torch.OutOfMemoryError(cuda_oom_message(env.num_envs))
        self.step_delay = args.step_delay
        self.env = env
        self.runner = runner
        self.num_steps_per_env = max(int(num_steps_per_env), 1)
        self.steps = 0
        self.start: int | None = None
        if any(x is not None for x in (self.inf_reward_after, self.hang_after, self.exit_after,
                                       self.reward_scale_after, self.oom_after)) or self.step_delay > 0:
            env.pre_step_hook = self.before_step

    def _flush(self) -> None:
        for w in (getattr(getattr(self.runner, "logger", None), "writer", None), getattr(self.runner, "writer", None)):
            if w is not None and hasattr(w, "flush"):
                try:
                    w.flush()
                except Exception:
                    pass
        sys.stdout.flush()
        sys.stderr.flush()

    def before_step(self) -> None:
        if self.start is None:
            self.start = int(self.runner.current_learning_iteration)
        ran = self.steps // self.num_steps_per_env  # iterations this process has run
        it = self.start + ran
        self.steps += 1
        if self.oom_after is not None and ran >= self.oom_after:
            self._flush()
            print(f"isaacd-train: FAULT INJECTION: CUDA out of memory at iteration {it}, after {ran} iterations",
                  file=sys.stderr, flush=True)
            raise torch.OutOfMemoryError(cuda_oom_message(getattr(self.env, "num_envs", 1)))
        if self.exit_after is not None and it >= self.exit_after[0]:
            self._flush()
            print(f"isaacd-train: FAULT INJECTION: exiting with status {self.exit_after[1]} at iteration {it}",
                  file=sys.stderr, flush=True)
            os._exit(self.exit_after[1])
        if self.hang_after is not None and it >= self.hang_after:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self._flush()
            print(f"isaacd-train: FAULT INJECTION: hanging at iteration {it} (pid {os.getpid()}); only SIGKILL "
                  "ends this process", file=sys.stderr, flush=True)
            while True:
                time.sleep(3600)
        if self.inf_reward_after is not None and it >= self.inf_reward_after:
            if getattr(self.env, "reward_override", None) is None:
                print(f"isaacd-train: FAULT INJECTION: rewards are +inf from iteration {it} on", file=sys.stderr,
                      flush=True)
            self.env.reward_override = math.inf
        if self.reward_scale_after is not None and it >= self.reward_scale_after[0]:
            if getattr(self.env, "reward_scale", 1.0) == 1.0:
                print(f"isaacd-train: FAULT INJECTION: rewards x{self.reward_scale_after[1]:g} from iteration {it} "
                      "on", file=sys.stderr, flush=True)
            self.env.reward_scale = self.reward_scale_after[1]
        if self.step_delay > 0.0:
            time.sleep(self.step_delay)


def _format_size(size: int) -> str:
    """The CUDA caching allocator's ``format_size``: two decimals, binary units, "bytes" up to 1024."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= 1048576:
        return f"{size / 1024.0:.2f} KiB"
    if size <= 1073741824:
        return f"{size / 1048576.0:.2f} MiB"
    return f"{size / 1073741824.0:.2f} GiB"


def cuda_oom_message(num_envs: int) -> str:
    """The text torch's caching allocator raises torch.OutOfMemoryError with (pytorch/pytorch
    c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::malloc, commit 001074d2), on a full 80 GB GPU whose
    environments take 150 MiB each; a CPU build of torch has no CUDA allocator to raise it."""
    mib, gib = 1048576, 1073741824
    total, free, tried = 80 * gib, 18 * mib, 2 * num_envs * mib
    in_use = min(num_envs * 150 * mib, total - free)
    neighbour = total - free - in_use  # another process on the GPU holds the rest (NVML, reportProcessMemoryInfo)
    others = f"Process 4242 has {_format_size(neighbour)} memory in use. " if neighbour > 0 else ""
    return (f"CUDA out of memory. Tried to allocate {_format_size(tried)}. GPU 0 has a total capacity of "
            f"{_format_size(total)} of which {_format_size(free)} is free. {others}Including non-PyTorch memory, "
            f"this process has {_format_size(in_use)} memory in use. Of the allocated memory "
            f"{_format_size(in_use - 512 * mib)} is allocated by PyTorch, and {_format_size(64 * mib)} is reserved "
            "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
            "Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
