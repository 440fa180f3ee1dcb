"""XID errors, classified by NVIDIA's resolution buckets.

Application XIDs (13, 31, 43, ...) are the program's fault: restart the job. Reset/reboot-class
XIDs (48, 79, 94/95, 119/120, ...) mean the GPU itself needs attention: stop the job, mark the GPU
unhealthy, and do not loop. Anything else is logged.
"""

from __future__ import annotations

from dataclasses import replace

from ..jobs.messages import WatchdogAction
from .base import JobView, Verdict, Watchdog
from ..config.watchdogs import Xid
from ..status.types import WatchdogStatus


class XidWatchdog(Watchdog):
    name = "xid"
    needs_alive = False
    cfg: Xid

    def __init__(self, cfg: Xid):
        super().__init__(cfg)
        self.unhealthy: dict[int, str] = {}

    def possible_actions(self) -> set[WatchdogAction]:
        return {WatchdogAction(self.cfg.application_action), WatchdogAction(self.cfg.reset_action), WatchdogAction.LOG}

    def fresh_status(self) -> WatchdogStatus:
        # The common `action` key (default "log") is not what this watchdog does: it acts per XID class.
        app, reset = self.cfg.application_action, self.cfg.reset_action
        return replace(super().fresh_status(), action=app if app == reset else f"{app}/{reset}",
                       actions_by_class={"application": app, "reset": reset, "other": WatchdogAction.LOG})

    def evaluate(self, view: JobView) -> Verdict:
        if not view.new_xids:
            return Verdict(False)
        worst = None
        for ev in view.new_xids:
            if ev.xid in self.cfg.reset_xids:
                self.unhealthy[ev.gpu] = f"XID {ev.xid}"
                worst = ("reset", ev)
            elif ev.xid in self.cfg.application_xids and (worst is None or worst[0] == "other"):
                worst = ("application", ev)
            elif worst is None:
                worst = ("other", ev)
        assert worst is not None
        kind, ev = worst
        action = WatchdogAction({"reset": self.cfg.reset_action, "application": self.cfg.application_action}
                                .get(kind, WatchdogAction.LOG))
        values = {"xids": [{"gpu": e.gpu, "xid": e.xid} for e in view.new_xids], "class": kind}
        if kind != "reset" and not view.alive:
            action = WatchdogAction.LOG
        return Verdict(True, f"XID {ev.xid} on GPU {ev.gpu} ({kind} class)", values, None, action=action, immediate=True)
