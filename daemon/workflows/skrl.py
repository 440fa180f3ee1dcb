"""Isaac Lab's skrl train script: `scripts/reinforcement_learning/skrl/train.py` (1.x/2.x) and the 3.x
unified entry point `scripts/reinforcement_learning/train.py --rl_library skrl`.

What the upstream code says (read for this module; docs/workflows.md has the citations):
- Flags: `--task --num_envs --seed --max_iterations --checkpoint --ml_framework --algorithm
  --distributed` plus the AppLauncher's `--device/--headless` (3.x: `--agent`, no `--headless`
  needed); the rest goes to Hydra. `--max_iterations N` sets `agent_cfg["trainer"]["timesteps"] =
  N * agent_cfg["agent"]["rollouts"]`: the timesteps of *this* launch.
- `--checkpoint` is a file (`retrieve_file_path`: absolute, or relative to the working directory);
  3.x also takes `latest|best` (manifest-based: never used here, a sibling job could win).
- Runs: `logs/skrl/<agent.experiment.directory>/<%Y-%m-%d_%H-%M-%S>_<algorithm>_<ml_framework>
  [_<agent.experiment.experiment_name>]/`, TensorBoard events in the run dir itself, checkpoints
  `checkpoints/agent_<timestep>.pt` every `checkpoint_interval` timesteps and `best_agent.pt`.
- skrl (`skrl/agents/torch/base.py`, `skrl/trainers/torch/{base,sequential}.py`): `agent.load`
  restores the modules (policy, value, optimizer, preprocessors) and nothing else; the trainer's
  loop is `range(initial_timestep = 0, timesteps)`. **Every run counts timesteps from 0 again**,
  so `agent_<t>.pt` of a run resumed from a checkpoint that held K iterations holds
  K + t // rollouts of the job's iterations (PPO updates once every `rollouts` timesteps; a
  partial rollout in memory is not in a checkpoint). isaacd's Checkpoint.iteration for skrl is
  that job-wide count of iterations *done* (like rl_games' epochs), computed per run from the
  run's own `params/agent.yaml` (the rollouts it really used) and the attempt's resume point.
- A checkpoint is written only at `timestep % checkpoint_interval == 0`. 2.x writes nothing at
  the end of training, so isaacd picks the interval as the largest divisor of the iterations this
  launch runs that is <= save_interval: the last iteration is always saved. 3.x writes a final
  `agent_<timesteps>.pt` after `runner.run()` (not on Ctrl-C), so there it is save_interval.

isaacd needs the rollouts to turn iterations into timesteps before a run exists, so a skrl job
states them as the Hydra override `agent.agent.rollouts=N` in extra_args (the same value the
task's agent config has, or the one you want): one number that isaacd and the run then agree on.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..config.schema import JobConfig
from ..observations.checkpoints import Checkpoint, CheckpointLayout
from .base import Generation, Workflow, WorkflowError
from .params import override_int, yaml_int
from .rsl_rl import TIMESTAMP_RE

AGENT_CHECKPOINT_RE = re.compile(r"^agent_(\d+)\.pt$")  # not best_agent.pt: its timestep is not in its name
ROLLOUTS_OVERRIDE = "agent.agent.rollouts"
# run layout and numbering that isaacd owns for a skrl job
MANAGED_OVERRIDES = ("agent.agent.experiment.directory", "agent.agent.experiment.experiment_name",
                     "agent.agent.experiment.checkpoint_interval", "agent.trainer.timesteps")


def run_rollouts(run_dir: Path) -> int | None:
    """`agent.rollouts` from a run's `params/agent.yaml` (Isaac Lab's dump_yaml), if a whole number > 0."""
    n = yaml_int(Path(run_dir) / "params" / "agent.yaml", ("agent", "rollouts"))
    return n if n is not None and n > 0 else None


def configured_rollouts(job: JobConfig) -> int | None:
    return override_int(job, ROLLOUTS_OVERRIDE)


def _flag_value(args: list[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def checkpoint_every(remaining: int, save_interval: int) -> int:
    """The largest divisor of `remaining` that is <= save_interval (so the run's last iteration is saved)."""
    for d in range(min(save_interval, remaining), 0, -1):
        if remaining % d == 0:
            return d
    return 1


class Skrl(Workflow):
    library = "skrl"

    def __init__(self, generation: Generation, job: JobConfig):
        rollouts = configured_rollouts(job)
        if rollouts is None:
            raise WorkflowError("extra_args", f'workflow = "skrl" needs the agent\'s rollouts as a Hydra override, '
                                              f'e.g. extra_args = ["{ROLLOUTS_OVERRIDE}=32"] (the value in the task\'s '
                                              "skrl agent config): skrl counts timesteps, --max_iterations is "
                                              "multiplied by it, and isaacd must convert save_interval and count "
                                              "the job's iterations across runs")
        clash = sorted({a.split("=", 1)[0].lstrip("+") for a in job.extra_args} & set(MANAGED_OVERRIDES))
        if clash:
            raise WorkflowError("extra_args", f"{', '.join(clash)} are set by isaacd for a skrl job (run layout and "
                                              "checkpoint interval; experiment and save_interval are job keys)")
        self.generation = generation
        self.rollouts = rollouts
        self.unified = generation.major >= 3
        self.algorithm = (_flag_value(job.extra_args, "--algorithm") or "PPO").lower()
        self.framework = _flag_value(job.extra_args, "--ml_framework") or "torch"
        self.layout = CheckpointLayout("checkpoints", AGENT_CHECKPOINT_RE, count=self._count)
        self.contract = (f"Isaac Lab {generation.label} skrl: --checkpoint <file>, timesteps restart at 0 per run "
                         f"({rollouts} per iteration) (from {generation.source})")

    def _rollouts_of(self, run_dir: Path) -> int:
        return run_rollouts(run_dir) or self.rollouts

    def _count(self, run_dir: Path, timestep: int, offset: int) -> int:
        """The job's iterations done by `agent_<timestep>.pt` of a run that resumed at `offset` iterations done."""
        return offset + timestep // self._rollouts_of(run_dir)

    def experiment_dir(self, job: JobConfig) -> Path:
        return job.log_root / "skrl" / job.experiment_name

    def run_dir_re(self, job: JobConfig) -> re.Pattern[str]:
        # the algorithm may come from the agent config on 3.x (resolve_skrl_algorithm): any lower-case word
        return re.compile(rf"^{TIMESTAMP_RE}_[a-z0-9]+_(torch|jax|jax-numpy)_{re.escape(job.name)}$")

    def iterations_done(self, ckpt: Checkpoint) -> int:
        return ckpt.iteration

    def iterations_to_request(self, job: JobConfig, resume: Checkpoint | None) -> int:
        return job.max_iterations - (resume.iteration if resume else 0)

    def is_complete(self, job: JobConfig, ckpt: Checkpoint | None, last_step: int | None) -> bool:
        # TensorBoard steps are this run's timesteps, from 0 again after every resume: only a checkpoint says
        return ckpt is not None and ckpt.iteration >= job.max_iterations

    def progress_iteration(self, step: int, run_dir: Path | None, resume_iteration: int | None) -> int:
        rollouts = self._rollouts_of(run_dir) if run_dir is not None else self.rollouts
        return (resume_iteration or 0) + step // rollouts

    def checkpoint_interval(self, remaining: int, save_interval: int) -> int:
        """In timesteps, for agent.agent.experiment.checkpoint_interval."""
        every = save_interval if self.unified else checkpoint_every(remaining, save_interval)
        return every * self.rollouts

    def args(self, job: JobConfig, resume: Checkpoint | None, seed: int) -> list[str]:
        remaining = self.iterations_to_request(job, resume)
        args = ["--task", job.task, "--num_envs", str(job.num_envs), "--seed", str(seed),
                "--max_iterations", str(remaining), "--device", job.device]
        if job.agent:
            args += ["--agent", job.agent]
        if not self.unified:
            args.append("--headless")
        args += [f"agent.agent.experiment.directory={job.experiment_name}",
                 f"agent.agent.experiment.experiment_name={job.name}",
                 f"agent.agent.experiment.checkpoint_interval={self.checkpoint_interval(remaining, job.save_interval)}"]
        if resume is not None:
            args += ["--checkpoint", str(resume.path)]
        return args + list(job.extra_args)
