"""Reward plateau with EarlyStopping semantics: no improvement by min_delta for `patience` iterations.

rsl_rl's mean reward is a rolling mean over finished episodes; it goes stale when none finish, so
this counts logged iterations, not wall time, and its default action is only `log`.
"""

from __future__ import annotations

import math

from .base import JobView, Verdict, Watchdog
from ..config.watchdogs import RewardPlateau


class RewardPlateauWatchdog(Watchdog):
    name = "reward_plateau"
    cfg: RewardPlateau

    def __init__(self, cfg: RewardPlateau):
        super().__init__(cfg)
        self.best: float | None = None
        self.best_step: int | None = None
        self.last_step: int | None = None

    def on_new_attempt(self, view: JobView) -> None:
        self.best = self.best_step = self.last_step = None

    def after_trip(self) -> None:
        self.best_step = self.last_step

    def evaluate(self, view: JobView) -> Verdict:
        sign = 1.0 if self.cfg.mode == "max" else -1.0
        for p in view.new_points:
            if p.tag != self.cfg.tag or not math.isfinite(p.value):
                continue
            self.last_step = p.step
            if self.best is None or sign * (p.value - self.best) > self.cfg.min_delta:
                self.best, self.best_step = p.value, p.step
        if self.best_step is None or self.last_step is None:
            return Verdict(False)
        waited = self.last_step - self.best_step
        return Verdict(waited >= self.cfg.patience,
                       f"{self.cfg.tag}: no improvement over {self.best:.4g} for {waited} iterations "
                       f"(patience {self.cfg.patience})",
                       {"tag": self.cfg.tag, "best": self.best, "best_iteration": self.best_step,
                        "iteration": self.last_step}, self.cfg.patience)
