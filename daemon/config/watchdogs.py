"""Per-job watchdog settings: `[jobs.watchdogs.<name>]`.

Every watchdog has the same shape (signal, condition, hold time `for`, warm-up, cooldown, action);
the defaults are the deployment guide's rules with conservative actions where a trip can be a
false positive (a flat PPO loss is not proof of a stuck run).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..jobs.policy import DEFAULT_MAX_ROLLBACKS

Action = Literal["log", "restart", "rollback", "stop", "power-cap"]
Seconds = Annotated[float, Field(ge=0)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


class WatchdogCommon(_Model):
    enabled: bool = True
    hold: Seconds = Field(0.0, alias="for", description="condition must hold this long before the trip")
    warmup_seconds: Seconds = 300.0  # Isaac Sim can sit at 0 % GPU for minutes while it boots
    warmup_iterations: Annotated[int, Field(ge=0)] = 0
    cooldown: Seconds = 300.0
    action: Action = "log"

    allowed_actions: ClassVar[frozenset[str]] = frozenset({"log", "restart", "rollback", "stop"})

    @model_validator(mode="after")
    def _action_allowed(self) -> "WatchdogCommon":
        if self.action not in self.allowed_actions:
            raise ValueError(f'action "{self.action}" is not available here; use one of: '
                             + ", ".join(sorted(self.allowed_actions)))
        return self


class NoProgress(WatchdogCommon):
    timeout: Annotated[float, Field(gt=0)] = 600.0
    action: Action = "restart"


class DutyCycle(WatchdogCommon):
    hold: Seconds = Field(300.0, alias="for")
    min_utilization_ratio: Annotated[float, Field(ge=0, le=1)] = 0.10
    # NCCL-style spin hang: utilization high, power near idle, and no training progress.
    spin_power_ratio: Annotated[float, Field(ge=0, le=1)] = 0.25
    spin_utilization_ratio: Annotated[float, Field(ge=0, le=1)] = 0.90
    # A step seen within this window means the job is progressing (checkpoint save, eval).
    progress_grace: Seconds = 120.0
    action: Action = "restart"


class LossStagnation(WatchdogCommon):
    tags: list[str] = ["Loss/value_function", "Loss/value", "Loss/surrogate"]
    window: Annotated[int, Field(ge=2)] = 10
    min_std: Annotated[float, Field(ge=0)] = 1e-5
    warmup_iterations: Annotated[int, Field(ge=0)] = 20
    action: Action = "log"


class RewardPlateau(WatchdogCommon):
    tag: str = "Train/mean_reward"
    mode: Literal["max", "min"] = "max"
    patience: Annotated[int, Field(ge=1)] = 500
    min_delta: Annotated[float, Field(ge=0)] = 0.0
    warmup_iterations: Annotated[int, Field(ge=0)] = 50
    action: Action = "log"


class Divergence(WatchdogCommon):
    # Spikes are judged on the value loss only: the surrogate loss hovers around 0 with either sign, so
    # "10x its median" is noise there (seen on an H200: 0.004 vs a median of 0.0004 in a healthy run), and a
    # reward that jumps is learning, not diverging. Every tag below is still checked for NaN/inf.
    tags: list[str] = ["Loss/value_function", "Loss/value"]
    nonfinite_tags: list[str] = ["Loss/value_function", "Loss/value", "Loss/surrogate", "Loss/entropy",
                                 "Train/mean_reward", "Train/mean_episode_length"]
    spike_factor: Annotated[float, Field(gt=1)] = 10.0
    # A spike is divergence only when this many consecutive iterations stay above the line. One outlier is
    # learning noise: seen on the built-in cartpole, a resumed run's value loss went 36 -> 56 -> 19 against a
    # median of ~5 (longer episodes, larger returns) and a lone 56 tripped a rollback. A diverged run stays up.
    spike_iterations: Annotated[int, Field(ge=1)] = 3
    median_window: Annotated[int, Field(ge=3)] = 20
    # A converged value loss is tiny and noisy (0.01 -> 0.3 is no divergence): the reference is at least
    # this fraction of the largest value seen in the run. Measured on an H200 healthy run: 26 false
    # rollbacks in 300 iterations without it, none with it.
    peak_floor_ratio: Annotated[float, Field(ge=0, le=1)] = 0.05
    max_rollbacks: Annotated[int, Field(ge=0)] = DEFAULT_MAX_ROLLBACKS
    new_seed: bool = True
    warmup_iterations: Annotated[int, Field(ge=0)] = 5
    warmup_seconds: Seconds = 0.0
    cooldown: Seconds = 0.0
    action: Action = "rollback"


class GpuTemperature(WatchdogCommon):
    hold: Seconds = Field(30.0, alias="for")
    threshold_celsius: Annotated[float, Field(gt=0, lt=130)] = 85.0
    stop_celsius: Annotated[float, Field(gt=0, lt=130)] = 92.0
    resume_celsius: Annotated[float, Field(gt=0, lt=130)] = 75.0
    # below the driver's own slowdown threshold by this margin counts as hot too
    slowdown_margin_celsius: Annotated[float, Field(ge=0)] = 3.0
    power_cap_step_watts: Annotated[float, Field(gt=0)] = 50.0
    min_power_limit_watts: Annotated[float, Field(gt=0)] = 200.0
    warmup_seconds: Seconds = 0.0
    cooldown: Seconds = 60.0
    action: Action = "power-cap"
    allowed_actions: ClassVar[frozenset[str]] = frozenset({"log", "power-cap", "stop"})

    @model_validator(mode="after")
    def _ordered(self) -> "GpuTemperature":
        if not self.resume_celsius < self.threshold_celsius <= self.stop_celsius:
            raise ValueError("need resume_celsius < threshold_celsius <= stop_celsius")
        return self


class Xid(WatchdogCommon):
    application_xids: list[int] = [13, 31, 43, 45, 68, 69]
    reset_xids: list[int] = [48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 123, 140]
    application_action: Action = "restart"
    reset_action: Action = "stop"
    warmup_seconds: Seconds = 0.0
    cooldown: Seconds = 0.0


class WatchdogsConfig(_Model):
    no_progress: NoProgress = NoProgress()
    duty_cycle: DutyCycle = DutyCycle()
    loss_stagnation: LossStagnation = LossStagnation()
    reward_plateau: RewardPlateau = RewardPlateau()
    divergence: Divergence = Divergence()
    gpu_temperature: GpuTemperature = GpuTemperature()
    xid: Xid = Xid()
