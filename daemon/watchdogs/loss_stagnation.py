"""Loss stagnation (the guide): the std of the last `window` logged values of a loss tag < min_std."""

from __future__ import annotations

import math
import statistics
from collections import deque

from .base import JobView, Verdict, Watchdog
from ..config.watchdogs import LossStagnation


class LossStagnationWatchdog(Watchdog):
    name = "loss_stagnation"
    cfg: LossStagnation

    def __init__(self, cfg: LossStagnation):
        super().__init__(cfg)
        self.windows: dict[str, deque[float]] = {}

    def on_new_attempt(self, view: JobView) -> None:
        self.windows.clear()

    def after_trip(self) -> None:
        self.windows.clear()

    def evaluate(self, view: JobView) -> Verdict:
        for p in view.new_points:
            if p.tag in self.cfg.tags and math.isfinite(p.value):
                self.windows.setdefault(p.tag, deque(maxlen=self.cfg.window)).append(p.value)
        for tag, win in sorted(self.windows.items()):
            if len(win) == self.cfg.window:
                std = statistics.pstdev(win)
                if std < self.cfg.min_std:
                    return Verdict(True, f"{tag}: std of the last {len(win)} values is {std:.3g} < {self.cfg.min_std:g}",
                                   {"tag": tag, "std": std, "last": win[-1], "iteration": view.iteration},
                                   self.cfg.min_std)
        return Verdict(False)
