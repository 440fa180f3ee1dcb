"""The shape every watchdog shares: a condition, a hold time, a warm-up, a cooldown, an action.

A watchdog subclass only says whether its condition holds now (and why); this base turns that into
states (warmup / ok / pending since T / tripped / cooling-down) and trips, the same way for all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..jobs.messages import WatchdogAction
from ..observations.tensorboard import ScalarPoint
from ..config.watchdogs import WatchdogCommon
from ..status.types import WatchdogState, WatchdogStatus


@dataclass(frozen=True)
class GpuReading:
    """What the watchdogs need of one GPU, taken from the GPU sampler's snapshot."""

    index: int
    uuid: str = ""
    temperature_celsius: float | None = None
    memory_temperature_celsius: float | None = None
    slowdown_celsius: float | None = None  # the driver's own slowdown threshold
    memory_max_celsius: float | None = None
    utilization_ratio: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    default_power_limit_watts: float | None = None
    hw_thermal_slowdown: bool = False


@dataclass(frozen=True)
class XidEvent:
    gpu: int
    xid: int
    time: float


@dataclass
class JobView:
    """One tick's view of a job, built by the engine from the runner and the GPU snapshot."""

    name: str
    now: float
    alive: bool  # a trainer process/container exists and is not being stopped
    attempt_started_at: float | None
    attempt_first_step: int | None
    iteration: int | None
    last_progress_time: float | None
    new_points: list[ScalarPoint] = field(default_factory=list)
    gpus: list[GpuReading] = field(default_factory=list)
    new_xids: list[XidEvent] = field(default_factory=list)
    attempt: int = 0


@dataclass(frozen=True)
class Verdict:
    """A subclass's answer for this tick."""

    active: bool  # the condition holds
    detail: str = ""
    values: dict[str, Any] = field(default_factory=dict)  # signal values for the event
    threshold: Any = None
    action: WatchdogAction | None = None  # override of cfg.action (graduated watchdogs)
    immediate: bool = False  # ignore the hold (NaN, a reset-class XID)
    trouble_iteration: int | None = None  # for rollback: the first bad iteration


@dataclass(frozen=True)
class Trip:
    watchdog: str
    action: WatchdogAction
    detail: str
    values: dict[str, Any]
    threshold: Any
    hold: float
    trouble_iteration: int | None = None
    new_seed: bool = False


class Watchdog:
    name = "watchdog"
    needs_alive = True  # most conditions only make sense while a trainer runs

    def __init__(self, cfg: WatchdogCommon):
        self.cfg = cfg
        self.pending_since: float | None = None
        self.last_action_at: float | None = None
        self.state = WatchdogState.OK
        self.detail = ""
        self._attempt = -1

    # --- subclass API
    def evaluate(self, view: JobView) -> Verdict:
        raise NotImplementedError

    def on_new_attempt(self, view: JobView) -> None:
        """A new trainer attempt started: drop per-run history."""

    def after_trip(self) -> None:
        """Forget the evidence that caused a trip, so one fault trips once."""

    # --- shared logic
    def in_warmup(self, view: JobView) -> bool:
        if view.attempt_started_at is not None and view.now - view.attempt_started_at < self.cfg.warmup_seconds:
            return True
        if self.cfg.warmup_iterations:
            done = (view.iteration - view.attempt_first_step + 1
                    if view.iteration is not None and view.attempt_first_step is not None else 0)
            return done < self.cfg.warmup_iterations
        return False

    def step(self, view: JobView) -> Trip | None:
        if not self.cfg.enabled:
            self.state = WatchdogState.DISABLED
            return None
        if view.attempt != self._attempt:
            self._attempt = view.attempt
            self.pending_since = None
            self.on_new_attempt(view)
        if self.needs_alive and not view.alive:
            self.pending_since = None
            self.state, self.detail = WatchdogState.OK, ""
            return None
        # Series watchdogs must see every point, warm-up or not, so their windows are full afterwards.
        verdict = self.evaluate(view)
        if self.in_warmup(view):
            self.pending_since = None
            self.state, self.detail = WatchdogState.WARMUP, ""
            return None
        if self.last_action_at is not None and view.now - self.last_action_at < self.cfg.cooldown:
            self.state, self.detail = WatchdogState.COOLDOWN, verdict.detail
            return None
        if not verdict.active:
            self.pending_since = None
            self.state, self.detail = WatchdogState.OK, verdict.detail
            return None
        if self.pending_since is None:
            self.pending_since = view.now
        if not verdict.immediate and view.now - self.pending_since < self.cfg.hold:
            self.state, self.detail = WatchdogState.PENDING, verdict.detail
            return None
        action = verdict.action or WatchdogAction(self.cfg.action)
        trip = Trip(self.name, action, verdict.detail, verdict.values, verdict.threshold, self.cfg.hold,
                    verdict.trouble_iteration, bool(getattr(self.cfg, "new_seed", False)))
        self.after_trip()
        self.last_action_at = view.now
        self.pending_since = None
        self.state, self.detail = WatchdogState.TRIPPED, verdict.detail
        return trip

    def possible_actions(self) -> set[WatchdogAction]:
        return {WatchdogAction(self.cfg.action)}

    _shown: tuple[tuple[object, ...], object, WatchdogStatus] | None = None

    def status(self) -> WatchdogStatus:
        """Made again only when the watchdog's state or its config changed: read for every job at every publish
        (issue 39: 1,000 jobs), while a queued job's watchdogs stand still."""
        key = (self.state, self.pending_since, self.last_action_at, self.detail)
        last = self._shown
        if last is not None and last[1] is self.cfg and last[0] == key:
            return last[2]
        shown = self.fresh_status()
        self._shown = (key, self.cfg, shown)
        return shown

    def fresh_status(self) -> WatchdogStatus:
        acted = self.state in (WatchdogState.TRIPPED, WatchdogState.COOLDOWN)
        return WatchdogStatus(state=self.state, since=self.pending_since if self.state == WatchdogState.PENDING else
                              (self.last_action_at if acted else None),
                              detail=self.detail, action=self.cfg.action, actions=tuple(sorted(self.possible_actions())))
