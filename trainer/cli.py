"""``isaacd-train``: command line of isaacd's built-in trainer.

The flags mirror Isaac Lab's ``scripts/reinforcement_learning/rsl_rl/train.py`` (+ ``cli_args.add_rsl_rl_args``
and the AppLauncher's ``--device``/``--headless``), so the supervisor builds the same command line for both. This
module imports no torch: ``--help`` and argument errors are fast; training lives in :mod:`isaacd_trainer.train`.

Differences from Isaac Lab, on purpose:

* ``--resume`` parses its optional value: ``--resume``, ``--resume True`` -> resume; ``--resume False`` -> do not
  (Isaac Lab's ``type=bool`` turns any non-empty string, even "False", into True).
* A resumed run continues numbering at the loaded checkpoint's iteration + 1 (rsl_rl itself re-runs number N:
  ``model_N.pt`` holds the weights *after* iteration N, so the next iteration is N+1). TensorBoard steps and new
  checkpoints in the new run dir are therefore all > N.
* ``--checkpoint`` / ``--load_run`` are first taken literally (an existing file / directory, absolute paths allowed)
  and only otherwise as Isaac Lab's regular expressions (newest match wins).
* Only the ``tensorboard`` logger exists (no network access is assumed).

Exit codes: 0 training finished, or stopped gracefully on SIGINT/SIGTERM with a checkpoint written; 1 training
crashed (e.g. NaN detected by rsl_rl, see ``--fault_inf_reward_after``); 2 bad command line / config / device;
3 resume failed (no run, checkpoint missing, unreadable or incompatible); CODE for ``--fault_exit_after K:CODE``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
from typing import Any, Sequence

from isaacd_trainer.tasks import TASKS, get_task

EXIT_OK = 0
EXIT_CRASH = 1
EXIT_USAGE = 2
EXIT_RESUME = 3

_OVERRIDE_RE = re.compile(r"^(agent|env)\.([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)=(.*)$", re.S)


def _str2bool(value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "t", "yes", "y", "on"):
        return True
    if v in ("0", "false", "f", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected a boolean (True/False), got {value!r}")


def _non_negative_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {n}")
    return n


def _positive_int(value: str) -> int:
    n = _non_negative_int(value)
    if n == 0:
        raise argparse.ArgumentTypeError("expected an integer >= 1, got 0")
    return n


def _non_negative_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not x >= 0.0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {value!r}")
    return x


def _positive_float(value: str) -> float:
    x = _non_negative_float(value)
    if x == 0.0:
        raise argparse.ArgumentTypeError("expected a number > 0")
    return x


def _exit_spec(value: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", value)
    if not m:
        raise argparse.ArgumentTypeError(f"expected K:CODE (two non-negative integers), got {value!r}")
    k, code = int(m.group(1)), int(m.group(2))
    if code > 255:
        raise argparse.ArgumentTypeError(f"exit code must be 0..255, got {code}")
    return k, code


def _scale_spec(value: str) -> tuple[int, float]:
    m = re.fullmatch(r"\s*(\d+)\s*:\s*([-+0-9.eE]+)\s*", value)
    if not m:
        raise argparse.ArgumentTypeError(f"expected K:SCALE (an integer and a number), got {value!r}")
    return int(m.group(1)), float(m.group(2))


def build_parser() -> argparse.ArgumentParser:
    tasks = ", ".join(sorted(TASKS))
    p = argparse.ArgumentParser(
        prog="isaacd-train",
        description=(
            "Train an RL agent with RSL-RL on a built-in batched torch task. Command line and log layout mirror "
            "Isaac Lab's scripts/reinforcement_learning/rsl_rl/train.py: runs go to "
            "<log_root>/rsl_rl/<experiment_name>/<YYYY-mm-dd_HH-MM-SS>[_<run_name>]/ with rsl_rl's model_<iter>.pt "
            "checkpoints and TensorBoard events. The first stdout line is ISAACD_RUN_DIR=<absolute run dir>; the last one ISAACD_DONE, ISAACD_STOPPED or ISAACD_FAILED "
            "(iteration=N ...). SIGINT/SIGTERM stop at the next safe point and save model_<last iteration>.pt."
        ),
        epilog=(
            "Hydra-style overrides like Isaac Lab's are accepted as extra positional words: agent.<key>=<value> and "
            "env.<key>=<value> for keys of the task's default configs (nested keys with dots, e.g. "
            "agent.save_interval=10 agent.algorithm.entropy_coef=0.01 env.max_episode_length=200). Explicit flags win "
            "over overrides. Exit codes: 0 finished or stopped gracefully by SIGINT/SIGTERM (checkpoint written), "
            "1 crashed (e.g. NaN), 2 usage/config error, 3 resume failed, CODE from --fault_exit_after."
        ),
        allow_abbrev=False,
    )
    # -- Isaac Lab train.py
    p.add_argument("--task", type=str, default=None, help=f"Name of the task. Built-in: {tasks}.")
    p.add_argument("--agent", type=str, default="rsl_rl_cfg_entry_point",
                   help="Name of the RL agent configuration entry point (only rsl_rl_cfg_entry_point exists).")
    p.add_argument("--num_envs", type=_positive_int, default=None, help="Number of environments to simulate.")
    p.add_argument("--seed", type=int, default=None, help="Seed used for the environment (-1: random).")
    p.add_argument("--max_iterations", type=_non_negative_int, default=None,
                   help="RL policy training iterations to run in this invocation (on resume: this many more).")
    p.add_argument("--distributed", action="store_true", default=False,
                   help="Run training with multiple GPUs (launch with torchrun; device becomes cuda:<LOCAL_RANK>).")
    # -- AppLauncher
    p.add_argument("--device", type=str, default=None,
                   help="Device: cpu, cuda or cuda:N (default: cuda:0 if available, else cpu).")
    p.add_argument("--headless", action="store_true", default=False, help="Accepted for Isaac Lab parity; no-op.")
    # -- cli_args.add_rsl_rl_args
    g = p.add_argument_group("rsl_rl", description="Arguments for RSL-RL agent.")
    g.add_argument("--experiment_name", type=str, default=None,
                   help="Name of the experiment folder where logs will be stored.")
    g.add_argument("--run_name", type=str, default=None, help="Run name suffix to the log directory.")
    g.add_argument("--resume", type=_str2bool, nargs="?", const=True, default=None,
                   help="Whether to resume from a checkpoint ('--resume' alone or '--resume True').")
    g.add_argument("--load_run", type=str, default=None,
                   help="Name of the run folder to resume from (default: newest run of the experiment).")
    g.add_argument("--checkpoint", type=str, default=None,
                   help="Checkpoint file to resume from, e.g. model_100.pt (default: newest model_*.pt).")
    g.add_argument("--logger", type=str, default=None, choices=["tensorboard"], help="Logger module to use.")
    g.add_argument("--log_project_name", type=str, default=None,
                   help="Accepted for Isaac Lab parity (wandb/neptune project); ignored with tensorboard.")
    # -- isaacd extras
    x = p.add_argument_group("isaacd", description="Extra options of isaacd's trainer.")
    x.add_argument("--log_root", type=str, default="logs",
                   help="Root of the log tree (default 'logs', relative to the working directory like Isaac Lab).")
    x.add_argument("--save_interval", type=_positive_int, default=None,
                   help="Save a checkpoint every N iterations (rsl_rl: when iteration %% N == 0).")
    x.add_argument("--learning_rate", type=_non_negative_float, default=None,
                   help="Initial PPO learning rate (0 freezes the policy: a real loss/reward stagnation).")
    x.add_argument("--num_steps_per_env", type=_positive_int, default=None, help="Rollout length per iteration.")
    f = p.add_argument_group(
        "fault injection",
        description=(
            "FOR TESTING THE SUPERVISOR ONLY. K is the rsl_rl iteration number (the TensorBoard step); a fault "
            "fires at the start of the first iteration >= K run by this process."
        ),
    )
    f.add_argument("--fault_inf_reward_after", type=_non_negative_int, default=None, metavar="K",
                   help="From iteration K on every reward is +inf. Returns and advantages become inf/NaN, the "
                        "first PPO mini-batch step of iteration K turns actor and critic NaN, and rsl_rl 5.5 crashes "
                        "inside that update (RuntimeError: normal expects all elements of std >= 0.0, the usual "
                        "face of a diverged Isaac Lab run): exit 1, last stdout line ISAACD_FAILED ... nonfinite=1, "
                        "nothing of iteration K reaches TensorBoard.")
    f.add_argument("--fault_hang_after", type=_non_negative_int, default=None, metavar="K",
                   help="At iteration K sleep forever (process alive, no new TensorBoard steps). SIGINT/SIGTERM are "
                        "ignored from then on, like a wedged process: only SIGKILL ends it.")
    f.add_argument("--fault_exit_after", type=_exit_spec, default=None, metavar="K:CODE",
                   help="At iteration K exit immediately with status CODE (no checkpoint).")
    f.add_argument("--fault_reward_scale_after", type=_scale_spec, default=None, metavar="K:SCALE",
                   help="From iteration K on every reward is multiplied by SCALE: the value loss spikes by about "
                        "SCALE^2 and is logged (a divergence the supervisor can see and roll back).")
    f.add_argument("--fault_once", action="store_true", default=False,
                   help="Inject the faults above only in a fresh run, not when resuming: the fault does not recur "
                        "after the supervisor restarts or rolls the run back.")
    f.add_argument("--step_delay", type=_non_negative_float, default=0.0, metavar="SECONDS",
                   help="Sleep this long before every environment step (slows training down deterministically).")
    return p


def parse_override_value(text: str) -> Any:
    """Parse the value of a Hydra-style ``key=value`` override (JSON, or Python-style True/False/None, else str)."""
    t = text.strip()
    if t in ("True", "False"):
        return t == "True"
    if t in ("None", "null", "~"):
        return None
    try:
        return json.loads(t)
    except ValueError:
        return t


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[tuple[str, list[str], Any]]]:
    """Parse the command line; returns (args, overrides) where overrides are (root, key path, value)."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    overrides: list[tuple[str, list[str], Any]] = []
    unknown: list[str] = []
    for word in rest:
        m = _OVERRIDE_RE.match(word)
        if m:
            overrides.append((m.group(1), m.group(2).split("."), parse_override_value(m.group(3))))
        else:
            unknown.append(word)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.task is None:
        parser.error(f"--task is required; built-in tasks: {', '.join(sorted(TASKS))}")
    try:
        get_task(args.task)
    except KeyError as e:
        parser.error(str(e.args[0]))
    if args.agent != "rsl_rl_cfg_entry_point":
        parser.error(f"--agent {args.agent!r} is not available; only rsl_rl_cfg_entry_point")
    return args, overrides


# Stop requests (SIGINT/SIGTERM) that arrive while torch and rsl_rl are still being imported; the trainer honours
# them at its first safe point. A second signal exits at once.
PENDING_SIGNALS: list[int] = []


def _early_signal_handler(signum: int, frame: Any) -> None:
    if PENDING_SIGNALS:
        os._exit(128 + signum)
    PENDING_SIGNALS.append(signum)


def main(argv: Sequence[str] | None = None) -> int:
    args, overrides = parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _early_signal_handler)
    from isaacd_trainer.plan import ResumeError, UsageError, make_plan

    try:
        plan = make_plan(args, overrides)  # torch-free: config, device request, resume checkpoint path
    except UsageError as e:
        print(f"isaacd-train: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ResumeError as e:
        print(f"isaacd-train: error: cannot resume: {e}", file=sys.stderr)
        return EXIT_RESUME
    from isaacd_trainer.train import run  # imports torch and rsl_rl

    return run(args, plan)


if __name__ == "__main__":
    sys.exit(main())
