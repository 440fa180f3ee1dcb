"""Divergence: NaN/inf in a watched tag, or a value loss that stays above spike_factor x its rolling median.

A NaN trips at once; a spike only once `spike_iterations` consecutive iterations are above the line (a lone
outlier is forgotten). The trip names the first bad iteration so a rollback resumes from a checkpoint before it.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

from ..jobs.messages import WatchdogAction
from .base import JobView, Verdict, Watchdog
from ..config.watchdogs import Divergence


class DivergenceWatchdog(Watchdog):
    name = "divergence"
    cfg: Divergence

    def __init__(self, cfg: Divergence):
        super().__init__(cfg)
        # (step, value) per tag; kept across attempts so a resumed run is judged against the healthy past
        self.history: dict[str, deque[tuple[int, float]]] = {}
        self.trouble: tuple[int, str, float, float | None] | None = None
        self.peak: dict[str, float] = {}
        # per tag: the consecutive points above the line so far, (step, value, reference), oldest first
        self.streak: dict[str, list[tuple[int, float, float]]] = {}

    def possible_actions(self) -> set[WatchdogAction]:
        return {WatchdogAction(self.cfg.action), WatchdogAction.STOP}  # stop once max_rollbacks is used up

    def on_new_attempt(self, view: JobView) -> None:
        self.trouble = None
        self.streak.clear()

    def after_trip(self) -> None:
        self.trouble = None
        self.streak.clear()

    def evaluate(self, view: JobView) -> Verdict:
        for p in sorted(view.new_points, key=lambda p: p.step):
            if not math.isfinite(p.value) and (p.tag in self.cfg.nonfinite_tags or p.tag in self.cfg.tags):
                if self.trouble is None:
                    self.trouble = (p.step, p.tag, p.value, None)
                continue
            if p.tag not in self.cfg.tags:
                continue
            hist = self.history.setdefault(p.tag, deque(maxlen=self.cfg.median_window))
            while hist and hist[-1][0] >= p.step:
                hist.pop()  # a resume or rollback redoes these iterations: forget the abandoned values
            streak = self.streak.setdefault(p.tag, [])
            while streak and streak[-1][0] >= p.step:
                streak.pop()
            if len(hist) >= max(3, self.cfg.median_window // 2):
                median = statistics.median(abs(v) for _, v in hist)
                ref = max(median, self.cfg.peak_floor_ratio * self.peak.get(p.tag, 0.0))
                if ref > 0 and abs(p.value) > self.cfg.spike_factor * ref:
                    # kept out of the history, so the streak is judged against the level before it
                    streak.append((p.step, p.value, ref))
                    if len(streak) >= self.cfg.spike_iterations and self.trouble is None:
                        first_step, first_value, first_ref = streak[0]
                        self.trouble = (first_step, p.tag, first_value, first_ref)
                    continue
            if streak:
                # back under the line: the outliers were noise; they join the history like any value
                for step, value, _ in streak:
                    hist.append((step, value))
                    self.peak[p.tag] = max(self.peak.get(p.tag, 0.0), abs(value))
                streak.clear()
            hist.append((p.step, p.value))
            self.peak[p.tag] = max(self.peak.get(p.tag, 0.0), abs(p.value))
        if self.trouble is None:
            return Verdict(False)
        step, tag, value, median = self.trouble
        if median is None:
            detail = f"{tag} is {value} at iteration {step}"
        else:
            detail = f"{tag} = {value:.4g} at iteration {step}, {abs(value) / median:.1f}x its reference {median:.4g} " \
                     f"(rolling median, at least a fraction of the run's peak), and above it for " \
                     f"{self.cfg.spike_iterations} iterations in a row"
        return Verdict(True, detail, {"tag": tag, "value": value, "reference": median, "iteration": step},
                       self.cfg.spike_factor, immediate=median is None, trouble_iteration=step)
