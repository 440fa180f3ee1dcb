"""Low GPU duty cycle: the job's GPUs idle (the guide: < 10 % for 5 min), or a NCCL-style spin
hang (utilization ~100 % with near-idle power), in both cases with no training progress.

Progress vetoes the trip: a checkpoint save or an evaluation phase idles the GPU briefly while
steps keep arriving.
"""

from __future__ import annotations

from .base import JobView, Verdict, Watchdog
from ..config.watchdogs import DutyCycle


class DutyCycleWatchdog(Watchdog):
    name = "duty_cycle"
    cfg: DutyCycle

    def evaluate(self, view: JobView) -> Verdict:
        gpus = [g for g in view.gpus if g.utilization_ratio is not None]
        if not gpus:
            return Verdict(False, "no GPU utilization for this job's GPUs")
        c = self.cfg
        idle = all(g.utilization_ratio < c.min_utilization_ratio for g in gpus)  # type: ignore[operator]
        spin = all(g.utilization_ratio >= c.spin_utilization_ratio and g.power_watts is not None  # type: ignore[operator]
                   and g.power_limit_watts and g.power_watts < c.spin_power_ratio * g.power_limit_watts
                   for g in gpus)
        # a fresh attempt gets the same grace from its start: booting is not hanging
        ref = max((t for t in (view.last_progress_time, view.attempt_started_at) if t is not None), default=None)
        progressing = ref is not None and view.now - ref < c.progress_grace
        values = {f"gpu{g.index}_utilization_ratio": g.utilization_ratio for g in gpus}
        values.update({f"gpu{g.index}_power_watts": g.power_watts for g in gpus})
        if progressing:
            return Verdict(False, "training is progressing", values)
        if idle:
            return Verdict(True, f"GPU utilization below {c.min_utilization_ratio:.0%} on all job GPUs, no progress",
                           values, c.min_utilization_ratio)
        if spin:
            return Verdict(True, "GPU busy at near-idle power with no progress (spin hang, e.g. NCCL)",
                           values, c.spin_power_ratio)
        return Verdict(False, "", values)
