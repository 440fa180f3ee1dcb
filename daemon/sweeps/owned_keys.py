"""What a sweep may not search, and why (issue 39): the job keys, Hydra overrides and trainer flags isaacd writes
itself (a trial's total, resume point, saves, run layout, device and placement: workflows/*.py `args`,
runtimes/trainer_command.py), each with the one-line refusal and its fix that the sweep file's check (spec.py)
says."""

from __future__ import annotations

import re

from ..config import errors as type_errors
from ..config.schema import JobConfig
from ..workflows.base import AGENT_DEVICE_KEYS
from ..workflows.rl_games import MANAGED_OVERRIDES as RL_GAMES_OWNED
from ..workflows.skrl import MANAGED_OVERRIDES as SKRL_OWNED

# job keys (no dot) a trial may differ in: each reaches the trainer as its flag (--num_envs, --seed, --agent)
SEARCHABLE_JOB_KEYS = ("agent", "num_envs", "seed")
# job keys isaacd owns for a sweep: (why, the fix)
OWNED_JOB_KEYS: dict[str, tuple[str, str]] = {
    "name": ("the trials are named <sweep>-t001, <sweep>-t002, ...", "remove it"),
    "owner": ("the sweep's owner owns every trial", "remove it"),
    "max_iterations": ("every trial trains to the base job's total, and the scheduler's rungs lead up to it",
                       "set it once in [job]"),
    "save_interval": ("a paused trial resumes from isaacd's saves", "set it once in [job]"),
    "runtime": ("every trial runs where the base job runs", "set it once in [job]"),
    "gpus": ("the queue places the trials by the base job's gpus or gpu_memory", "set it once in [job]"),
    "gpu_memory": ("the queue places the trials by the base job's gpus or gpu_memory", "set it once in [job]"),
    "device": ("the queue places the trials on the base job's device", "set it once in [job]"),
    "experiment": ("isaacd owns the trials' run layout", "set it once in [job]"),
    "log_root": ("isaacd owns the trials' run layout", "set it once in [job]"),
    "extra_args": ("a searched Hydra override is appended to it", "search the override itself, e.g. "
                   '"agent.algorithm.gamma" = { grid = [0.98, 0.99] }'),
}
_RUN_LAYOUT = ("isaacd owns the run layout (trials are named <sweep>-tNNN)", "remove it")
_RESUME = ("isaacd chooses the checkpoint a trial resumes from (a paused trial resumes exactly)", "remove it")
_TOTAL = ("every trial trains to the base job's max_iterations, and the scheduler's rungs lead up to it",
          "set max_iterations once in [job]")
_SAVES = ("a paused trial resumes from isaacd's saves", "set save_interval once in [job]")
_DEVICE = ("isaacd puts the policy on the job's device", "set device once in [job]")
_SEED = ("from the job key seed, through --seed", "search seed instead: seed = { int = [0, 1000] }")
_NUM_ENVS = ("from the job key num_envs, through --num_envs", "search num_envs instead: num_envs = { choice = [1024, "
             "2048] }")
# Hydra overrides isaacd writes itself (workflows/rsl_rl.py, rl_games.py, skrl.py args; JobConfig's managed flags), or
# that one of its flags overrides: (why, the fix)
OWNED_OVERRIDES: dict[str, tuple[str, str]] = {
    "agent.max_iterations": _TOTAL, "agent.save_interval": _SAVES,
    "agent.resume": _RESUME, "agent.load_run": _RESUME, "agent.load_checkpoint": _RESUME,
    "agent.experiment_name": _RUN_LAYOUT, "agent.run_name": _RUN_LAYOUT,
    **{k: _DEVICE for k in AGENT_DEVICE_KEYS}, "env.sim.device": _DEVICE,
    **{k: _RUN_LAYOUT for k in RL_GAMES_OWNED + SKRL_OWNED},
    "agent.params.config.save_frequency": _SAVES, "agent.agent.experiment.checkpoint_interval": _SAVES,
    "agent.params.config.max_epochs": _TOTAL, "agent.params.config.max_frames": _TOTAL,
    "agent.trainer.timesteps": _TOTAL,
    "agent.seed": _SEED, "env.seed": _SEED, "agent.params.seed": _SEED,
    "env.scene.num_envs": _NUM_ENVS,
}
# trainer flags isaacd writes and owns (JobConfig's managed flags): (why, the fix)
OWNED_FLAGS = {"--max_iterations": _TOTAL, "--resume": _RESUME, "--load_run": _RESUME, "--checkpoint": _RESUME,
               "--log_root": _RUN_LAYOUT, "--experiment_name": _RUN_LAYOUT, "--run_name": _RUN_LAYOUT,
               "--device": _DEVICE}

HYDRA_KEY_RE = re.compile(r"^(\+\+?)?(agent|env)(\.[A-Za-z0-9_]+)+$")


def key_refusal(key: str) -> str | None:
    """Why `key` cannot be searched (and the fix), or None."""
    if key.startswith("-"):
        flag = "--" + key.lstrip("-").split("=", 1)[0]
        name = flag[2:]
        if name in SEARCHABLE_JOB_KEYS:
            return f"isaacd writes {flag} from the job key; search {name} instead (no dashes)"
        if flag in OWNED_FLAGS:
            why, fix = OWNED_FLAGS[flag]
            return f"isaacd sets {flag} ({why}); {fix}"
        return (f"{flag} is a trainer flag, which isaacd writes from the job's keys; search a job key "
                f"({', '.join(SEARCHABLE_JOB_KEYS)}) or a Hydra override (agent.*, env.*)")
    if "." not in key:  # a job key (spec.is_job_key)
        return _job_key_refusal(key)
    bare = key.lstrip("+")
    if bare in OWNED_OVERRIDES:
        why, fix = OWNED_OVERRIDES[bare]
        return f"isaacd sets {bare} ({why}); {fix}"
    head = bare.split(".", 1)[0]
    if head not in ("agent", "env"):
        if head in JobConfig.model_fields:
            return f"{head} is a job setting, the same for every trial: set it in [job]"
        return ("a searched key with a dot is a Hydra override of the agent's or the environment's config, "
                'starting with agent. or env. (e.g. "agent.algorithm.learning_rate"); a job key has no dot')
    if not HYDRA_KEY_RE.fullmatch(key):
        return ('not a Hydra key: names of letters, digits and "_" joined by dots, e.g. '
                '"agent.algorithm.entropy_coef"')
    return None


def _job_key_refusal(key: str) -> str | None:
    if key in SEARCHABLE_JOB_KEYS:
        return None
    hint = f"searchable job keys: {', '.join(SEARCHABLE_JOB_KEYS)}; a Hydra override has a dot (agent.*, env.*)"
    if key in OWNED_JOB_KEYS:
        why, fix = OWNED_JOB_KEYS[key]
        return f"isaacd owns `{key}` in a sweep ({why}); {fix}"
    if key in JobConfig.model_fields:
        return f"{key} is the same for every trial: set it in [job] ({hint})"
    return f"not a job key{type_errors.did_you_mean(key, sorted(JobConfig.model_fields))} ({hint})"
