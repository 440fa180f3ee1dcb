"""Isaac Lab's rl_games train script: `scripts/reinforcement_learning/rl_games/train.py` (1.x/2.x) and the 3.x
unified entry point `scripts/reinforcement_learning/train.py --rl_library rl_games`.

What the upstream code says (read for this module; docs/workflows.md has the files and commits):
- Flags: `--task --num_envs --seed --max_iterations --checkpoint --sigma --distributed` plus the
  AppLauncher's `--device/--headless`; 3.x (and later 2.x scripts) has `--agent` (default
  `rl_games_cfg_entry_point`), passed only when the job sets `agent`; 3.x is headless by default.
  The rest goes to Hydra (`parse_known_args`).
- `--max_iterations` sets `params.config.max_epochs`, a *total*: rl_games' restore sets `epoch_num`
  (and `frame`) from the checkpoint and trains until `epoch_num >= max_epochs`.
- `--checkpoint` is a file path (`retrieve_file_path`: absolute, or relative to the working directory),
  not a regex; there is no --resume. 3.x also takes `latest|best` (the newest run with a matching
  `run.json` manifest: never used here, a sibling job's run of the same task could win).
- Runs: `logs/rl_games/<params.config.name>/<params.config.get("full_experiment_name", <timestamp>)>/`
  with checkpoints in `nn/`: `last_<name>_ep_<epoch>_rew_<reward>.pth` every `save_frequency`
  epochs, and `<name>.pth` for the best reward so far. isaacd sets the name (the job's experiment),
  the run name and `save_frequency` (the job's save_interval) through Hydra overrides;
  `full_experiment_name` with `++` (the agent configs lack the key: on 2.x a plain override is a Hydra
  error; 3.x sets `agent.*` leaves itself, and `++` goes to Hydra, which adds the key).
- rl_games saves `last_..._ep_<N>_rew_...` only when an episode finished in its reward window, and
  always once at `max_epochs`: the job is complete when `_ep_<max_iterations>` exists.
- TensorBoard events go to `<run>/summaries/`. Most scalars are stepped by `frame = self.frame //
  num_agents` taken *before* the epoch's frames are added (`self.frame += horizon_length * num_actors
  * world_size`); `frame` is saved in every checkpoint and restored with it, so it keeps counting
  across resumes. `progress_iteration` turns a step back into rl_games' epoch (below).
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from pathlib import Path

from ..config.schema import JobConfig
from ..observations.checkpoints import Checkpoint, CheckpointLayout
from .base import RL_GAMES_DEVICE_KEYS, Generation, Workflow, WorkflowError
from .params import override_int, yaml_float, yaml_int
from .rsl_rl import TIMESTAMP_RE

RL_GAMES_LAYOUT = CheckpointLayout("nn", re.compile(r"^last_.+_ep_(\d+)_rew_.*\.pth$"))
HORIZON_OVERRIDE = "agent.params.config.horizon_length"
# the run layout, numbering and save points isaacd owns for an rl_games job (job keys say them instead)
MANAGED_OVERRIDES = ("agent.params.config.name", "agent.params.config.full_experiment_name",
                     "agent.params.config.save_frequency", "agent.params.config.max_epochs",
                     "agent.params.config.max_frames", "agent.params.config.train_dir")

class RlGames(Workflow):
    library = "rl_games"
    layout = RL_GAMES_LAYOUT

    def __init__(self, generation: Generation, job: JobConfig | None = None):
        if job is not None:
            clash = sorted({a.split("=", 1)[0].lstrip("+") for a in job.extra_args} & set(MANAGED_OVERRIDES))
            if clash:
                raise WorkflowError("extra_args", f"{', '.join(clash)} are set by isaacd for an rl_games job (run "
                                                  "layout, save points and the epoch total come from the job keys "
                                                  "experiment, save_interval and max_iterations)")
        self.generation = generation
        self.job = job
        self.unified = generation.major >= 3  # scripts/reinforcement_learning/train.py --rl_library rl_games
        kind = "train.py --rl_library rl_games, --checkpoint <file>" if self.unified else "--checkpoint <file>"
        self.contract = f"Isaac Lab {generation.label} rl_games: {kind} (from {generation.source})"

    def experiment_dir(self, job: JobConfig) -> Path:
        return job.log_root / "rl_games" / job.experiment_name

    def run_dir_re(self, job: JobConfig) -> re.Pattern[str]:
        return re.compile(rf"^{TIMESTAMP_RE}_{re.escape(job.name)}$")

    def iterations_done(self, ckpt: Checkpoint) -> int:
        return ckpt.iteration  # `_ep_<N>`: N epochs completed

    def is_complete(self, job: JobConfig, ckpt: Checkpoint | None, last_step: int | None) -> bool:
        # rl_games always saves `_ep_<max_epochs>` before it returns: only a checkpoint says the job is done
        return ckpt is not None and self.iterations_done(ckpt) >= job.max_iterations

    def finished_early(self, job: JobConfig, run_dir: Path | None, latest: dict[str, float],
                       last_step: int | None) -> str | None:
        """rl_games ends `train()` with exit 0 before max_epochs in two more ways (rl_games/common/a2c_common.py,
        ContinuousA2CBase.train): a new best mean reward above `score_to_win` ("Network won!"), or `frame` at or
        past `max_frames`. Both come from the run's `params/agent.yaml`; the evidence is the run's last
        `rewards/iter` (the best that won is that epoch's mean) and its last frame step. A resume cannot go on:
        `train()` resets its best to -100500, so a won policy wins again at its first epoch and exits 0 again."""
        if run_dir is None:
            return None
        agent_yaml = Path(run_dir) / "params" / "agent.yaml"
        score_to_win = yaml_float(agent_yaml, ("params", "config", "score_to_win"))
        reward = latest.get("rewards/iter")
        # a best is only taken from epoch save_best_after on (rl_games' default 100): before it, no win
        save_best_after = yaml_int(agent_yaml, ("params", "config", "save_best_after"))
        epoch = self.progress_iteration(last_step, run_dir, None) if last_step is not None else None
        could_win = epoch is not None and epoch >= (100 if save_best_after is None else save_best_after)
        if score_to_win is not None and reward is not None and math.isfinite(reward) and reward > score_to_win \
                and could_win:
            return f"score_to_win reached: mean reward {reward:.6g} > {score_to_win:g} (rl_games stops there)"
        max_frames = yaml_int(agent_yaml, ("params", "config", "max_frames"))
        fpe = self.frames_per_epoch(run_dir)
        # the last epoch's scalars are stepped by the frame count before its own frames were added
        if max_frames is not None and max_frames > 0 and fpe and last_step is not None and last_step + fpe >= max_frames:
            return f"max_frames reached: {last_step + fpe} frames >= {max_frames} (rl_games stops there)"
        return None

    def frames_per_epoch(self, run_dir: Path | None) -> int | None:
        """`horizon_length * num_actors * world_size`: what rl_games adds to `frame` every epoch (rank 0's count).

        horizon_length from the run's own `params/agent.yaml` (else a `agent.params.config.horizon_length=`
        override); num_actors is the env count (`env.unwrapped.num_envs`; agent.yaml still says -1, it is dumped
        before the env exists) from the run's `params/env.yaml` `scene.num_envs`, else the job's num_envs;
        world_size is the job's ranks. `num_agents` (frame // num_agents) is 1 for Isaac Lab's single-agent envs.
        """
        horizon = None
        num_envs = None
        if run_dir is not None:
            horizon = yaml_int(Path(run_dir) / "params" / "agent.yaml", ("params", "config", "horizon_length"))
            num_envs = yaml_int(Path(run_dir) / "params" / "env.yaml", ("scene", "num_envs"))
        if self.job is not None:
            horizon = horizon or override_int(self.job, HORIZON_OVERRIDE)
            num_envs = num_envs or self.job.num_envs
        if not horizon or not num_envs or horizon <= 0 or num_envs <= 0:
            return None
        ranks = self.job.ranks if self.job is not None else 1
        return horizon * num_envs * ranks

    def progress_iteration(self, step: int, run_dir: Path | None, resume_iteration: int | None) -> int:
        """A TensorBoard step (rl_games' frame count) as rl_games' epoch, the numbering of `_ep_<N>`.

        Epoch E's scalars are written at the frame count *before* its own frames are added, and `frame` is restored
        from the checkpoint, so step s belongs to epoch `s // frames_per_epoch + 1` in every run of the job. A
        resumed run only logs epochs after the one it loaded (this also covers a run whose frames per epoch
        changed, e.g. another num_envs). `rewards/iter` and `episode_lengths/iter` are stepped by the epoch
        itself; frames outgrow it from the second epoch on, so the largest step is a frame count.
        Unknown frames per epoch (no params yet): the resume point, never a guess ahead of it.
        """
        floor = (resume_iteration or 0)
        fpe = self.frames_per_epoch(run_dir)
        if fpe is None:
            return floor
        return max(step // fpe + 1, floor + 1)

    def args(self, job: JobConfig, resume: Checkpoint | None, seed: int) -> list[str]:
        args = ["--task", job.task, "--num_envs", str(job.num_envs), "--seed", str(seed),
                "--max_iterations", str(job.max_iterations), "--device", job.device]
        if job.agent:
            args += ["--agent", job.agent]  # 3.x; 2.x scripts declare it from 2.2 on (not @011c373c)
        if not self.unified:
            args.append("--headless")  # 3.x is headless by default and deprecates the flag
        # upstream names the run dir by the clock alone; add the job's name so a job finds only its own runs
        run = f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{job.name}"
        # `++`: Isaac Lab's rl_games agent configs have no full_experiment_name key (the script reads it with
        # .get), and 2.x Hydra's struct mode rejects `key=value` for a missing key ("Could not override", exit 1)
        args += [f"agent.params.config.name={job.experiment_name}",
                 f"++agent.params.config.full_experiment_name={run}",
                 f"agent.params.config.save_frequency={job.save_interval}"]
        if job.ranks == 1:
            # rl_games' agent runs on params.config.device (the task yamls say 'cuda:0'); --device moves only the
            # simulation, and only --distributed sets the agent's (3.0.0 train_rl_games.run; 2.x likewise)
            args += [f"{key}={job.device}" for key in RL_GAMES_DEVICE_KEYS]
        if resume is not None:
            args += ["--checkpoint", str(resume.path)]
        return args + list(job.extra_args)
