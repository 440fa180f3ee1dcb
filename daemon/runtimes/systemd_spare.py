"""A warm spare's unit of its own, for the systemd runtime: released once it has ended, swept when left over.

A spare (attempt/spare.py, `LaunchSpec.spare`) runs in `isaaclab-job-<job>-spare-<token12>.service`, its file next to
the job's (systemd_units.py), so it never touches the job's unit. At the go it becomes the attempt as it is. Once it
has ended (killed or dead unused, or the attempt it became, ended) `release` stops its unit, looked at again every
SPARE_STOP_LOOK_S and SIGKILLed after SPARE_STOP_GRACE_S, never waited for on the worker, then removes its file; a
supervisor that died first leaves it to `sweep` at the job's next launch. Running ones are left alone: the parked
spare, or the attempt one became.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..daemon_log import log
from .base import RuntimeFailure
from .quadlet import launch_token_of
from .systemd_ctl import ACTIVE_STATES, Systemctl
from .systemd_units import UnitFiles
from .worker import Slot

# an ended spare's unit still stopping: looked at again every SPARE_STOP_LOOK_S, SIGKILLed after SPARE_STOP_GRACE_S
SPARE_STOP_LOOK_S = 0.5
SPARE_STOP_GRACE_S = 90.0

Kill = Callable[[dict[str, Any], int], None]  # the runtime's signal to the container, from the worker
# ContainerRuntime._stop_stale_step: one step of stopping a unit (slot, grace, stop, kill, stuck)
StopStep = Callable[[Slot, float, Callable[[], None], Callable[[], None], Callable[[float], str]], None]


class SpareUnits:
    """The job's spare units: `release` one that has ended, `sweep` those an earlier supervisor left. Worker only."""

    def __init__(self, ctl: Systemctl, files: UnitFiles, kill: Kill, stop_step: StopStep):
        self.ctl = ctl
        self.files = files
        self.kill = kill
        self.stop_step = stop_step

    def sweep(self, job: str, keep: str) -> bool:
        """The unit files of the job's ended spare units (killed or dead unused, or the attempt one became,
        ended), left by a supervisor that died before their `cleanup`. Running ones, and one with a job queued, are
        left alone: the parked spare, or the attempt one became. True when a file went (a daemon-reload is due)."""
        removed = False
        for path in self.files.spare_files(job):
            unit = path.name.rsplit(".", 1)[0] + ".service"
            if unit == keep:
                continue
            try:
                p = self.ctl.show(unit, ("ActiveState", "Job"), keep=False)
            except RuntimeFailure:
                continue
            if p["ActiveState"] in ACTIVE_STATES or p["Job"]:
                continue
            self.ctl("reset-failed", unit, check=False)
            path.unlink(missing_ok=True)
            removed = True
            log.info("spare_unit_removed", job=job, unit=unit, file=str(path))
        return removed

    def release(self, job: str, st: dict[str, Any], slot: Slot) -> bool:
        """One look: a spare's unit is over for good: stopped, reset, its file removed, systemd reloaded.
        False while its stop is under way (`systemctl stop --no-block`; SIGKILL after SPARE_STOP_GRACE_S, given up
        STALE_KILL_WAIT later: the file stays for the job's next launch to sweep); True once done."""
        unit, path = st["unit"], Path(st["unit_file"])
        cancel = slot.cache.pop("cancel_after_start", None)
        if cancel is not None:  # killed while its launch ran: the unit started anyway
            self.kill(st, cancel)
        if self.ctl.show(unit, ("ActiveState", "Job"), keep=False)["ActiveState"] in ACTIVE_STATES:
            # its container is dead or ends on the stop signal: the stale unit's stepwise stop, one step per look
            try:
                self.stop_step(slot, SPARE_STOP_GRACE_S,
                               lambda: self.ctl("stop", "--no-block", unit, check=False),
                               lambda: self.ctl("kill", "-s", "SIGKILL", unit, check=False),
                               lambda s: f"{unit} would not stop ({s:.0f} s); its file stays until the "
                                         f"job's next launch")
            except RuntimeFailure as exc:
                log.warning("spare_unit_stop_failed", job=job, unit=unit, detail=str(exc))
                return True
            return False
        self.ctl("reset-failed", unit, check=False)
        if path.exists() and launch_token_of(path) == st.get("token"):
            path.unlink(missing_ok=True)
            self.ctl("daemon-reload", timeout=120)
            log.info("spare_unit_removed", job=job, unit=unit, file=str(path))
        return True
