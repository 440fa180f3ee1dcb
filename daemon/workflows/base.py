"""The one small interface every trainer contract implements.

A *workflow* is what isaacd must know about one way of driving a training program, and nothing
else: the flags for a fresh start and for a resume from a chosen checkpoint, where its runs and
checkpoints live, and what a checkpoint means in iterations done. How the program is started
(isaaclab.sh -p, a venv python, a container) is the launcher's business (`launcher.py`); how a
job's life goes is the runner's. One module per contract, like node_exporter's collectors.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from ..config.schema import JobConfig
from ..observations.checkpoints import Checkpoint, CheckpointLayout


class WorkflowError(Exception):
    """The job's config cannot be turned into a launch; `key` names the config key to fix."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key
        self.message = message


def regex_literal(text: str) -> str:
    """`^text$` as a regex that matches exactly `text`, without backslashes.

    Isaac Lab's --load_run/--checkpoint are regexes (`re.match`, sort, take the last), so an
    unanchored run name lets a sibling run (`..._job` vs `..._jobx`) win. Names here are
    [A-Za-z0-9_.-] plus timestamps; '.' is the only metacharacter, written as a class so the word
    survives shells, systemd unit quoting and Hydra untouched.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", text):
        raise ValueError(f"cannot anchor {text!r} safely")
    return "^" + text.replace(".", "[.]") + "$"


# The Hydra overrides that put a library's policy on the job's device (Isaac Lab's --device moves only the
# simulation): rsl_rl's runner cfg, rl_games' params.config. A container renumbers them with --device.
RSL_RL_DEVICE_KEYS = ("agent.device",)
RL_GAMES_DEVICE_KEYS = ("agent.params.config.device", "agent.params.config.device_name")
AGENT_DEVICE_KEYS = RSL_RL_DEVICE_KEYS + RL_GAMES_DEVICE_KEYS


@dataclass(frozen=True)
class Generation:
    """An Isaac Lab release line, and how isaacd learned it (said in errors and status)."""

    major: int
    minor: int
    source: str

    @property
    def label(self) -> str:
        return f"{self.major}.{self.minor}"


class Workflow(ABC):
    """One trainer contract. Instances are cheap and immutable; the runner asks, never tells."""

    library: str  # "rsl_rl" | "rl_games" | "skrl"
    contract: str  # human-readable, e.g. "Isaac Lab 2.1-2.3 rsl_rl (store_true --resume)"
    layout: CheckpointLayout

    @abstractmethod
    def experiment_dir(self, job: JobConfig) -> Path:
        """The directory whose children are this job's run dirs (one per launch)."""

    @abstractmethod
    def run_dir_re(self, job: JobConfig) -> re.Pattern[str]:
        """Names of run dirs this job's launches create: used only when no shim reports the run dir."""

    @abstractmethod
    def args(self, job: JobConfig, resume: Checkpoint | None, seed: int) -> list[str]:
        """The trainer's flags (after the script), for a fresh start or a resume from `resume`."""

    def iterations_done(self, ckpt: Checkpoint) -> int:
        """How many of the job's iterations the checkpoint's weights include."""
        return ckpt.iteration + 1

    def iterations_to_request(self, job: JobConfig, resume: Checkpoint | None) -> int:
        """What --max_iterations must say so the job ends at exactly `job.max_iterations`."""
        return job.max_iterations

    def progress_iteration(self, step: int, run_dir: Path | None, resume_iteration: int | None) -> int:
        """A TensorBoard step of a run, in the job's iterations (rsl_rl: the step is the iteration).

        For trainers whose steps restart with every run (skrl's timesteps) the runner maps the tail's
        `last_step` through this before showing it or handing it to `is_complete`; see docs/workflows.md.
        """
        return step

    def finished_early(self, job: JobConfig, run_dir: Path | None, latest: dict[str, float],
                       last_step: int | None) -> str | None:
        """After an exit 0 before the job's total: why the trainer was done anyway (its own stop rule), or None.

        `latest` is the run's last value per TensorBoard tag, `last_step` its largest step (the trainer's own
        numbering). A job done this way is completed, not restarted into the same stop again.
        """
        return None

    def is_complete(self, job: JobConfig, ckpt: Checkpoint | None, last_step: int | None) -> bool:
        """Whether the job's total is reached, from the newest checkpoint or the last logged step."""
        if ckpt is not None and self.iterations_done(ckpt) >= job.max_iterations:
            return True
        return last_step is not None and last_step + 1 >= job.max_iterations
