"""`[jobs.eval]`: evaluate the job's checkpoints beside training (issue 41; /work/notes/eval-design.md A).

Which checkpoints (`every`), how (`episodes`, `num_envs`, `seed`: the same for every checkpoint, so scores compare),
where (on the job's GPU where `gpu_memory` is free, or on the CPU), with a video or not, and how long and how often
one may fail. Each bad value is one line naming the key and the fix (config/errors.py); what depends on the job
(its device, its runtime) is checked by `refusal`, which JobConfig calls.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .sizes import Size, gib, size_bytes

Seconds = Annotated[float, Field(gt=0)]
# runtimes whose launch cannot start an evaluation process yet, and why (the process runtime can)
UNSUPPORTED_RUNTIMES = {
    "podman": "an evaluation would be a third container of the job's spec (its name, its environment, its cleanup), "
              "which isaacd does not make yet",
    "systemd": "a systemd unit runs one trainer per job, and isaacd cannot start an evaluation unit beside it yet",
    "ray": "isaacd cannot place an evaluation beside the trainer on a Ray node yet",
}


GPU_COST_BUDGET = 0.005  # max_training_cost's default for an evaluation on the job's GPU


class EvalConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    # every Nth complete checkpoint (by order of iteration), or "best": each checkpoint whose smoothed training
    # reward (the newest Train/mean_reward at or before its iteration) is a new best of the run
    every: Annotated[int, Field(ge=1)] | Literal["best"] = 1
    episodes: Annotated[int, Field(ge=1, le=1_000_000)] = 100  # completed episodes counted
    # environments of the evaluation (None: = episodes); each contributes its first ceil(episodes / num_envs)
    # episodes, so short episodes are not favoured
    num_envs: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    seed: int = 42  # the same for every checkpoint: scores compare
    # on the job's own GPU, where NVML shows this much free; it yields to any job the queue places
    gpu_memory: Size | None = None
    # "cpu": on the CPU; "cuda": on the GPU (with gpu_memory). None: the CPU for a CPU job, the GPU with gpu_memory
    device: str | None = None
    video: bool = False  # an MP4 (and a small GIF) of the evaluated checkpoint, where Isaac Lab can render
    video_length: Annotated[int, Field(ge=1)] = 200  # steps
    deadline_seconds: Seconds = 600.0  # an evaluation running longer is killed and retried
    retries: Annotated[int, Field(ge=1)] = 3  # failed attempts of one checkpoint before it is given up
    # The share of the training's time one evaluation may cost it, as measured from the trainer's iteration times
    # (evals/pacing.py): after each evaluation the next waits until that cost is at most this share of the time since
    # the last one started. Unset: 0.005 for evaluations on the job's GPU (on H100s each cost the cart-pole's trainer
    # 0.24-1.1 s: 2-7 % of its throughput back to back; paced at 0.01 it ran at 0.99 x, on the goal's edge, as one
    # evaluation's measure is noisy: half of it keeps the training above 0.99 x), 0 (no wait) on the CPU, whose
    # evaluations keep off the trainer's cores. 0: never wait.
    max_training_cost: Annotated[float, Field(ge=0, lt=1)] | None = None

    @field_validator("gpu_memory")
    @classmethod
    def _gpu_memory(cls, v: str | None) -> str | None:
        if v is not None and size_bytes(v) <= 0:
            raise ValueError('must be more than 0, e.g. gpu_memory = "4GiB"')
        return v

    @field_validator("device")
    @classmethod
    def _device(cls, v: str | None) -> str | None:
        if v is not None and v not in ("cpu", "cuda"):
            hint = (": an evaluation runs on the job's own GPU (isaacd picks it), so write \"cuda\" with gpu_memory"
                    if v.startswith("cuda:") else "")
            raise ValueError(f'device = "{v}" is not a place to evaluate; write "cpu" or "cuda"{hint}')
        return v

    @field_validator("deadline_seconds")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a number of seconds, e.g. deadline_seconds = 600")
        return v

    @model_validator(mode="after")
    def _where(self) -> "EvalConfig":
        if self.device == "cpu" and self.gpu_memory is not None:
            raise ValueError('device = "cpu" with gpu_memory: an evaluation runs on the CPU or on a GPU; remove '
                             'gpu_memory (CPU) or device (GPU)')
        if self.device == "cuda" and self.gpu_memory is None:
            raise ValueError('device = "cuda" needs gpu_memory, what the evaluation needs free on the job\'s GPU '
                             '(e.g. gpu_memory = "4GiB"), or device = "cpu"')
        if self.num_envs is not None and self.num_envs > self.episodes:
            raise ValueError(f"num_envs = {self.num_envs} is above episodes = {self.episodes}: each environment "
                             f"counts at least one episode; set num_envs to at most {self.episodes}")
        return self

    @property
    def envs(self) -> int:
        """The evaluation's environments: num_envs, else one per episode."""
        return self.num_envs if self.num_envs is not None else self.episodes

    @property
    def per_env(self) -> int:
        """Episodes each environment contributes (its first ones): ceil(episodes / envs)."""
        return -(-self.episodes // self.envs)

    @property
    def on_gpu(self) -> bool:
        return self.gpu_memory is not None

    @property
    def cost_budget(self) -> float:
        """max_training_cost, or its default: 0.005 on the job's GPU, 0 (no pacing) on the CPU."""
        if self.max_training_cost is not None:
            return self.max_training_cost
        return GPU_COST_BUDGET if self.on_gpu else 0.0

    @property
    def gpu_memory_bytes(self) -> int | None:
        return size_bytes(self.gpu_memory) if self.gpu_memory else None

    @property
    def every_text(self) -> str:
        """ "1", "5", "best": `EvalsStatus.every`."""
        return str(self.every)

    def where(self, gpu: int | str | None = None) -> str:
        """ "cpu", or "gpu 0 (4 GiB)" (`EvalsStatus.where`); `gpu`: the GPU chosen, where known."""
        if not self.on_gpu:
            return "cpu"
        return f"gpu{'' if gpu is None else f' {gpu}'} ({gib(self.gpu_memory_bytes or 0)})"


def refusal(job: Any) -> str | None:
    """Why the job's [jobs.eval] cannot run with the rest of the job (its runtime, its device, its shim), or None.
    `job` is a JobConfig (duck-typed: schema.py imports this module)."""
    cfg: EvalConfig | None = job.eval
    if cfg is None:
        return None
    if job.runtime in UNSUPPORTED_RUNTIMES:
        return (f'[jobs.eval] with runtime = "{job.runtime}": {UNSUPPORTED_RUNTIMES[job.runtime]}; evaluations run '
                'with runtime = "process" (or remove [jobs.eval])')
    if not job.shim:
        return ("[jobs.eval] with shim = false: an evaluation runs through isaacd's shim (it counts the episodes and "
                "ends the play loop); set shim = true or remove [jobs.eval]")
    if job.workflow in ("rl_games", "skrl"):
        return (f'[jobs.eval] with workflow = "{job.workflow}": evaluation of {job.workflow} checkpoints is not built '
                'yet (rsl_rl and the built-in trainer are); remove [jobs.eval]')
    if job.ranks > 1:
        return (f"[jobs.eval] on a job of {job.ranks} ranks: an evaluation is one process, and launching one from a "
                "multi-rank job's command line is not built yet; remove [jobs.eval] (or train on one GPU)")
    if job.device == "cpu":
        if cfg.on_gpu:
            return ('[jobs.eval] gpu_memory on a job with device = "cpu": the job has no GPU to evaluate on; remove '
                    'eval.gpu_memory (it evaluates on the CPU)')
        return None
    if not cfg.on_gpu and cfg.device != "cpu":
        return (f'[jobs.eval] on a GPU job (device = "{job.device}") needs gpu_memory, what an evaluation needs free '
                'on the job\'s GPU (e.g. gpu_memory = "4GiB"), or device = "cpu" to evaluate on the CPU')
    return None
