"""Runs every job's watchdogs once per supervisor tick and turns trips into actions on the job.

Actions go through the same runner methods an operator uses (request_stop / start), so a
watchdog restart is resumed from the right checkpoint and counted like any other restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..jobs import JobState
from ..logs import log
from .base import GpuReading, JobView, Trip, Watchdog
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
    from ..runner import JobRunner
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


def job_gpu_indices(runner: "JobRunner", readings: list[GpuReading], procs: dict[int, set[int]]) -> set[int]:
    """The GPUs a job uses: what its config names, plus any GPU its processes are seen on."""
    cfg = runner.cfg
    out: set[int] = set()
    by_uuid = {g.uuid: g.index for g in readings}
    if cfg.gpus == "all":
        out.update(r.index for r in readings)
    for g in (cfg.gpus if isinstance(cfg.gpus, list) else []):
        if isinstance(g, int):
            out.add(g)
        elif g in by_uuid:
            out.add(by_uuid[g])
    if not cfg.gpus and cfg.device.startswith("cuda"):
        out.add(int(cfg.device.split(":")[1]) if ":" in cfg.device else 0)
    pids = set(runner.pids_cache)
    out.update(i for i, p in procs.items() if p & pids)
    return out


class WatchdogEngine:
    def __init__(self, supervisor: "Supervisor", feed: GpuFeed):
        self.sup = supervisor
        self.feed = feed
        self.sets: dict[str, tuple[WatchdogsConfig, dict[str, Watchdog]]] = {}
        self.original_power: dict[int, float] = {}  # GPU -> power limit before we capped it

    # extension protocol
    def start(self) -> None:
        self.sup.tick_hooks.append(self.tick)
        self.sup.status_hooks.append(self.fill_status)

    def stop(self) -> None:
        self.restore_power_limits("supervisor stopping")

    def _watchdogs(self, runner: "JobRunner") -> dict[str, Watchdog]:
        cur = self.sets.get(runner.cfg.name)
        if cur is None or cur[0] != runner.cfg.watchdogs:
            cur = (runner.cfg.watchdogs, make_watchdogs(runner.cfg.watchdogs))
            self.sets[runner.cfg.name] = cur
        return cur[1]

    def view(self, runner: "JobRunner", now: float, feed: FeedTick) -> JobView:
        attempt = runner.history.current
        readings = feed.readings
        gpus = job_gpu_indices(runner, readings, feed.processes)
        xids = [x for x in feed.new_xids if x.gpu in gpus]
        prog = runner.tail.progress if runner.tail else None
        return JobView(
            name=runner.cfg.name, now=now,
            alive=runner.state in (JobState.STARTING, JobState.RUNNING) and runner.handle is not None,
            attempt_started_at=attempt.started_at if attempt else None,
            attempt_first_step=prog.first_step if prog else None,
            iteration=prog.last_step if prog else None,
            last_progress_time=runner.last_progress_time,
            new_points=list(runner.new_points),
            gpus=[r for r in readings if r.index in gpus],
            new_xids=xids,
            attempt=attempt.number if attempt else 0,
            stopped_by=runner.parked_by,
        )

    def tick(self, now: float) -> None:
        feed = self.feed.poll()
        for runner in list(self.sup.runners.values()):
            view = self.view(runner, now, feed)
            for wd in self._watchdogs(runner).values():
                trip = wd.step(view)
                if trip is not None:
                    self.apply(runner, wd, trip, view)
                    view.alive = runner.state in (JobState.STARTING, JobState.RUNNING)
            self._thermal_recovery(runner, view)

    # ---- actions ---------------------------------------------------------------------------
    def apply(self, runner: "JobRunner", wd: Watchdog, trip: Trip, view: JobView) -> None:
        action = trip.action
        reason = f"watchdog {trip.watchdog}: {trip.detail}"
        note = None
        if action == "rollback":
            max_rb = getattr(wd.cfg, "max_rollbacks", 3)
            if runner.history.rollbacks >= max_rb:
                action = "stop"
                reason = f"watchdog {trip.watchdog}: still diverging after {runner.history.rollbacks} rollbacks " \
                         f"(max_rollbacks = {max_rb}); stopped: {trip.detail}"
        if action == "power-cap":
            note = self._power_cap(view, wd)
            if note is not None:
                action = "log"
        self._record(runner, trip, action, note)
        if action == "restart":
            runner.request_stop(reason, then="restart")
        elif action == "rollback":
            runner.history.rollbacks += 1
            runner.save()
            runner.request_stop(reason, then="rollback", before_iteration=trip.trouble_iteration,
                                new_seed=trip.new_seed)
        elif action == "stop":
            if trip.watchdog == "gpu_temperature":
                # parked, not final: resumes by itself once the GPUs cool down
                runner.parked_by = "gpu_temperature"
                runner.request_stop(reason, then="park", final=False)
            else:
                if trip.watchdog == "xid":
                    for g in {x["gpu"] for x in trip.values.get("xids", [])}:
                        self.feed.mark_unhealthy(g, trip.detail)
                runner.request_stop(reason, then="stop")

    def _record(self, runner: "JobRunner", trip: Trip, action: str, note: str | None) -> None:
        key = f"{trip.watchdog}/{action}"
        runner.history.watchdog_trips[key] = runner.history.watchdog_trips.get(key, 0) + 1
        runner.save()
        runner.event("watchdog_trip", watchdog=trip.watchdog, action=action, configured_action=trip.action,
                     detail=trip.detail, values=trip.values, threshold=trip.threshold, hold_seconds=trip.hold,
                     trouble_iteration=trip.trouble_iteration, note=note)

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

    def _thermal_recovery(self, runner: "JobRunner", view: JobView) -> None:
        wd = self._watchdogs(runner).get("gpu_temperature")
        if not isinstance(wd, GpuTemperatureWatchdog) or not wd.cfg.enabled or not wd.cool_enough(view):
            return
        for g in view.gpus:
            if g.index in self.original_power:
                watts = self.original_power.pop(g.index)
                try:
                    self.feed.set_power_limit(g.index, watts)
                    runner.event("power_restored", gpu=g.index, watts=watts,
                                 detail=f"below {wd.cfg.resume_celsius:g} C")
                except Exception as exc:  # noqa: BLE001
                    log.warning("power_restore_failed", gpu=g.index, error=str(exc))
        if runner.parked_by == "gpu_temperature" and runner.state == JobState.STOPPED:
            runner.parked_by = None
            hottest = max(g.temperature_celsius or 0 for g in view.gpus)
            runner.start(f"watchdog gpu_temperature: GPUs back under {wd.cfg.resume_celsius:g} C "
                         f"(hottest {hottest:.0f} C); resuming")

    def restore_power_limits(self, why: str) -> None:
        for gpu, watts in list(self.original_power.items()):
            try:
                self.feed.set_power_limit(gpu, watts)
                log.info("power_restored", gpu=gpu, watts=watts, reason=why)
            except Exception:  # noqa: BLE001
                pass
            self.original_power.pop(gpu, None)

    # ---- read side -------------------------------------------------------------------------
    def fill_status(self, status: dict[str, Any]) -> None:
        for job in status["jobs"]:
            cur = self.sets.get(job["name"])
            if cur is not None:
                job["watchdogs"] = {n: wd.status() for n, wd in cur[1].items()}
