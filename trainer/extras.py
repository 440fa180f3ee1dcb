"""isaacd's own additions to the built-in trainer, kept apart from the Isaac Lab contract (no torch here).

Only fault injection for supervisor tests and a deterministic slow-down. None of these flags changes how the
command line is parsed otherwise, where runs and checkpoints go, how iterations are numbered or what a signal does.
"""

from __future__ import annotations

import argparse
import re


def _non_negative_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {n}")
    return n


def _non_negative_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not x >= 0.0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {value!r}")
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


def add_isaacd_args(parser: argparse.ArgumentParser) -> None:
    f = parser.add_argument_group(
        "isaacd fault injection (not Isaac Lab)",
        description=(
            "FOR TESTING THE SUPERVISOR ONLY; none of these exists in Isaac Lab. K is the rsl_rl iteration number "
            "(the TensorBoard step; after loading model_N.pt the first iteration run is N). A fault fires at the "
            "start of the first iteration >= K that this process runs."
        ),
    )
    f.add_argument("--fault_inf_reward_after", type=_non_negative_int, default=None, metavar="K",
                   help="From iteration K on every reward is +inf: the PPO update turns the policy NaN and rsl_rl "
                        "raises inside that update (exit 1, nothing of iteration K reaches TensorBoard).")
    f.add_argument("--fault_hang_after", type=_non_negative_int, default=None, metavar="K",
                   help="At iteration K sleep forever (alive, no new TensorBoard steps). SIGINT/SIGTERM are ignored "
                        "from then on, like a wedged process: only SIGKILL ends it.")
    f.add_argument("--fault_exit_after", type=_exit_spec, default=None, metavar="K:CODE",
                   help="At iteration K exit immediately with status CODE (os._exit, no checkpoint).")
    f.add_argument("--fault_reward_scale_after", type=_scale_spec, default=None, metavar="K:SCALE",
                   help="From iteration K on every reward is multiplied by SCALE (the value loss spikes ~SCALE^2).")
    f.add_argument("--fault_cuda_oom_above_envs", type=_non_negative_int, default=None, metavar="N",
                   help="A GPU that fits N environments: with num_envs > N the start-up (before the first iteration) "
                        "raises torch.OutOfMemoryError with torch's own message, uncaught (exit 1). Also in resumed "
                        "runs, whatever --fault_once says.")
    f.add_argument("--fault_cuda_oom_after_iterations", type=_non_negative_int, default=None, metavar="K",
                   help="Once this process has run K iterations (counted from its own first one, so a resumed run "
                        "gets K more), the next environment step raises torch.OutOfMemoryError, uncaught (exit 1).")
    f.add_argument("--fault_once", action="store_true", default=False,
                   help="Inject the faults above only in a fresh run, not when this launch resumes a checkpoint.")
    f.add_argument("--step_delay", type=_non_negative_float, default=0.0, metavar="SECONDS",
                   help="Sleep this long before every environment step (slows training down deterministically).")
