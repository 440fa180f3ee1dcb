"""The current attempt's launch held to its deadlines (issue 28): what the observer sees of it (the runtime's pid, a
spare's ack, the first step, the job's iteration time), asked of deadlines.py each tick. It acts on nothing: an
overdue wait comes back as a `LaunchOverdue` message for the machine, which has the trainer killed (runner._apply)
and the job started cold."""

from __future__ import annotations

from ..jobs.messages import LaunchOverdue
from ..observations.shim_events import ShimEvents, ShimReport
from ..observations.tensorboard import ScalarPoint
from .deadlines import BOUNDED_START_RUNTIMES, SPARE_ACK, Handover, LaunchWait, current_wait, first_step_bound, \
    iteration_seconds, overdue_reason
from .record import JobRecord
from .setting import JobSetting


class LaunchWatch:
    def __init__(self, setting: JobSetting, record: JobRecord):
        self.setting, self.record = setting, record
        # the job's, across attempts (this supervisor's measurements; unknown after its start)
        self.iteration_seconds: float | None = None
        self.cold_startup_seconds: float | None = None
        self._prev_step: tuple[int, float] | None = None
        self.started = 0.0
        self.measure_startup = False
        self.handover: Handover | None = None
        self.spare_events: ShimEvents | None = None
        self.stepped = True  # nothing to wait for until an attempt starts
        self.overdue_sent = False
        self.wait: LaunchWait | None = None  # as of the last tick, for `isaacd status`

    def begin(self, now: float, spare: tuple[ShimEvents, str, float] | None, measure_startup: bool) -> None:
        """An attempt started (or was adopted: `measure_startup` False, no hand-over known). `spare`: the handed
        spare's events, mode and the wall time its go line was written (the deadline counts from `now`, just after)."""
        self.started, self.measure_startup = now, measure_startup
        self.stepped, self.overdue_sent, self.wait, self._prev_step = False, False, None, None
        self.handover, self.spare_events = None, None
        if spare is not None:
            events, mode, wall = spare
            bound = first_step_bound(self.setting.cfg.launch, mode, self.iteration_seconds, self.cold_startup_seconds)
            self.handover, self.spare_events = Handover(mode, now, wall, bound), events

    def placed(self, now: float) -> None:
        """A placing runtime (ray) found room only now: the attempt's waits count from here."""
        self.started = now

    def points(self, points: list[ScalarPoint], now: float) -> None:
        """New TensorBoard points: the first step, and the job's seconds per iteration."""
        if not points:
            return
        step = max(p.step for p in points)
        wall = min(p.wall_time for p in points if p.step == step)
        measured = iteration_seconds(self._prev_step, step, wall)
        if measured is not None:
            self.iteration_seconds = measured
        self._prev_step = (step, wall)
        self._first_step(now)

    def observe(self, now: float, attempt: int, pid: int | None, placing: bool,
                shim: ShimReport | None) -> LaunchOverdue | None:
        """One tick of a starting attempt: the spare's ack and first step; an overdue wait as a message (once)."""
        h = self.handover
        if h is not None and h.acked_mono is None and self.spare_events is not None:
            self.spare_events.poll()
            go = self.spare_events.report.go_time
            if go is not None:
                h.acked_mono = now
                if go and h.go_wall:  # not after an adoption: the go's time died with the previous supervisor
                    h.ack_seconds = round(max(0.0, go - h.go_wall), 6)
                    self.record.event("spare_took_over", attempt=attempt, pid=pid, mode=h.mode,
                                      ack_seconds=h.ack_seconds, first_step_bound_seconds=h.first_step_bound)
        if shim is not None and shim.first_iteration is not None:
            self._first_step(now)
        started = pid is not None or self.setting.cfg.runtime not in BOUNDED_START_RUNTIMES
        self.wait = None if self.stepped else current_wait(self.setting.cfg.launch, self.started, started, placing, h,
                                                           self.stepped)
        if self.wait is None or self.overdue_sent or not self.wait.overdue(now):
            return None
        self.overdue_sent = True
        w = self.wait
        fields = {"attempt": attempt, "pid": pid, "waited_seconds": round(w.waited(now), 3), "bound_seconds": w.bound}
        if h is not None:
            fields |= {"deadline": "ack" if w.what == SPARE_ACK else "first_step", "mode": h.mode,
                       "ack_seconds": h.ack_seconds}
        else:
            fields |= {"wait": w.what}
        return LaunchOverdue(overdue_reason(w, now), "spare_handover_timeout" if h is not None else "launch_timeout",
                             fields, cold_now=h is not None)

    def handover_failed(self) -> str | None:
        """Why an attempt a spare was handed ended before its first step, or None (not a hand-over, or it trained)."""
        h = self.handover
        if h is None or self.stepped:
            return None
        if h.acked_mono is None:
            return "the spare ended before it acknowledged the go"
        return "the spare ended after the go, before its first step"

    def _first_step(self, now: float) -> None:
        if self.stepped:
            return
        self.stepped, self.wait = True, None
        if self.handover is None and self.measure_startup:
            self.cold_startup_seconds = now - self.started
