"""GPU temperature, graduated: log -> power-cap (step down while hot, restore when cool) -> stop
above a hard limit, and resume the job once every GPU is back under resume_celsius.

"Hot" uses the guide's threshold (> 85 C for 30 s), the driver's own slowdown threshold minus a
margin where NVML reports one, the HBM temperature against its own maximum, and the
HW-thermal-slowdown clock-event reason. One hot GPU of a multi-GPU job is enough.
"""

from __future__ import annotations

from .base import GpuReading, JobView, Verdict, Watchdog
from .config import GpuTemperature


class GpuTemperatureWatchdog(Watchdog):
    name = "gpu_temperature"
    # recovery (resume once cool) is driven by the engine, which looks at the GPUs while the job is parked
    cfg: GpuTemperature

    def possible_actions(self) -> set[str]:
        return {self.cfg.action, "stop", "log"}  # stop above the hard limit; log when capping is refused

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
                           temps, self.cfg.stop_celsius, action="stop")
        reasons = [r for g in view.gpus if (r := self.hot_reason(g))]
        if reasons:
            return Verdict(True, "; ".join(reasons), temps, self.cfg.threshold_celsius)
        return Verdict(False, f"hottest {hottest:.0f} C" if hottest is not None else "", temps)

    def cool_enough(self, view: JobView) -> bool:
        temps = [g.temperature_celsius for g in view.gpus if g.temperature_celsius is not None]
        return bool(temps) and max(temps) < self.cfg.resume_celsius and not any(g.hw_thermal_slowdown for g in view.gpus)
