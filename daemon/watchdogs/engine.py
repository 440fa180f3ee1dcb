"""Runs every job's watchdogs once per supervisor tick and turns trips into commands for the jobs.

The engine reads each job's signals (a value the runner hands out) and the GPU feed, and returns
commands (`WatchdogTrip`, and the thermal watchdog's `Start` once the GPUs cool down) for the job's
state machine, which counts them, bounds rollbacks and acts. It never touches job history. What is
GPU-level, not job-level, stays here: lowering and restoring power limits, marking a GPU unhealthy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..gpu.assign import job_gpu_indices
from ..jobs.messages import Command, Start, WatchdogTrip
from ..jobs.model import JobState, Origin
from ..logs import log
from .base import JobView, Trip, Watchdog
from .config import WatchdogsConfig
from .divergence import DivergenceWatchdog
from .duty_cycle import DutyCycleWatchdog
from .gpufeed import FeedTick
from .gpu_temperature import GpuTemperatureWatchdog
from .loss_stagnation import LossStagnationWatchdog
from .no_progress import NoProgressWatchdog
from .reward_plateau import RewardPlateauWatchdog
from .xid import XidWatchdog

if TYPE_CHECKING:
    from ..runner import JobSignals
    from ..supervisor import Supervisor

WATCHDOG_CLASSES = {
    "no_progress": NoProgressWatchdog,
    "duty_cycle": DutyCycleWatchdog,
    "loss_stagnation": LossStagnationWatchdog,
    "reward_plateau": RewardPlateauWatchdog,
    "divergence": DivergenceWatchdog,
    "gpu_temperature": GpuTemperatureWatchdog,
    "xid": XidWatchdog,
}


class GpuFeed(Protocol):
    """What the watchdogs need from the GPU collector; see gpufeed.SamplerFeed."""

    def poll(self) -> FeedTick: ...

    def set_power_limit(self, gpu: int, watts: float) -> None:
        """Raises PermissionError when not allowed (not root, or the driver refuses)."""

    def mark_unhealthy(self, gpu: int, reason: str) -> None: ...


def make_watchdogs(cfg: WatchdogsConfig) -> dict[str, Watchdog]:
    return {name: cls(getattr(cfg, name)) for name, cls in WATCHDOG_CLASSES.items()}


class WatchdogEngine:
    def __init__(self, supervisor: "Supervisor", feed: GpuFeed):
        self.sup = supervisor
        self.feed = feed
        self.sets: dict[str, tuple[WatchdogsConfig, dict[str, Watchdog]]] = {}
        self.original_power: dict[int, float] = {}  # GPU -> power limit before we capped it

    # extension protocol
    def start(self) -> None:
        self.sup.tick_hooks.append(self.tick)
        self.sup.job_status_hooks.append(self.job_status)

    def stop(self) -> None:
        self.restore_power_limits("supervisor stopping")

    def _watchdogs(self, sig: "JobSignals") -> dict[str, Watchdog]:
        cur = self.sets.get(sig.name)
        if cur is None or cur[0] != sig.cfg.watchdogs:
            cur = (sig.cfg.watchdogs, make_watchdogs(sig.cfg.watchdogs))
            self.sets[sig.name] = cur
        return cur[1]

    def view(self, sig: "JobSignals", now: float, feed: FeedTick) -> JobView:
        gpus = job_gpu_indices(sig.cfg, feed.readings, feed.processes, sig.pids)
        return JobView(
            name=sig.name, now=now, alive=sig.alive,
            attempt_started_at=sig.attempt_started_at,
            attempt_first_step=sig.first_step,
            iteration=sig.iteration,
            last_progress_time=sig.last_progress_time,
            new_points=list(sig.new_points),
            gpus=[r for r in feed.readings if r.index in gpus],
            new_xids=[x for x in feed.new_xids if x.gpu in gpus],
            attempt=sig.attempt,
        )

    def tick(self, now: float) -> list[tuple[str, Command]]:
        """`now` is monotonic. Returns the commands for the supervisor to hand to each job's state machine."""
        feed = self.feed.poll()
        commands: list[tuple[str, Command]] = []
        for runner in list(self.sup.runners.values()):
            sig = runner.signals()
            view = self.view(sig, now, feed)
            for wd in self._watchdogs(sig).values():
                trip = wd.step(view)
                if trip is not None:
                    commands.append((sig.name, self.command_for(wd, trip, view)))
                    if trip.action in ("restart", "rollback", "stop"):
                        view.alive = False  # one stop per tick: the others see the job as going down
            thermal = self._thermal_recovery(sig, view)
            if thermal is not None:
                commands.append((sig.name, thermal))
        return commands

    # ---- actions ---------------------------------------------------------------------------
    def command_for(self, wd: Watchdog, trip: Trip, view: JobView) -> WatchdogTrip:
        """The trip as a command. GPU-level actions happen here; job-level ones are the state machine's."""
        action, note = trip.action, None
        if action == "power-cap":
            note = self._power_cap(view, wd)
            if note is not None:
                action = "log"
        if action == "stop" and trip.watchdog == "xid":
            for g in {x["gpu"] for x in trip.values.get("xids", [])}:
                self.feed.mark_unhealthy(g, trip.detail)
        return WatchdogTrip(watchdog=trip.watchdog, action=action, configured_action=trip.action,
                            detail=trip.detail, values=trip.values, threshold=trip.threshold,
                            hold_seconds=trip.hold, trouble_iteration=trip.trouble_iteration,
                            new_seed=trip.new_seed, max_rollbacks=getattr(wd.cfg, "max_rollbacks", 3), note=note)

    def _power_cap(self, view: JobView, wd: Watchdog) -> str | None:
        """Lower the power limit of the job's hot GPUs by one step; None on success, else why not."""
        cfg = wd.cfg
        for g in view.gpus:
            if g.power_limit_watts is None:
                return f"GPU {g.index}: power limit not readable; cannot cap"
            new = max(g.power_limit_watts - cfg.power_cap_step_watts, cfg.min_power_limit_watts)  # type: ignore[attr-defined]
            if new >= g.power_limit_watts:
                continue
            try:
                self.feed.set_power_limit(g.index, new)
            except Exception as exc:  # noqa: BLE001 - PermissionError (not root), driver refusal, GPU lost
                msg = (f"cannot lower the power limit of GPU {g.index} ({exc}); power-cap needs root and a driver "
                       "that allows it: degraded to log")
                log.warning("power_cap_unavailable", job=view.name, gpu=g.index, error=str(exc))
                return msg
            self.original_power.setdefault(g.index, g.default_power_limit_watts or g.power_limit_watts)
            log.warning("power_capped", job=view.name, gpu=g.index, watts=new)
        return None

    def _thermal_recovery(self, sig: "JobSignals", view: JobView) -> Start | None:
        wd = self._watchdogs(sig).get("gpu_temperature")
        if not isinstance(wd, GpuTemperatureWatchdog) or not wd.cfg.enabled or not wd.cool_enough(view):
            return None
        for g in view.gpus:
            if g.index in self.original_power:
                watts = self.original_power.pop(g.index)
                try:
                    self.feed.set_power_limit(g.index, watts)
                    log.info("power_restored", job=sig.name, gpu=g.index, watts=watts,
                             detail=f"below {wd.cfg.resume_celsius:g} C")
                except Exception as exc:  # noqa: BLE001
                    log.warning("power_restore_failed", gpu=g.index, error=str(exc))
        if sig.parked_by == "gpu_temperature" and sig.state == JobState.STOPPED:
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

    # ---- read side -------------------------------------------------------------------------
    def job_status(self, job: str) -> dict[str, Any]:
        cur = self.sets.get(job)
        return {"watchdogs": {n: wd.status() for n, wd in cur[1].items()}} if cur is not None else {}
