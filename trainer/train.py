"""Training driver behind ``isaacd-train`` (imports torch and rsl_rl).

Mirrors Isaac Lab's rsl_rl ``train.py``: build the agent config (task defaults, then ``agent.*``/``env.*``
overrides, then CLI flags), resolve the resume checkpoint *before* creating the new run directory, create
``<log_root>/rsl_rl/<experiment>/<YYYY-mm-dd_HH-MM-SS>[_<run_name>]``, construct ``rsl_rl.runners.OnPolicyRunner``
(the checkpoints and TensorBoard events are rsl_rl's own), ``runner.load`` on resume, dump ``params/*.yaml``, and
``runner.learn(max_iterations, init_at_random_ep_len=True)``.

On top of that (see :class:`TrainingControl`):

* ``ISAACD_RUN_DIR=<abs run dir>`` is the first stdout line; ``ISAACD_DONE ...`` / ``ISAACD_STOPPED ...`` the last.
* SIGINT/SIGTERM request a graceful stop, honoured at the next safe point: before the next environment step or
  right after an iteration's log (never inside the PPO update or a checkpoint write). The weights after the last
  completed iteration ``N`` are saved as ``model_N.pt`` through ``runner.save`` and the process exits 0. A second
  signal exits at once with 128+signum.
* Checkpoints are written to a hidden temp file and renamed, so ``model_*.pt`` is never a truncated file.
* TensorBoard events are flushed after every iteration (rsl_rl's writer only flushes every 10 s).
* Resumed runs number iterations from the checkpoint's ``iter`` + 1.
* Fault injection for supervisor tests (``--fault_*``, ``--step_delay``).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import sys
import time
import traceback
from typing import Any

# rsl_rl's logger imports GitPython, which refuses to import without a git executable unless told to be quiet.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import torch  # noqa: E402
from rsl_rl.runners import OnPolicyRunner  # noqa: E402

from isaacd_trainer.cli import EXIT_CRASH, EXIT_OK, EXIT_RESUME, EXIT_USAGE  # noqa: E402
from isaacd_trainer.plan import Plan, ResumeError, UsageError, make_run_dir, to_yaml  # noqa: E402
from isaacd_trainer.tasks import TaskSpec  # noqa: E402

RUN_DIR_MARKER = "ISAACD_RUN_DIR="


class StopTraining(BaseException):
    """Raised at a safe point to leave rsl_rl's learn loop after a stop request (not an error)."""


def _err(msg: str) -> None:
    print(f"isaacd-train: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ control / faults
class TrainingControl:
    """Graceful stop, fault injection and slow-down, hooked into the env step and rsl_rl's per-iteration log."""

    def __init__(
        self,
        *,
        step_delay: float = 0.0,
        fault_inf_reward_after: int | None = None,
        fault_hang_after: int | None = None,
        fault_exit_after: tuple[int, int] | None = None,
        fault_reward_scale_after: tuple[int, float] | None = None,
        distributed: bool = False,
        device: str = "cpu",
    ) -> None:
        self.step_delay = step_delay
        self.fault_inf_reward_after = fault_inf_reward_after
        self.fault_hang_after = fault_hang_after
        self.fault_exit_after = fault_exit_after
        self.fault_reward_scale_after = fault_reward_scale_after
        self.distributed = distributed
        self.device = device
        self.iteration = 0  # number of the iteration currently running
        self.stop_signal: int | None = None
        self.hanging = False
        self.runner: OnPolicyRunner | None = None

    # signals
    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.hanging:
            return
        name = signal.Signals(signum).name
        if self.stop_signal is None:
            self.stop_signal = signum
            _err(f"received {name}: stopping at the next safe point and saving a checkpoint (again to abort)")
        else:
            _err(f"received {name} again: exiting immediately without a checkpoint")
            os._exit(128 + signum)

    def _writer(self):
        return getattr(getattr(self.runner, "logger", None), "writer", None)

    def flush(self) -> None:
        w = self._writer()
        if w is not None and hasattr(w, "flush"):
            w.flush()
        sys.stdout.flush()
        sys.stderr.flush()

    # hooks
    def before_env_step(self, env: Any) -> None:
        """Called by the env at the start of every ``step`` (inside rsl_rl's rollout, never inside the update)."""
        if self.stop_signal is not None and not self.distributed:
            raise StopTraining
        it = self.iteration
        if self.fault_exit_after is not None and it >= self.fault_exit_after[0]:
            code = self.fault_exit_after[1]
            self.flush()
            _err(f"FAULT INJECTION: exiting with status {code} at iteration {it}")
            os._exit(code)
        if self.fault_hang_after is not None and it >= self.fault_hang_after:
            self.hanging = True
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self.flush()
            _err(f"FAULT INJECTION: hanging at iteration {it} (pid {os.getpid()}); only SIGKILL ends this process")
            while True:
                time.sleep(3600)
        if self.fault_inf_reward_after is not None and it >= self.fault_inf_reward_after:
            if getattr(env, "reward_override", None) is None:
                _err(f"FAULT INJECTION: rewards are +inf from iteration {it} on")
            env.reward_override = math.inf
        if self.fault_reward_scale_after is not None and it >= self.fault_reward_scale_after[0]:
            if getattr(env, "reward_scale", 1.0) == 1.0:
                _err(f"FAULT INJECTION: rewards x{self.fault_reward_scale_after[1]:g} from iteration {it} on")
            env.reward_scale = self.fault_reward_scale_after[1]
        if self.step_delay > 0.0:
            time.sleep(self.step_delay)
            if self.stop_signal is not None and not self.distributed:
                raise StopTraining

    def after_iteration(self, it: int) -> None:
        """Called right after rsl_rl logged iteration ``it`` (update done, before its periodic checkpoint)."""
        self.iteration = it + 1
        self.flush()
        stop = self.stop_signal is not None
        if self.distributed and torch.distributed.is_available() and torch.distributed.is_initialized():
            # every rank must leave at the same iteration, or the others block in the next all-reduce
            flag = torch.tensor([1.0 if stop else 0.0], device=self.device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            stop = bool(flag.item() > 0.0)
        if stop:
            raise StopTraining


class IsaacdRunner(OnPolicyRunner):
    """rsl_rl's ``OnPolicyRunner`` plus the isaacd hooks; training itself is rsl_rl's unchanged ``learn``."""

    def __init__(self, env: Any, train_cfg: dict, log_dir: str | None, device: str, control: TrainingControl):
        super().__init__(env, train_cfg, log_dir=log_dir, device=device)
        self.control = control
        control.runner = self
        self.last_completed_iteration: int | None = None
        self._last_saved: tuple[str, int] | None = None
        env.pre_step_hook = lambda: control.before_env_step(env)
        # rsl_rl would store `git diff` of the repository around its own install location (for a venv inside a
        # checkout: that whole checkout). Nothing of ours is worth that; the git/ folder stays, empty.
        self.logger.git_status_repos = []
        original_log = self.logger.log

        def log(*args: Any, **kwargs: Any) -> None:
            original_log(*args, **kwargs)
            it = int(kwargs["it"] if "it" in kwargs else args[0])
            self.last_completed_iteration = it
            control.after_iteration(it)

        self.logger.log = log  # type: ignore[method-assign]

    def save(self, path: str, infos: dict | None = None) -> None:
        """``OnPolicyRunner.save`` into a hidden temp file, then an atomic rename; skips an identical re-save."""
        key = (os.path.abspath(path), int(self.current_learning_iteration))
        if key == self._last_saved:  # learn() ends by saving the iteration that its loop just saved
            return
        head, tail = os.path.split(path)
        tmp = os.path.join(head, f".{tail}.tmp")
        super().save(tmp, infos)
        os.replace(tmp, path)
        self._last_saved = key


# ------------------------------------------------------------------------------------------------ helpers
def resolve_device(requested: str | None, distributed: bool, local_rank: int) -> str:
    """Final device string: default cuda:0 if available else cpu; cuda:<LOCAL_RANK> in multi-process runs."""
    device = requested if requested else ("cuda:0" if torch.cuda.is_available() else "cpu")
    if distributed:
        device = f"cuda:{local_rank}"
    elif device == "cuda":
        device = "cuda:0"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: CUDA is not available (torch {torch.__version__})")
        idx = int(device.split(":")[1])
        if idx >= torch.cuda.device_count():
            raise UsageError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) visible")
    return device


def validate_checkpoint(path: str) -> int:
    """Load ``path`` on the CPU and check it is an rsl_rl >= 4 checkpoint; return its ``iter``."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # truncated file, not a torch file, permissions ...
        raise ResumeError(f"cannot read checkpoint {path}: {type(e).__name__}: {e}") from e
    if not isinstance(ckpt, dict):
        raise ResumeError(f"checkpoint {path} is not an rsl_rl checkpoint (a {type(ckpt).__name__}, not a dict)")
    if "actor_state_dict" not in ckpt:
        if "model_state_dict" in ckpt:
            raise ResumeError(f"checkpoint {path} was written by rsl_rl < 4 (model_state_dict); rsl_rl 5.x cannot load it")
        raise ResumeError(f"checkpoint {path} is not an rsl_rl checkpoint (keys: {sorted(ckpt)})")
    try:
        return int(ckpt.get("iter", 0))
    except (TypeError, ValueError) as e:
        raise ResumeError(f"checkpoint {path} has an invalid 'iter' entry: {ckpt.get('iter')!r}") from e


def _load_env_class(task: TaskSpec):
    import importlib

    mod_name, cls_name = task.env_entry_point.split(":")
    return getattr(importlib.import_module(mod_name), cls_name)


# ------------------------------------------------------------------------------------------------ main
def run(args: argparse.Namespace, plan: Plan) -> int:
    try:
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    except Exception:
        pass
    try:
        return _run(args, plan)
    except UsageError as e:
        _err(f"error: {e}")
        return EXIT_USAGE
    except ResumeError as e:
        _err(f"error: cannot resume: {e}")
        return EXIT_RESUME


def _run(args: argparse.Namespace, plan: Plan) -> int:
    task, env_cfg, agent_cfg = plan.task, plan.env_cfg, plan.agent_cfg
    device = resolve_device(plan.device_request, plan.distributed, plan.local_rank)
    agent_cfg["device"] = device
    if not plan.is_main:
        # keep the first stdout line (ISAACD_RUN_DIR=...) rank 0's; other ranks' chatter goes to stderr
        sys.stdout = sys.stderr

    seed = plan.seed
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:
        pass
    torch.manual_seed(seed)

    # the resume checkpoint was resolved before the new run directory exists (like Isaac Lab); check it loads
    resume_path = plan.resume_path
    resume_iter = validate_checkpoint(resume_path) if resume_path is not None else None

    log_dir = make_run_dir(plan.log_root_path, agent_cfg["run_name"]) if plan.is_main else None
    if plan.is_main:
        print(f"{RUN_DIR_MARKER}{log_dir}", flush=True)
        print(f"[INFO] Logging experiment in directory: {plan.log_root_path}")

    # environment and runner
    env_class = _load_env_class(task)
    try:
        env = env_class(num_envs=plan.num_envs, device=device, cfg=env_cfg, seed=seed)
    except ValueError as e:
        raise UsageError(f"invalid environment config: {e}") from e
    inject = not (args.fault_once and plan.resume_path is not None)  # --fault_once: fresh runs only
    control = TrainingControl(
        step_delay=args.step_delay,
        fault_inf_reward_after=args.fault_inf_reward_after if inject else None,
        fault_hang_after=args.fault_hang_after if inject else None,
        fault_exit_after=args.fault_exit_after if inject else None,
        fault_reward_scale_after=args.fault_reward_scale_after if inject else None,
        distributed=plan.world_size > 1,
        device=device,
    )
    from isaacd_trainer.cli import PENDING_SIGNALS

    control.install_signal_handlers()
    if PENDING_SIGNALS and control.stop_signal is None:
        control.stop_signal = PENDING_SIGNALS[0]
        _err(f"{signal.Signals(control.stop_signal).name} received during start-up: stopping before training")
    runner = IsaacdRunner(env, agent_cfg, log_dir=log_dir, device=device, control=control)

    if resume_path is not None:
        print(f"[INFO]: Loading model checkpoint from: {resume_path}")
        try:
            runner.load(resume_path, map_location=device)
        except Exception as e:
            raise ResumeError(f"checkpoint {resume_path} does not fit task {task.name}: {type(e).__name__}: {e}") from e
        # model_N.pt holds the weights after iteration N: continue with N+1 (rsl_rl alone would re-use N)
        runner.current_learning_iteration = int(resume_iter) + 1
    control.iteration = runner.current_learning_iteration

    if log_dir is not None:
        params = os.path.join(log_dir, "params")
        os.makedirs(params, exist_ok=True)
        with open(os.path.join(params, "env.yaml"), "w", encoding="utf-8") as f:
            f.write(to_yaml(dict(env_cfg, task=task.name, num_envs=plan.num_envs, seed=seed, device=device)))
        with open(os.path.join(params, "agent.yaml"), "w", encoding="utf-8") as f:
            f.write(to_yaml(agent_cfg))
        with open(os.path.join(params, "isaacd.yaml"), "w", encoding="utf-8") as f:
            f.write(to_yaml({
                "argv": list(sys.argv),
                "resume_from": resume_path,
                "resume_iteration": resume_iter,
                "first_iteration": runner.current_learning_iteration,
                "max_iterations": agent_cfg["max_iterations"],
                "world_size": plan.world_size,
                "pid": os.getpid(),
            }))

    max_iterations = int(agent_cfg["max_iterations"])
    if max_iterations == 0 and resume_iter is not None:
        runner.current_learning_iteration = resume_iter  # learn(0) then just saves the loaded weights as model_N.pt

    def close_writer() -> None:
        w = runner.logger.writer
        if w is not None:
            try:
                runner.logger.stop_logging_writer()
                if hasattr(w, "close"):
                    w.close()
            except Exception:
                pass

    try:
        runner.learn(num_learning_iterations=max_iterations, init_at_random_ep_len=True)
    except StopTraining:
        name = signal.Signals(control.stop_signal).name if control.stop_signal else "stop"
        last = runner.last_completed_iteration if runner.last_completed_iteration is not None else resume_iter
        ckpt = None
        if log_dir is not None and last is not None:
            runner.current_learning_iteration = last
            ckpt = os.path.join(log_dir, f"model_{last}.pt")
            runner.save(ckpt)
        close_writer()
        _shutdown_distributed()
        if plan.is_main:
            if ckpt is None:
                _err("stopped before the first iteration completed: no checkpoint written")
            print(f"ISAACD_STOPPED signal={name} iteration={last if last is not None else -1} checkpoint={ckpt or ''}")
        sys.stdout.flush()
        return EXIT_OK
    except Exception as e:
        traceback.print_exc()
        nonfinite = _has_nonfinite_parameters(runner)
        _err(
            f"training crashed at iteration {control.iteration}: {type(e).__name__}: {e}"
            + (" (actor/critic parameters are NaN/inf: training diverged)" if nonfinite else "")
        )
        close_writer()
        if plan.is_main:
            print(f"ISAACD_FAILED iteration={control.iteration} nonfinite={int(nonfinite)} error={type(e).__name__}")
        sys.stdout.flush()
        return EXIT_CRASH

    close_writer()
    _shutdown_distributed()
    if plan.is_main:
        final = runner.current_learning_iteration
        print(f"ISAACD_DONE iteration={final} checkpoint={os.path.join(log_dir, f'model_{final}.pt')}")
    sys.stdout.flush()
    env.close()
    return EXIT_OK


def _has_nonfinite_parameters(runner: OnPolicyRunner) -> bool:
    try:
        alg = runner.alg
        params = list(alg.actor.parameters()) + list(alg.critic.parameters())
        return any(not bool(torch.isfinite(p.detach()).all()) for p in params)
    except Exception:
        return False


def _shutdown_distributed() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        try:
            torch.distributed.destroy_process_group()
        except Exception:
            pass
