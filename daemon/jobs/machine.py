"""The one place that decides what happens to a job: `decide(model, message, ctx) -> Decision`.

Pure: no I/O, no clock (the time is `ctx.now`, monotonic), no randomness. Every state change goes
through `_to`, which checks the transition table and says so in an event. The returned effects are
applied in order by the runner (see effects.py for the crash-consistency contract); the model is the
new decision state. Tests drive it directly with a fake clock (tests/test_job_machine.py, named after
the edges).
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass, field, replace

from . import policy as P
from .effects import Effect, Event, Forget, Kill, Launch, Persist, Signal
from .messages import (Exited, LaunchRefused, Message, Progressed, Restart, Start, Stop, Tick, WatchdogTrip)
from .model import JobModel, JobState, LaunchIntent, Origin, StopIntent, Then, bump, check_transition

S = JobState
THERMAL_WATCHDOG = "gpu_temperature"


@dataclass(frozen=True)
class Context:
    job: str
    now: float  # monotonic seconds
    restart: P.RestartLimits
    stop_timeout: float


@dataclass(frozen=True)
class Decision:
    model: JobModel
    effects: tuple[Effect, ...] = ()
    reply: str | None = None  # the answer to a command, for the operator


@dataclass
class _Out:
    """Collects the effects of one decision."""

    effects: list[Effect] = field(default_factory=list)

    def add(self, *effects: Effect) -> None:
        self.effects.extend(effects)


def decide(m: JobModel, msg: Message, ctx: Context) -> Decision:
    out = _Out()
    if isinstance(msg, Tick):
        new, reply = _tick(m, ctx, out), None
    elif isinstance(msg, Progressed):
        new, reply = _progressed(m, msg, ctx, out), None
    elif isinstance(msg, LaunchRefused):
        new, reply = _launch_refused(m, msg, ctx, out), None
    elif isinstance(msg, Exited):
        new, reply = _exited(m, msg, ctx, out), None
    elif isinstance(msg, Start):
        new, reply = _start(m, msg, ctx, out)
    elif isinstance(msg, Stop):
        new, reply = _stop(m, msg, ctx, out)
    elif isinstance(msg, Restart):
        new, reply = _restart(m, msg, ctx, out)
    elif isinstance(msg, WatchdogTrip):
        new, reply = _watchdog(m, msg, ctx, out)
    else:  # pragma: no cover - the type union is closed
        raise TypeError(f"not a job message: {msg!r}")
    return Decision(new, tuple(out.effects), reply)


# ---- the choke point -------------------------------------------------------------------------
def _to(m: JobModel, new: JobState, reason: str | None, ctx: Context, out: _Out, **changes: object) -> JobModel:
    check_transition(ctx.job, m.state, new)
    out.add(Event("state", {"old": m.state.value, "new": new.value, "reason": reason}))
    if new == S.FAILED:
        out.add(Event("failed", {"reason": reason}))
    return m.with_(state=new, reason=reason, **changes)


def _rest(m: JobModel, state: JobState, reason: str, final: bool, ctx: Context, out: _Out,
          parked_by: str | None = None) -> JobModel:
    """Come to rest in stopped/completed/failed; `final` keeps it so across supervisor restarts."""
    new = _to(m, state, reason, ctx, out, stop=None, backoff_until=None, backoff_seconds=None, final=final,
              parked_by=parked_by)
    out.add(Persist())
    return new


def _launch(m: JobModel, intent: LaunchIntent, ctx: Context, out: _Out) -> JobModel:
    new = _to(m, S.STARTING, intent.reason, ctx, out, launch=intent, backoff_until=None, backoff_seconds=None,
              final=False, stop=None)
    out.add(Persist(), Launch(intent))
    return new


def _count_restart(m: JobModel, reason: str, reason_class: str, ctx: Context, in_window: bool) -> JobModel:
    """A restart, counted when it is decided (and saved with the decision), so a supervisor that dies
    in the backoff cannot let a crash loop past max_restarts. An operator's restart is no crash loop."""
    times = P.restarts_in_window(m.restart_times, ctx.now, ctx.restart)
    return m.with_(restarts=m.restarts + 1, restart_times=times + ((ctx.now,) if in_window else ()),
                   restarts_by_reason=bump(m.restarts_by_reason, reason_class), last_restart_reason=reason)


def _begin_stop(m: JobModel, intent: StopIntent, ctx: Context, out: _Out) -> JobModel:
    out.add(Event("stopping", {"reason": intent.reason, "then": intent.then.value, "origin": intent.origin.value,
                               "grace_seconds": ctx.stop_timeout}))
    new = _to(m, S.STOPPING, intent.reason, ctx, out, stop=intent)
    out.add(Persist(), Signal(int(_signal.SIGINT)))  # saved first: a new supervisor finishes this stop
    return new


# ---- observations ------------------------------------------------------------------------------
def _tick(m: JobModel, ctx: Context, out: _Out) -> JobModel:
    if m.state == S.PENDING:
        return _launch(m, m.launch, ctx, out)
    if m.state == S.BACKING_OFF and m.backoff_until is not None and ctx.now >= m.backoff_until:
        return _launch(m, m.launch, ctx, out)
    if m.state == S.STOPPING and m.stop is not None and not m.stop.killed and ctx.now >= m.stop.deadline:
        out.add(Event("stop_timeout", {"detail": "trainer ignored SIGINT; sending SIGKILL"}))
        new = m.with_(stop=replace(m.stop, killed=True))
        out.add(Persist(), Kill())
        return new
    return m


def _progressed(m: JobModel, msg: Progressed, ctx: Context, out: _Out) -> JobModel:
    if m.state != S.STARTING:
        return m
    new = _to(m, S.RUNNING, f"training at iteration {msg.iteration}", ctx, out)
    out.add(Persist())
    return new


def _launch_refused(m: JobModel, msg: LaunchRefused, ctx: Context, out: _Out) -> JobModel:
    if m.state != S.STARTING:
        return m
    if msg.settle == "completed":
        return _rest(m, S.COMPLETED, msg.reason, True, ctx, out)
    if msg.settle == "failed":
        return _rest(m, S.FAILED, msg.reason, True, ctx, out)
    return _schedule_restart(m, msg.reason, "lost", 0.0, False, ctx, out, crash_loop=msg.crash_loop)


def _exited(m: JobModel, msg: Exited, ctx: Context, out: _Out) -> JobModel:
    if not m.state.active:
        return m
    out.add(Forget())
    stop = m.stop
    if stop is not None:
        if stop.then in (Then.STOP, Then.PARK):
            return _rest(m, S.STOPPED, stop.reason, stop.final, ctx, out,
                         parked_by=THERMAL_WATCHDOG if stop.then == Then.PARK else None)
        # a restart or rollback someone asked for: go again at once, resuming; no backoff
        cls = "operator" if stop.origin in (Origin.OPERATOR, Origin.CONFIG) else "watchdog"
        counted = _count_restart(m, stop.reason, cls, ctx, in_window=cls != "operator")
        intent = LaunchIntent(stop.reason, stop.origin, stop.before_iteration, stop.new_seed)
        new = _to(counted, S.BACKING_OFF, stop.reason, ctx, out, stop=None, launch=intent, backoff_until=ctx.now,
                  backoff_seconds=0.0)
        out.add(Persist())
        return new
    if msg.success and msg.reached_max:
        return _rest(m, S.COMPLETED, "max_iterations reached", True, ctx, out)
    if msg.success and msg.finished_early:
        # a resume would stop at once for the same reason, and again, until the restart limit called it failed
        return _rest(m, S.COMPLETED, msg.finished_early, True, ctx, out)
    if msg.external_stop:
        return _rest(m, S.STOPPED, f"operator stop outside isaacd ({msg.description})", True, ctx, out)
    reason = msg.description if not msg.success else "exited with code 0 before max_iterations"
    return _schedule_restart(m, reason, msg.reason_class, msg.ran_seconds, msg.moved_forward, ctx, out)


def _schedule_restart(m: JobModel, reason: str, reason_class: str, ran_seconds: float, moved_forward: bool,
                      ctx: Context, out: _Out, crash_loop: bool = True) -> JobModel:
    policy = ctx.restart
    if crash_loop and P.restart_limit_reached(m.restart_times, ctx.now, policy):
        recent = len(P.restarts_in_window(m.restart_times, ctx.now, policy))
        return _rest(m, S.FAILED, f"restart limit reached: {recent} restarts within {policy.window:g} s "
                                  f"(max_restarts = {policy.max_restarts}); last: {reason}", True, ctx, out)
    quick = P.quick_failures_after(m.quick_failures, ran_seconds, moved_forward, policy)
    delay = P.backoff_delay(quick, policy)
    counted = _count_restart(m, reason, reason_class, ctx, in_window=crash_loop)
    out.add(Event("restart_scheduled", {"reason": reason, "delay_seconds": round(delay, 3)}))
    new = _to(counted, S.BACKING_OFF, f"{reason}; restarting in {delay:.1f} s", ctx, out,
              launch=LaunchIntent(reason, Origin.CRASH), backoff_until=ctx.now + delay, backoff_seconds=delay,
              quick_failures=quick, stop=None)
    out.add(Persist())
    return new


# ---- commands ------------------------------------------------------------------------------
def _start(m: JobModel, cmd: Start, ctx: Context, out: _Out) -> tuple[JobModel, str]:
    if cmd.origin == Origin.THERMAL:
        # only the watchdog that parked the job may resume it; an operator's stop stays a stop
        if m.state != S.STOPPED or m.parked_by != THERMAL_WATCHDOG:
            return m, "not parked"
    if m.state.active or m.state == S.PENDING:
        return m, f"already {m.state.value}"
    if m.state == S.BACKING_OFF:
        return _launch(m, m.launch, ctx, out), "starting"  # the restart was counted when it was scheduled
    if cmd.origin == Origin.THERMAL:  # the watchdog's own restart, after its park: counted like one
        m = _count_restart(m, cmd.reason, "watchdog", ctx, in_window=True)
    new = _to(m, S.PENDING, cmd.reason, ctx, out, launch=LaunchIntent(cmd.reason, cmd.origin), final=False,
              parked_by=None, quick_failures=0)
    out.add(Persist())
    return new, "starting"


def _stop(m: JobModel, cmd: Stop, ctx: Context, out: _Out) -> tuple[JobModel, str]:
    then = Then.PARK if cmd.park else Then.STOP
    if m.state in (S.STARTING, S.RUNNING):
        intent = StopIntent(cmd.reason, cmd.origin, then, ctx.now + ctx.stop_timeout, final=cmd.final)
        return _begin_stop(m, intent, ctx, out), "stopping"
    if m.state == S.STOPPING and m.stop is not None:
        cur = m.stop
        # a stop outranks a restart in flight, and an operator's stop outranks a shutdown's
        upgraded = replace(cur, then=then if cur.then == Then.RESTART else cur.then,
                                 final=cur.final or cmd.final,
                                 reason=cmd.reason if cur.then == Then.RESTART or (cmd.final and not cur.final)
                                 else cur.reason, origin=cmd.origin if cmd.final and not cur.final else cur.origin)
        if upgraded != cur:
            out.add(Event("stop_changed", {"reason": upgraded.reason, "then": upgraded.then.value,
                                           "final": upgraded.final}))
            out.add(Persist())
        return m.with_(stop=upgraded), "already stopping"
    if m.state in (S.PENDING, S.BACKING_OFF):
        return _rest(m, S.STOPPED, cmd.reason, cmd.final, ctx, out,
                     parked_by=THERMAL_WATCHDOG if cmd.park else None), "stopped"
    return m, f"not running ({m.state.value})"


def _restart(m: JobModel, cmd: Restart, ctx: Context, out: _Out) -> tuple[JobModel, str]:
    if m.state in (S.STARTING, S.RUNNING):
        intent = StopIntent(cmd.reason, cmd.origin, Then.RESTART, ctx.now + ctx.stop_timeout,
                            before_iteration=cmd.before_iteration, new_seed=cmd.new_seed)
        return _begin_stop(m, intent, ctx, out), "stopping"
    if m.state == S.STOPPING and m.stop is not None:
        if cmd.origin == Origin.CONFIG and not m.stop.final and m.stop.then == Then.STOP:
            # the job is back in the config before its removal stop finished: go on training
            out.add(Event("stop_changed", {"reason": cmd.reason, "then": Then.RESTART.value, "final": False}))
            out.add(Persist())
            return m.with_(stop=replace(m.stop, then=Then.RESTART, reason=cmd.reason)), "restarting"
        return m, "already stopping"
    if m.state == S.BACKING_OFF:
        return _launch(m, m.launch, ctx, out), "starting"
    if m.state == S.PENDING:
        return m, "already pending"
    cls = "operator" if cmd.origin in (Origin.OPERATOR, Origin.CONFIG) else "watchdog"
    counted = _count_restart(m, cmd.reason, cls, ctx, in_window=cls != "operator")
    new = _to(counted, S.PENDING, cmd.reason, ctx, out,
              launch=LaunchIntent(cmd.reason, cmd.origin, cmd.before_iteration, cmd.new_seed), final=False,
              parked_by=None, quick_failures=0)
    out.add(Persist())
    return new, "starting"


def _watchdog(m: JobModel, trip: WatchdogTrip, ctx: Context, out: _Out) -> tuple[JobModel, str | None]:
    action, reason = trip.action, f"watchdog {trip.watchdog}: {trip.detail}"
    if action == "rollback" and not P.rollback_allowed(m.rollbacks, trip.max_rollbacks):
        action = "stop"
        reason = (f"watchdog {trip.watchdog}: still diverging after {m.rollbacks} rollbacks "
                  f"(max_rollbacks = {trip.max_rollbacks}); stopped: {trip.detail}")
    m = m.with_(watchdog_trips=bump(m.watchdog_trips, f"{trip.watchdog}/{action}"))
    out.add(Event("watchdog_trip", {"watchdog": trip.watchdog, "action": action,
                                    "configured_action": trip.configured_action, "detail": trip.detail,
                                    "values": trip.values, "threshold": trip.threshold,
                                    "hold_seconds": trip.hold_seconds, "trouble_iteration": trip.trouble_iteration,
                                    "note": trip.note}))
    out.add(Persist())
    if action == "restart":
        return _restart(m, Restart(Origin.WATCHDOG, reason), ctx, out)
    if action == "rollback":
        m = m.with_(rollbacks=m.rollbacks + 1)
        return _restart(m, Restart(Origin.WATCHDOG, reason, trip.trouble_iteration, trip.new_seed), ctx, out)
    if action == "stop":
        if trip.watchdog == THERMAL_WATCHDOG:
            # parked, not final: resumes by itself once the GPUs cool down
            return _stop(m, Stop(Origin.THERMAL, reason, final=False, park=True), ctx, out)
        return _stop(m, Stop(Origin.WATCHDOG, reason), ctx, out)
    return m, None  # log / power-cap: recorded, nothing more
