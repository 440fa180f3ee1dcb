"""Isaac Lab's rl_games train script (`scripts/reinforcement_learning/rl_games/train.py`, 2.x).

What the upstream code says (read for this module; see docs/workflows.md):
- Flags: `--task --num_envs --seed --max_iterations --checkpoint <path> --distributed` plus the
  AppLauncher's `--device/--headless`; the rest goes to Hydra (`parse_known_args`).
- `--max_iterations` sets `params.config.max_epochs`, a *total*: rl_games' restore sets
  `epoch_num` from the checkpoint and trains until `epoch_num >= max_epochs`.
- `--checkpoint` is a file path (`retrieve_file_path`), not a regex; there is no --resume.
- Runs: `logs/rl_games/<params.config.name>/<params.config.full_experiment_name or timestamp>/`
  with checkpoints in `nn/`: `last_<name>_ep_<epoch>_rew_<reward>.pth` every `save_frequency`
  epochs, and `<name>.pth` for the best reward so far. isaacd sets the name (the job's
  experiment) and `save_frequency` (the job's save_interval) through Hydra overrides;
  `full_experiment_name` with `++` (the agent configs lack the key: a plain override is a Hydra error).
- rl_games saves `last_..._ep_<N>_rew_...` only when an episode finished in its reward window, and
  always once at `max_epochs`: the job is complete when `_ep_<max_iterations>` exists.
- TensorBoard events go to `<run>/summaries/`, stepped by frames (`rewards/iter` by epoch).
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from ..config import JobConfig
from ..signals.checkpoints import Checkpoint, CheckpointLayout
from .base import Generation, Workflow
from .rsl_rl import TIMESTAMP_RE

RL_GAMES_LAYOUT = CheckpointLayout("nn", re.compile(r"^last_.+_ep_(\d+)_rew_.*\.pth$"))


class RlGames(Workflow):
    library = "rl_games"
    layout = RL_GAMES_LAYOUT

    def __init__(self, generation: Generation):
        self.generation = generation
        self.contract = f"Isaac Lab {generation.label} rl_games: --checkpoint <file> (from {generation.source})"

    def experiment_dir(self, job: JobConfig) -> Path:
        return job.log_root / "rl_games" / job.experiment_name

    def run_dir_re(self, job: JobConfig) -> re.Pattern[str]:
        return re.compile(rf"^{TIMESTAMP_RE}_{re.escape(job.name)}$")

    def iterations_done(self, ckpt: Checkpoint) -> int:
        return ckpt.iteration  # `_ep_<N>`: N epochs completed

    def is_complete(self, job: JobConfig, ckpt: Checkpoint | None, last_step: int | None) -> bool:
        # rl_games steps most TensorBoard scalars by frames (summaries/), not epochs: only a checkpoint says
        return ckpt is not None and self.iterations_done(ckpt) >= job.max_iterations

    def args(self, job: JobConfig, resume: Checkpoint | None, seed: int) -> list[str]:
        args = ["--task", job.task, "--num_envs", str(job.num_envs), "--seed", str(seed),
                "--max_iterations", str(job.max_iterations), "--device", job.device]
        if self.generation.major < 3:
            args.append("--headless")
        # upstream names the run dir by the clock alone; add the job's name so a job finds only its own runs
        run = f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{job.name}"
        # `++`: Isaac Lab's rl_games agent configs have no full_experiment_name key (the script reads it with
        # .get), and Hydra's struct mode rejects `key=value` for a missing key ("Could not override", exit 1)
        args += [f"agent.params.config.name={job.experiment_name}",
                 f"++agent.params.config.full_experiment_name={run}",
                 f"agent.params.config.save_frequency={job.save_interval}"]
        if resume is not None:
            args += ["--checkpoint", str(resume.path)]
        return args + list(job.extra_args)
