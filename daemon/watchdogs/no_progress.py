"""No new TensorBoard step for `timeout` seconds while the trainer is alive: a hang or deadlock."""

from __future__ import annotations

from .base import JobView, Verdict, Watchdog
from ..config.watchdogs import NoProgress


class NoProgressWatchdog(Watchdog):
    name = "no_progress"
    cfg: NoProgress

    def evaluate(self, view: JobView) -> Verdict:
        ref = view.last_progress_time
        if ref is None or (view.attempt_started_at is not None and ref < view.attempt_started_at):
            ref = view.attempt_started_at  # no step yet in this attempt: count from its start
        if ref is None:
            return Verdict(False)
        silent = view.now - ref
        return Verdict(silent >= self.cfg.timeout,
                       f"no new training step for {silent:.0f} s (timeout {self.cfg.timeout:g} s)",
                       {"seconds_since_progress": round(silent, 1), "iteration": view.iteration},
                       self.cfg.timeout)
