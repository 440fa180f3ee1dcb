"""GPU temperature, graduated: log -> power-cap (step down while hot, restore when cool) -> stop
above a hard limit, and resume the job once every GPU is back under resume_celsius.

"Hot" uses the guide's threshold (> 85 C for 30 s), the driver's own slowdown threshold minus a
margin where NVML reports one, the HBM temperature against its own maximum, and the
HW-thermal-slowdown clock-event reason. One hot GPU of a multi-GPU job is enough.
"""

from __future__ import annotations

from typing import Any

from ..jobs.messages import Start, WatchdogAction
from ..jobs.model import Origin
from ..daemon_log import log
from .base import GpuReading, JobView, Verdict, Watchdog
from ..config.watchdogs import GpuTemperature


class GpuTemperatureWatchdog(Watchdog):
    name = "gpu_temperature"
    # recovery (resume once cool) is driven by the engine, which looks at the GPUs while the job is parked
    cfg: GpuTemperature

    def possible_actions(self) -> set[WatchdogAction]:
        # stop above the hard limit; log when capping is refused
        return {WatchdogAction(self.cfg.action), WatchdogAction.STOP, WatchdogAction.LOG}

    def hot_reason(self, g: GpuReading) -> str | None:
        c = self.cfg
        t = g.temperature_celsius
        if t is not None and t > c.threshold_celsius:
            return f"GPU {g.index} at {t:.0f} C > {c.threshold_celsius:g} C"
        if t is not None and g.slowdown_celsius is not None and t >= g.slowdown_celsius - c.slowdown_margin_celsius:
            return f"GPU {g.index} at {t:.0f} C, within {c.slowdown_margin_celsius:g} C of its slowdown threshold {g.slowdown_celsius:.0f} C"
        m = g.memory_temperature_celsius
        if m is not None and g.memory_max_celsius is not None and m >= g.memory_max_celsius - c.slowdown_margin_celsius:
            return f"GPU {g.index} HBM at {m:.0f} C near its maximum {g.memory_max_celsius:.0f} C"
        if g.hw_thermal_slowdown:
            return f"GPU {g.index} reports HW thermal slowdown"
        return None

    def evaluate(self, view: JobView) -> Verdict:
        if not view.gpus:
            return Verdict(False, "no GPU readings for this job")
        temps = {f"gpu{g.index}_celsius": g.temperature_celsius for g in view.gpus}
        hottest = max((g.temperature_celsius for g in view.gpus if g.temperature_celsius is not None), default=None)
        if hottest is not None and hottest >= self.cfg.stop_celsius:
            return Verdict(True, f"GPU at {hottest:.0f} C >= hard limit {self.cfg.stop_celsius:g} C",
                           temps, self.cfg.stop_celsius, action=WatchdogAction.STOP)
        reasons = [r for g in view.gpus if (r := self.hot_reason(g))]
        if reasons:
            return Verdict(True, "; ".join(reasons), temps, self.cfg.threshold_celsius)
        return Verdict(False, f"hottest {hottest:.0f} C" if hottest is not None else "", temps)

    def cool_enough(self, view: JobView) -> bool:
        temps = [g.temperature_celsius for g in view.gpus if g.temperature_celsius is not None]
        return bool(temps) and max(temps) < self.cfg.resume_celsius and not any(g.hw_thermal_slowdown for g in view.gpus)


class ThermalControl:
    """What the temperature watchdog does beyond a trip: lower a hot GPU's power limit a step at a time, put it
    back once the GPUs are under resume_celsius, and resume a job it parked (a `Start` with origin thermal; the
    job's state machine accepts that only from a job this watchdog parked). GPU-level state lives here, never in
    a job's history."""

    def __init__(self, feed: Any):
        self.feed = feed
        self.original_power: dict[int, float] = {}  # GPU -> power limit before we capped it

    def power_cap(self, view: JobView, cfg: Any) -> str | None:
        """Lower the power limit of the job's hot GPUs by one step; None on success, else why not."""
        for g in view.gpus:
            if g.power_limit_watts is None:
                return f"GPU {g.index}: power limit not readable; cannot cap"
            new = max(g.power_limit_watts - cfg.power_cap_step_watts, cfg.min_power_limit_watts)
            if new >= g.power_limit_watts:
                continue
            try:
                self.feed.set_power_limit(g.index, new)
            except Exception as exc:  # noqa: BLE001 - PermissionError (not root), driver refusal, GPU lost
                log.warning("power_cap_unavailable", job=view.name, gpu=g.index, error=str(exc))
                return (f"cannot lower the power limit of GPU {g.index} ({exc}); power-cap needs root and a driver "
                        "that allows it: degraded to log")
            self.original_power.setdefault(g.index, g.default_power_limit_watts or g.power_limit_watts)
            log.warning("power_capped", job=view.name, gpu=g.index, watts=new)
        return None

    def resume(self, job: str, parked_by: str | None, stopped: bool, wd: "GpuTemperatureWatchdog",
               view: JobView) -> Start | None:
        """Once the job's GPUs are cool: restore their power limits, and resume the job if this watchdog parked it."""
        if not wd.cfg.enabled or not wd.cool_enough(view):
            return None
        for g in view.gpus:
            if g.index in self.original_power:
                watts = self.original_power.pop(g.index)
                try:
                    self.feed.set_power_limit(g.index, watts)
                    log.info("power_restored", job=job, gpu=g.index, watts=watts,
                             detail=f"below {wd.cfg.resume_celsius:g} C")
                except Exception as exc:  # noqa: BLE001
                    log.warning("power_restore_failed", gpu=g.index, error=str(exc))
        if parked_by == "gpu_temperature" and stopped:
            hottest = max((g.temperature_celsius or 0 for g in view.gpus), default=0)
            return Start(Origin.THERMAL, f"watchdog gpu_temperature: GPUs back under {wd.cfg.resume_celsius:g} C "
                                         f"(hottest {hottest:.0f} C); resuming")
        return None

    def restore_power_limits(self, why: str) -> None:
        for gpu, watts in list(self.original_power.items()):
            try:
                self.feed.set_power_limit(gpu, watts)
                log.info("power_restored", gpu=gpu, watts=watts, reason=why)
            except Exception:  # noqa: BLE001
                pass
            self.original_power.pop(gpu, None)
