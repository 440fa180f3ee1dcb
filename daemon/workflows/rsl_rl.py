"""Isaac Lab's rsl_rl train scripts: 1.x/2.0, 2.1-2.3 and 3.x, and isaacd's built-in trainer.

What the upstream code says (read for this module; see docs/workflows.md for the citations):
- `scripts/reinforcement_learning/rsl_rl/train.py` (2.x) parses with `parse_known_args()` and
  hands every leftover token to Hydra: an unknown flag or a stray value is a Hydra error (exit 1)
  after Isaac Sim has booted.
- `cli_args.add_rsl_rl_args`: `--resume` is `type=bool` up to 2.0 (`--resume True`; a bare
  `--resume` is an argparse error) and `action="store_true"` from 2.1 (a bare `--resume`;
  `--resume True` leaves a stray `True` for Hydra).
- `get_checkpoint_path(log_root, load_run, checkpoint)`: both are regexes, `re.match` (a prefix
  match), sorted, the last wins; so isaacd anchors both (`regex_literal`).
- Runs: `logs/rsl_rl/<experiment>/<%Y-%m-%d_%H-%M-%S>[_<run_name>]/model_<it>.pt`, relative to
  the working directory, a new run dir for every launch.
- 3.x (`isaaclab_rl/entrypoints/backends/cli_args_rsl_rl.py` and `train_rsl_rl.py`, IsaacLab commit
  062dd2ad): the unified entry point takes `--rl_library rsl_rl`; there is no `--resume` and no
  `--load_run`; `--checkpoint latest|best|<dir>|<file>`, where an existing file path is loaded as is.
  isaacd passes the absolute file it chose, which no sibling run can shadow.
- The policy's device is `agent.device` (RslRlBaseRunnerCfg default "cuda:0"); `--device` sets only the
  simulation's, and only `--distributed` moves the agent (3.0.0 `train_rsl_rl._run`, 2.x `train.py`
  @011c373c). So isaacd passes `agent.device=<the job's device>` for single-rank jobs.
- rsl_rl's `OnPolicyRunner.learn` starts at `current_learning_iteration`, which `load` sets to
  the checkpoint's `iter`: after loading model_N.pt iteration N runs again, and
  `--max_iterations M` means M *more*, ending with model_{N+M-1}. So a resume asks for
  `total - N`, and model_N holds N+1 of the job's iterations.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..config.schema import JobConfig
from ..observations.checkpoints import RSL_RL_LAYOUT, Checkpoint
from .base import RSL_RL_DEVICE_KEYS, Generation, Workflow, regex_literal

TIMESTAMP_RE = r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}"


class RslRl(Workflow):
    library = "rsl_rl"
    layout = RSL_RL_LAYOUT

    def __init__(self, generation: Generation, resume_flag: str, builtin: bool = False):
        self.generation = generation
        self.resume_flag = resume_flag  # "bool" | "store_true"
        self.unified = generation.major >= 3  # scripts/reinforcement_learning/train.py --rl_library rsl_rl
        kind = ("--checkpoint <file>" if self.unified else
                "type=bool --resume" if resume_flag == "bool" else "store_true --resume")
        # the `started` event's words: the built-in trainer's in a person's terms (its flags are isaacd's business)
        self.contract = (f"built-in trainer (Isaac Lab {generation.label} contract)" if builtin else
                         f"Isaac Lab {generation.label} rsl_rl: {kind} (from {generation.source})")

    def experiment_dir(self, job: JobConfig) -> Path:
        return job.log_root / "rsl_rl" / job.experiment_name

    def run_dir_re(self, job: JobConfig) -> re.Pattern[str]:
        return re.compile(rf"^{TIMESTAMP_RE}_{re.escape(job.name)}$")

    def iterations_to_request(self, job: JobConfig, resume: Checkpoint | None) -> int:
        # rsl_rl re-runs iteration N after loading model_N.pt, and counts --max_iterations from there
        return job.max_iterations - (resume.iteration if resume else 0)

    def args(self, job: JobConfig, resume: Checkpoint | None, seed: int) -> list[str]:
        args = ["--task", job.task, "--num_envs", str(job.num_envs), "--seed", str(seed),
                "--max_iterations", str(self.iterations_to_request(job, resume)), "--device", job.device,
                "--experiment_name", job.experiment_name, "--run_name", job.name]
        if job.agent:
            args += ["--agent", job.agent]
        if self.generation.major < 3:
            args.append("--headless")  # 3.x is headless by default and deprecates the flag
        args.append(f"agent.save_interval={job.save_interval}")  # a Hydra override, as upstream documents
        if job.ranks == 1:
            # --device moves only the simulation: the policy stays on RslRlBaseRunnerCfg.device ("cuda:0") unless
            # --distributed (3.0.0 train_rsl_rl._run; 2.x train.py @011c373c). A cpu job would fail ("Torch not
            # compiled with CUDA enabled"), a cuda:1 job would train its policy on another job's GPU 0.
            args += [f"{key}={job.device}" for key in RSL_RL_DEVICE_KEYS]
        if self.resume_flag == "bool" and not self.unified:
            # <= 2.0's update_rsl_rl_cfg never applies --experiment_name (cli_args.py @fe626787): say it to Hydra too
            args.append(f"agent.experiment_name={job.experiment_name}")
        if resume is not None:
            args += self.resume_args(resume)
        return args + list(job.extra_args)

    def resume_args(self, resume: Checkpoint) -> list[str]:
        if self.unified:
            return ["--checkpoint", str(resume.path)]
        flag = ["--resume", "True"] if self.resume_flag == "bool" else ["--resume"]
        return flag + ["--load_run", regex_literal(resume.path.parent.name),
                       "--checkpoint", regex_literal(resume.path.name)]
