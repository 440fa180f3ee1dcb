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
from .effects import Effect, Event, Forget, HoldSpare, Kill, Launch, Persist, Signal
from .messages import (Adopted, Awaited, CudaOom, DropSpare, Exited, Found, LaunchOverdue, LaunchRefused,
                       LaunchUnfinished, LaunchWaited, Message, Placed, Preempt, Progressed, Readded, ReasonClass,
                       Reset, Restart, ResumeFrom, Settle, Start, Stop, StopSaved, Tick, WatchdogAction,
                       WatchdogTrip)
from .model import FromJob, JobModel, JobState, LaunchIntent, OomPhase, Origin, StopIntent, Then, bump, check_transition
from .messages import TrainerConfigError

S = JobState
THERMAL_WATCHDOG = "gpu_temperature"


@dataclass(frozen=True)
class NoStepDown:
    step_down: float | None = None
    min_num_envs: int | None = None


@dataclass(frozen=True)
class Context:
    job: str
    now: float  # monotonic seconds
    restart: P.RestartLimits
    stop_timeout: float
    num_envs: int = 0  # the configured num_envs
    oom: P.OomLimits = NoStepDown()  # [jobs.oom]
    backup: bool = False  # the job has a [jobs.backup] target (a reset would resume from its checkpoints)
    placed_by_isaacd: bool = False  # it asks for GPUs (a count, gpu_memory): it waits in the queue until placed
    wall: float = 0.0  # wall-clock seconds: a queued job's submission time (the queue's order survives a reboot)


class Refused(str):
    """A reply saying that the command was not carried out, and why: the operator's client exits non-zero.

    A str, so a reply reads the same either way; an answer that the job already is where the command would
    take it ("already running") is no refusal."""


@dataclass(frozen=True)
class Decision:
    model: JobModel
    effects: tuple[Effect, ...] = ()
    reply: str | None = None  # the answer to a command, for the operator, in the command's own word


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
    elif isinstance(msg, LaunchOverdue):
        new, reply = _launch_overdue(m, msg, ctx, out), None
    elif isinstance(msg, Exited):
        new, reply = _exited(m, msg, ctx, out), None
    elif isinstance(msg, LaunchWaited):
        new, reply = _launch_waited(m, msg, ctx, out), None
    elif isinstance(msg, StopSaved):
        new, reply = _stop_saved(m, msg, out), None
    elif isinstance(msg, Start):
        new, reply = _start(m, msg, ctx, out)
    elif isinstance(msg, Stop):
        new, reply = _stop(m, msg, ctx, out)
    elif isinstance(msg, Restart):
        new, reply = _restart(m, msg, ctx, out)
    elif isinstance(msg, Reset):
        new, reply = _reset(m, msg, ctx, out)
    elif isinstance(msg, ResumeFrom):
        new, reply = _resume_from(m, msg, ctx, out)
    elif isinstance(msg, WatchdogTrip):
        new, reply = _watchdog(m, msg, ctx, out)
    elif isinstance(msg, Readded):
        new, reply = _readded(m, msg, ctx, out)
    elif isinstance(msg, Placed):
        new, reply = _placed(m, msg, ctx, out)
    elif isinstance(msg, Preempt):
        new, reply = _preempt(m, msg, ctx, out)
    elif isinstance(msg, DropSpare):
        out.add(HoldSpare(msg.reason, msg.until))
        new, reply = m, None
    elif isinstance(msg, Adopted):
        new, reply = _adopted(m, out), None
    elif isinstance(msg, LaunchUnfinished):
        new, reply = _launch_unfinished(m, msg, out), None
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
              parked_by=parked_by, placement=(), placed_at=None, backfill=False, queued_at=None,
              # its GPUs given back; a rest that is undone by itself (a supervisor shutdown, a config removal, a heat
              # park) keeps its submission time, so the job goes back to its old place in the queue
              submitted_at=None if final else m.submitted_at)
    out.add(Persist())
    return new


def _launch(m: JobModel, intent: LaunchIntent, ctx: Context, out: _Out) -> JobModel:
    new = _to(m, S.STARTING, intent.reason, ctx, out, launch=intent, backoff_until=None, backoff_seconds=None,
              final=False, stop=None)
    out.add(Persist(), Launch(intent))
    return new


REQUEUED_NOW = "queued: it gave its GPUs back for its backoff; the queue places it again when it is its turn"


def _launch_or_queue(m: JobModel, ctx: Context, out: _Out) -> JobModel:
    """Go now: launch, or, for a job the queue places that holds no GPUs (it gave them back for its backoff), back to
    the queue at its old place, which places it when it is its turn."""
    if ctx.placed_by_isaacd and not m.placement:
        return _queue(m, ctx, out)
    return _launch(m, m.launch, ctx, out)


def _requested_restart_class(origin: Origin) -> ReasonClass:
    """A restart someone asked for: an operator's (or a config reload's) is no crash loop, a watchdog's is; a
    launch killed at its own deadline counts as a lost launch."""
    if origin == Origin.LAUNCH:
        return ReasonClass.LOST
    # a sweep's exploit (PBT, issue 40) is asked for as often as its interval says: no crash loop either
    return ReasonClass.OPERATOR if origin in (Origin.OPERATOR, Origin.CONFIG, Origin.SWEEP) else ReasonClass.WATCHDOG


def _count_restart(m: JobModel, reason: str, reason_class: ReasonClass, ctx: Context, in_window: bool) -> JobModel:
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
    launch_due = m.state == S.PENDING or (m.state == S.BACKING_OFF and m.backoff_until is not None
                                         and ctx.now >= m.backoff_until)
    if launch_due and ctx.placed_by_isaacd and not m.placement:
        return _queue(m, ctx, out)
    if launch_due or (m.state == S.QUEUED and not ctx.placed_by_isaacd):  # a reload pinned its GPUs: no queue
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
    new = _to(m, S.RUNNING, f"training at iteration {msg.iteration}", ctx, out, startup_ooms=0)
    out.add(Persist())
    return new


def _launch_refused(m: JobModel, msg: LaunchRefused, ctx: Context, out: _Out) -> JobModel:
    if m.state != S.STARTING:
        return m
    if msg.config_error is not None:  # the program cannot be started as configured: no retry would start it
        return _config_error(m, msg.config_error, ctx, out)
    if msg.settle == Settle.COMPLETED:
        return _rest(m, S.COMPLETED, msg.reason, True, ctx, out)
    if msg.settle == Settle.FAILED:
        return _rest(m, S.FAILED, msg.reason, True, ctx, out)
    if msg.settle == Settle.STOPPED:
        return _rest(m, S.STOPPED, msg.reason, True, ctx, out)
    return _schedule_restart(m, msg.reason, ReasonClass.LOST, 0.0, False, ctx, out, crash_loop=msg.crash_loop)


def _launch_overdue(m: JobModel, msg: LaunchOverdue, ctx: Context, out: _Out) -> JobModel:
    """A wait of the launch ran past its deadline (a spare that does not take the attempt over): SIGKILL now, no
    grace (it answers nothing), saved first; its exit then starts the job cold at once (the stop's RESTART)."""
    if m.state != S.STARTING:
        return m
    out.add(Event(msg.event, dict(msg.fields)))
    if not msg.cold_now:  # the same launch again would hang the same way: its exit is a crash (backoff, window)
        out.add(Persist(), Kill())
        return m
    intent = StopIntent(msg.reason, Origin.LAUNCH, Then.RESTART, ctx.now, final=False, killed=True)
    new = _to(m, S.STOPPING, msg.reason, ctx, out, stop=intent)
    out.add(Persist(), Kill())
    return new


FETCH_STOPPED = "not started: stopped while its checkpoint was fetched from the backup target"
PROBE_STOPPED = "not started: stopped while its launcher was asked its Isaac Lab version"
PREPARATION_STOPPED = "not started: stopped while its launch was being prepared"
STOPPED_WHILE = {Awaited.CHECKPOINT: FETCH_STOPPED, Awaited.LAUNCHER: PROBE_STOPPED,
                 Awaited.PREPARATION: PREPARATION_STOPPED}


def _launch_waited(m: JobModel, msg: LaunchWaited, ctx: Context, out: _Out) -> JobModel:
    """A launch waiting (for the backup's checkpoint, or its launcher's answer to the version probe): asked again
    (the planner answers at once, the fetch and the probe run on threads of their own) while the job is starting; a
    stop meanwhile ends the wait as an exit of the trainer that never started (the stop's own end: stopped, or the
    restart it was for)."""
    if m.state == S.STARTING and not msg.trainer:
        return _launch_unfinished(m, LaunchUnfinished(replayed=False), out)
    if m.state == S.STOPPING:
        return _exited(m, Exited(STOPPED_WHILE[msg.on], ReasonClass.OPERATOR, success=False), ctx, out)
    return m


def _relaunch_cold(m: JobModel, reason: str, ctx: Context, out: _Out) -> JobModel:
    """The spare handed the attempt ended before its first step: no backoff (the spare failed, not the job's trainer,
    and the next launch starts cold), outside the crash-loop window."""
    counted = _count_restart(m, reason, ReasonClass.LOST, ctx, in_window=False)
    out.add(Event("restart_scheduled", {"reason": reason, "delay_seconds": 0.0}))
    new = _to(counted, S.BACKING_OFF, f"{reason}; starting cold at once", ctx, out, stop=None,
              launch=LaunchIntent(reason, Origin.LAUNCH), backoff_until=ctx.now, backoff_seconds=0.0)
    out.add(Persist())
    return new


def _exited(m: JobModel, msg: Exited, ctx: Context, out: _Out) -> JobModel:
    if not m.state.active:
        return m
    out.add(Forget())
    stop = m.stop
    if stop is not None:
        if stop.then in (Then.STOP, Then.PARK):
            return _rest(m, S.STOPPED, stop.reason, stop.final, ctx, out,
                         parked_by=THERMAL_WATCHDOG if stop.then == Then.PARK else None)
        if stop.then == Then.QUEUE:  # preempted: saved; back to the queue
            return _requeue(m, stop.reason, ctx, out)
        if stop.then == Then.START:  # an operator's start came during the stop: stopped, then started
            rested = _rest(m, S.STOPPED, stop.reason, True, ctx, out)
            start = Start(Origin.SWEEP, stop.start_by) if stop.start_by else Start(Origin.OPERATOR, START_AFTER_STOP)
            return _start(rested, start, ctx, out)[0]
        # a restart or rollback someone asked for: go again at once, resuming; no backoff
        cls = _requested_restart_class(stop.origin)
        # an operator's restart is no crash loop; nor is a launch killed at its deadline (the next one starts cold)
        counted = _count_restart(m, stop.reason, cls, ctx,
                                 in_window=cls not in (ReasonClass.OPERATOR, ReasonClass.LOST))
        intent = LaunchIntent(stop.reason, stop.origin, stop.before_iteration, stop.new_seed,
                              fresh=stop.from_job is not None, from_job=stop.from_job)
        new = _to(counted, S.BACKING_OFF, stop.reason, ctx, out, stop=None, launch=intent, backoff_until=ctx.now,
                  backoff_seconds=0.0)
        out.add(Persist())
        return new
    if msg.config_error is not None and not msg.success:
        return _config_error(m, msg.config_error, ctx, out)
    if msg.success and msg.reached_max:
        return _rest(m, S.COMPLETED, "max_iterations reached", True, ctx, out)
    if msg.success and msg.finished_early:
        # a resume would stop at once for the same reason, and again, until the restart limit called it failed
        return _rest(m, S.COMPLETED, msg.finished_early, True, ctx, out)
    if msg.external_stop:
        return _rest(m, S.STOPPED, f"operator stop outside isaacd ({msg.description})", True, ctx, out)
    if msg.cuda_oom is not None:
        # the trainer's own failure, whoever booted it: a spare handed the attempt that runs out of GPU memory at
        # start-up steps num_envs down like a cold launch would (a cold relaunch at the same size fails the same way)
        return _cuda_oom(m, msg, msg.cuda_oom, ctx, out)
    if msg.handover_failed is not None and m.state == S.STARTING:
        return _relaunch_cold(m, f"{msg.handover_failed} ({msg.description})", ctx, out)
    reason = msg.description if not msg.success else "exited with code 0 before max_iterations"
    m = m.with_(startup_ooms=0, training_ooms=0)  # any other end breaks a run of out-of-memory exits
    return _schedule_restart(m, reason, msg.reason_class, msg.ran_seconds, msg.moved_forward, ctx, out)


def _cuda_oom(m: JobModel, msg: Exited, oom: CudaOom, ctx: Context, out: _Out) -> JobModel:
    """Out of GPU memory. Before the attempt's first iteration (start-up) the same launch fails the same way:
    step num_envs down when the job allows it, else retry once and fail with one line that says why. After
    training ran (fragmentation, a growing buffer) it is restarted like any crash, from the newest checkpoint."""
    startup = m.state == S.STARTING and not msg.moved_forward
    phase = OomPhase.STARTUP if startup else OomPhase.TRAINING
    in_use = P.num_envs_in_use(m.num_envs, m.num_envs_of, ctx.num_envs)
    m = m.with_(cuda_ooms=bump(m.cuda_ooms, phase))
    out.add(Event("cuda_oom", {"phase": phase, "kind": oom.kind, "line": oom.line, "num_envs": in_use,
                               "configured_num_envs": ctx.num_envs, "gpu": oom.gpu, "trend": oom.trend,
                               **oom.facts}))
    if not startup:
        times = m.training_ooms + 1
        m = m.with_(training_ooms=times, startup_ooms=0)
        again = ""
        if times > 1:  # a pattern, not a fluke: say what the GPU's memory did meanwhile
            again = f", {times} times in a row; {oom.trend or 'no GPU memory samples to show the trend'}"
        reason = f"CUDA out of memory after training ran, num_envs = {in_use}{again}: {msg.description}"
        return _schedule_restart(m, reason, "cuda_oom", msg.ran_seconds, msg.moved_forward, ctx, out)
    smaller = P.next_num_envs(in_use, ctx.oom)
    if smaller is not None:
        out.add(Event("num_envs_stepped_down", {
            "from": in_use, "to": smaller, "configured": ctx.num_envs, "floor": ctx.oom.min_num_envs,
            "detail": "CUDA out of memory at start-up; relaunching from the newest checkpoint with fewer environments "
                      "(`isaacd restart` goes back to the configured num_envs)"}))
        m = m.with_(num_envs=smaller, num_envs_of=ctx.num_envs, startup_ooms=0, training_ooms=0)
        reason = f"CUDA out of memory at start-up with num_envs = {in_use}; stepping down to {smaller}"
        # bounded by the floor, so not a crash loop: max_restarts must not end the walk down before it
        return _schedule_restart(m, reason, "cuda_oom", msg.ran_seconds, msg.moved_forward, ctx, out,
                                 crash_loop=False)
    times = m.startup_ooms + 1
    m = m.with_(startup_ooms=times, training_ooms=0)
    if times <= P.STARTUP_OOM_RETRIES:
        reason = (f"CUDA out of memory at start-up with num_envs = {in_use}; trying once more in case other "
                  f"processes have freed GPU memory")
        return _schedule_restart(m, reason, "cuda_oom", msg.ran_seconds, msg.moved_forward, ctx, out)
    return _rest(m, S.FAILED, _startup_oom_failure(in_use, times, oom, ctx), True, ctx, out)


def _config_error(m: JobModel, err: TrainerConfigError, ctx: Context, out: _Out) -> JobModel:
    """The trainer cannot run as configured (an unknown task, a rejected override or flag, a missing module or file):
    every restart would fail the same way, each a full boot of the simulator. Failed at once, no restart counted,
    with the trainer's own line and the key to change; `isaacd start` tries again once the config is fixed."""
    out.add(Event("trainer_config_error", {"kind": err.kind, "line": err.line, "key": err.key, "fix": err.fix}))
    said = err.line if len(err.line) <= 200 else err.line[:199] + "…"
    reason = (f"{err.what} ({said}); a restart cannot fix this, so none was tried. Fix: {err.fix}; then "
              f"`isaacd reload` and `isaacd start {ctx.job}`")
    return _rest(m.with_(startup_ooms=0, training_ooms=0), S.FAILED, reason, True, ctx, out)


def _startup_oom_failure(in_use: int, times: int, oom: CudaOom, ctx: Context) -> str:
    """The one line a job that cannot start for want of GPU memory fails with: GPU, who holds its memory, num_envs,
    the fix."""
    said = oom.line if len(oom.line) <= 100 else oom.line[:99] + "…"
    at = f"num_envs = {in_use}"
    if in_use != ctx.num_envs:
        at += f" (stepped down from {ctx.num_envs} to the floor, [jobs.oom] min_num_envs)"
    gpu = oom.gpu or "GPU memory use not known (no GPU samples)"
    fix = oom.fix
    if ctx.oom.step_down is None and oom.kind != "physx_buffer":
        fix += (", or let isaacd step it down: [jobs.oom] step_down = 0.5 and min_num_envs = <the fewest worth "
                "training with>")
    elif in_use != ctx.num_envs:
        fix += " or min_num_envs"
    return (f"CUDA out of memory at start-up, {_count(times)} with {at} ({said}); {gpu}. "
            f"Fix: {fix}; then `isaacd start {ctx.job}`")


def _count(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _schedule_restart(m: JobModel, reason: str, reason_class: ReasonClass, ran_seconds: float, moved_forward: bool,
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
    # a job the queue placed does not hold its GPUs through a backoff (a queued job may use them meanwhile): they go
    # back now, and once the backoff has passed it goes back to the queue at its old place (its submission time),
    # placed again when it is its turn; a restart at once (no delay) keeps them, there is no wait to lend them for
    release = ctx.placed_by_isaacd and bool(m.placement) and delay > 0
    then = f"back in the queue in {delay:.1f} s (its GPUs given back meanwhile)" if release else \
        f"restarting in {delay:.1f} s"
    if release:
        out.add(Event("gpus_released", {"gpus": list(m.placement), "reason": reason, "delay_seconds": round(delay, 3),
                                        "detail": "backing off: its GPUs go back to the queue; it is placed again, "
                                                  "at its old place in the queue, once its backoff has passed"}))
    new = _to(counted, S.BACKING_OFF, f"{reason}; {then}", ctx, out,
              launch=LaunchIntent(reason, Origin.CRASH), backoff_until=ctx.now + delay, backoff_seconds=delay,
              quick_failures=quick, stop=None,
              **({"placement": (), "placed_at": None, "backfill": False} if release else {}))
    out.add(Persist())
    if release:  # its warm spare sits on the GPUs it gave back: it goes (a new one starts once it runs again)
        out.add(HoldSpare("the job gave its GPUs back for its backoff", ctx.now))
    return new


# ---- the host's queue (scheduling/: it decides across jobs, this records and acts per job) ---------------------
def _queue(m: JobModel, ctx: Context, out: _Out) -> JobModel:
    """A job that asks for GPUs waits for the queue to place it; its submission time orders it (kept from before)."""
    submitted = m.submitted_at if m.submitted_at is not None else ctx.wall
    out.add(Event("queued", {"reason": m.launch.reason, "submitted_at": submitted}))
    new = _to(m, S.QUEUED, "waiting for GPUs", ctx, out, submitted_at=submitted, queued_at=ctx.wall,
              backoff_until=None, backoff_seconds=None, final=False)
    out.add(Persist())
    return new


def _placed(m: JobModel, msg: Placed, ctx: Context, out: _Out) -> tuple[JobModel, str | None]:
    if m.state != S.QUEUED:
        return m, None  # a placement for a job that left the queue meanwhile (stopped): nothing to launch
    since = m.queued_at if m.queued_at is not None else m.submitted_at
    waited = ctx.wall - since if since is not None else None
    out.add(Event("placed", {"gpus": list(msg.gpus), "backfill": msg.backfill, "reason": msg.reason,
                             "waited_seconds": None if waited is None else round(max(waited, 0.0), 3)}))
    m = m.with_(placement=tuple(msg.gpus), placed_at=ctx.now, backfill=msg.backfill, queued_at=None)
    return _launch(m, m.launch, ctx, out), "placed"


def _preempt(m: JobModel, msg: Preempt, ctx: Context, out: _Out) -> tuple[JobModel, str | None]:
    """Stop with a save at the next iteration boundary, then back to the queue in its old place. A job backing off
    that still holds its GPUs (a restart at once) has no trainer: it goes back to the queue at once; one that gave
    them back for its backoff has nothing to give."""
    restarting = m.stop if m.state == S.STOPPING and m.stop is not None and m.stop.then == Then.RESTART else None
    if m.state not in (S.STARTING, S.RUNNING, S.BACKING_OFF) and restarting is None:
        return m, None
    if m.state == S.BACKING_OFF and not m.placement:
        return m, None  # it gave its GPUs back for its backoff already: nothing to take
    out.add(Event("preempted", {"by": msg.by, "reason": msg.reason}))
    m = m.with_(preemptions=m.preemptions + 1)
    if m.state in (S.STARTING, S.RUNNING):
        intent = StopIntent(msg.reason, Origin.SCHEDULER, Then.QUEUE, ctx.now + ctx.stop_timeout, final=False)
        return _begin_stop(m, intent, ctx, out), "preempting"
    if restarting is None:  # backing off
        return _requeue(m, msg.reason, ctx, out), "queued"
    out.add(Event("stop_changed", {"reason": msg.reason, "then": Then.QUEUE.value, "final": False}))
    out.add(Persist())
    return m.with_(stop=replace(restarting, then=Then.QUEUE, reason=msg.reason, origin=Origin.SCHEDULER)), "preempting"


def hands_over(stop: StopIntent) -> bool:
    """A stop isaacd makes to give the job's GPUs to another job: a preemption (back to the queue), or a sweep's own
    stop of its trial (a pause at a rung, with a save; the sweep's end or cancel; a promotion asked meanwhile starts it
    again from that save). Never an operator's stop, a shutdown's or a watchdog's: the train script's own cleanup after
    its save (a logger's finish, files it closes) may matter to whoever runs it."""
    return stop.then == Then.QUEUE or (stop.origin == Origin.SWEEP and stop.then in (Then.STOP, Then.START))


HANDOVER_DETAIL = ("its checkpoint is saved: the train script's own cleanup is skipped (SIGKILL) and its GPUs are "
                   "given back now")


def _stop_saved(m: JobModel, msg: StopSaved, out: _Out) -> JobModel:
    """Issue 42: a stop that hands the GPUs over is done once the shim confirms its save (the trainer's state is on
    disk); what the script still runs after learn() (Isaac Lab's teardown, a W&B finish: seconds) only keeps the job
    waiting for them (`isaacd queue`: a preempting job's GPUs are not free until its trainer is gone). The trainer's
    tree is killed now, saved first; its exit then ends the stop as it would have (requeued, stopped): no crash, no
    restart counted, whatever the exit says. A trainer that exits by itself after its save sends no StopSaved."""
    stop = m.stop
    if m.state != S.STOPPING or stop is None or stop.killed or not hands_over(stop):
        return m
    out.add(Event("stop_saved_kill", {"iteration": msg.iteration, "checkpoint": msg.checkpoint,
                                      "cleanup": msg.cleanup, "detail": HANDOVER_DETAIL}))
    new = m.with_(stop=replace(stop, killed=True))
    out.add(Persist(), Kill())
    return new


def _requeue(m: JobModel, reason: str, ctx: Context, out: _Out) -> JobModel:
    """Its GPUs given back; it waits in the queue at its old place (its submission time is kept) and resumes from
    the checkpoint its stop saved."""
    out.add(Event("requeued", {"reason": reason, "gpus": list(m.placement)}))
    new = _to(m, S.QUEUED, reason, ctx, out, stop=None, placement=(), placed_at=None, backfill=False,
              launch=LaunchIntent(reason, Origin.SCHEDULER), backoff_until=None, backoff_seconds=None,
              submitted_at=m.submitted_at if m.submitted_at is not None else ctx.wall, queued_at=ctx.wall)
    out.add(Persist())
    return new


# ---- commands ------------------------------------------------------------------------------
def _start(m: JobModel, cmd: Start, ctx: Context, out: _Out) -> tuple[JobModel, str]:
    if cmd.origin == Origin.THERMAL:
        # only the watchdog that parked the job may resume it; an operator's stop stays a stop
        if m.state != S.STOPPED or m.parked_by != THERMAL_WATCHDOG:
            return m, "not parked"
    if m.state == S.STOPPING and m.stop is not None and cmd.origin in (Origin.OPERATOR, Origin.SWEEP):
        # (a sweep's promotion that comes while the same trial's pause still saves: it starts once stopped)
        return _after_the_stop(m, m.stop, Then.START, cmd.reason, out, by_sweep=cmd.origin == Origin.SWEEP)
    if m.state.active or m.state in (S.PENDING, S.QUEUED):
        return m, f"already {m.state.value}"
    if m.state == S.BACKING_OFF:  # the restart was counted when it was scheduled
        new = _launch_or_queue(m, ctx, out)
        return new, "starting" if new.state == S.STARTING else REQUEUED_NOW
    if cmd.origin == Origin.THERMAL:  # the watchdog's own restart, after its park: counted like one
        m = _count_restart(m, cmd.reason, ReasonClass.WATCHDOG, ctx, in_window=True)
    new = _to(m, S.PENDING, cmd.reason, ctx, out, launch=LaunchIntent(cmd.reason, cmd.origin), final=False,
              parked_by=None, quick_failures=0, startup_ooms=0, training_ooms=0)
    out.add(Persist())
    return new, "starting"


def _stop(m: JobModel, cmd: Stop, ctx: Context, out: _Out) -> tuple[JobModel, str]:
    then = Then.PARK if cmd.park else Then.STOP
    if m.state in (S.STARTING, S.RUNNING):
        intent = StopIntent(cmd.reason, cmd.origin, then, ctx.now + ctx.stop_timeout, final=cmd.final)
        return _begin_stop(m, intent, ctx, out), "stopping"
    if m.state == S.STOPPING and m.stop is not None:
        cur = m.stop
        if cur.then == Then.START and not cmd.final:
            # a shutdown (or a config removal) during a stop that an operator's start follows: the trainer stops
            # now, and the job is not kept stopped, so the next supervisor (or the job's return) starts it
            upgraded = replace(cur, then=then, final=False, reason=cmd.reason, origin=cmd.origin)
        else:
            # a stop outranks a restart or start in flight, and an operator's stop outranks a shutdown's
            upgraded = replace(cur, then=then if cur.then in (Then.RESTART, Then.START, Then.QUEUE) else cur.then,
                               final=cur.final or cmd.final,
                               reason=cmd.reason if cur.then in (Then.RESTART, Then.QUEUE) or (cmd.final and not cur.final)
                               else cur.reason, origin=cmd.origin if cmd.final and not cur.final else cur.origin)
        if upgraded != cur:
            out.add(Event("stop_changed", {"reason": upgraded.reason, "then": upgraded.then.value,
                                           "final": upgraded.final}))
            out.add(Persist())
        dropped = {Then.RESTART: "; the restart under way is called off",
                   Then.QUEUE: "; it will not go back to the queue",
                   Then.START: "; the start asked during the stop is called off"}.get(cur.then, "")
        return m.with_(stop=upgraded), f"already stopping{dropped if upgraded.then != cur.then else ''}"
    if m.state in (S.PENDING, S.BACKING_OFF, S.QUEUED):
        return _rest(m, S.STOPPED, cmd.reason, cmd.final, ctx, out,
                     parked_by=THERMAL_WATCHDOG if cmd.park else None), "stopped"
    return m, f"not running ({m.state.value})"


START_AFTER_STOP = "operator start (isaacd start, asked during a stop)"


def _after_the_stop(m: JobModel, cur: StopIntent, then: Then, reason: str, out: _Out,
                    by_sweep: bool = False) -> tuple[JobModel, str]:
    """An operator's start (then=START) or restart (then=RESTART) while the trainer stops: remembered in the stop
    intent and saved, so the job stops and then starts, also across a supervisor restart. A stop that ends this
    supervisor's watch (a shutdown, a config removal) refuses it: the job's start is not this supervisor's to give."""
    verb = "start" if then == Then.START else "restart"
    word = "starting" if then == Then.START else "restarting"
    if cur.origin in (Origin.SHUTDOWN, Origin.CONFIG) and not cur.final:
        why = ("the supervisor is shutting down; the next one resumes this job" if cur.origin == Origin.SHUTDOWN
               else "it is stopping because it was removed from the config; put it back and `isaacd reload`")
        return m, Refused(f"not {word}: {why}")
    if cur.then == Then.RESTART:  # a restart under way launches it again anyway
        return m, "already restarting"
    if cur.then == Then.QUEUE:  # preempted: it saves, then waits in the queue, which starts it when it fits
        return m, "already preempted: it saves, then waits in the queue, which starts it again when it fits"
    if cur.then == then:
        return m, f"already {word} once stopped"
    # a start keeps the stop's reason and origin (the job rests stopped for it first); a restart is the operator's
    new = replace(cur, then=then, start_by=reason if by_sweep else None) if then == Then.START else \
        replace(cur, then=then, reason=reason, origin=Origin.OPERATOR)
    who = "sweep" if by_sweep else "operator"
    out.add(Event("stop_changed", {"reason": new.reason, "then": then.value, "final": new.final,
                                   "detail": f"{who} {verb} during the stop: the trainer stops, then the job "
                                             f"{'starts' if then == Then.START else 'restarts'}"}))
    out.add(Persist())
    return m.with_(stop=new), f"{word} once stopped (the stop under way finishes first)"


def _configured_num_envs(m: JobModel, ctx: Context, out: _Out) -> JobModel:
    """An operator's restart tries the configured num_envs again (the GPU may have room for it now)."""
    in_use = P.num_envs_in_use(m.num_envs, m.num_envs_of, ctx.num_envs)
    new = m.with_(num_envs=None, num_envs_of=None, startup_ooms=0, training_ooms=0)
    if in_use != ctx.num_envs:
        out.add(Event("num_envs_restored", {"from": in_use, "to": ctx.num_envs,
                                            "detail": "operator restart: back to the configured num_envs"}),
                Persist())
    return new


def _restart(m: JobModel, cmd: Restart, ctx: Context, out: _Out) -> tuple[JobModel, str]:
    if cmd.origin == Origin.OPERATOR:
        m = _configured_num_envs(m, ctx, out)
    if m.state in (S.STARTING, S.RUNNING):
        intent = StopIntent(cmd.reason, cmd.origin, Then.RESTART, ctx.now + ctx.stop_timeout,
                            before_iteration=cmd.before_iteration, new_seed=cmd.new_seed)
        return _begin_stop(m, intent, ctx, out), "restarting"
    if m.state == S.STOPPING and m.stop is not None:
        if cmd.origin == Origin.CONFIG and not m.stop.final and m.stop.then == Then.STOP:
            # the job is back in the config before its removal stop finished: go on training
            out.add(Event("stop_changed", {"reason": cmd.reason, "then": Then.RESTART.value, "final": False}))
            out.add(Persist())
            return m.with_(stop=replace(m.stop, then=Then.RESTART, reason=cmd.reason)), "restarting"
        if cmd.origin == Origin.OPERATOR:
            return _after_the_stop(m, m.stop, Then.RESTART, cmd.reason, out)
        return m, "already stopping"
    if m.state == S.BACKING_OFF:
        new = _launch_or_queue(m, ctx, out)
        return new, "restarting" if new.state == S.STARTING else REQUEUED_NOW
    if m.state in (S.PENDING, S.QUEUED):
        return m, f"already {m.state.value}"
    if m.state == S.COMPLETED:
        # nothing to restart: a completed job starts as `isaacd start` starts it (it trains only if max_iterations
        # were raised; else the launch is refused as complete), and no restart is counted
        return _start(m, Start(cmd.origin, cmd.reason), ctx, out)
    cls = _requested_restart_class(cmd.origin)
    counted = _count_restart(m, cmd.reason, cls, ctx, in_window=cls != ReasonClass.OPERATOR)
    new = _to(counted, S.PENDING, cmd.reason, ctx, out,
              launch=LaunchIntent(cmd.reason, cmd.origin, cmd.before_iteration, cmd.new_seed), final=False,
              parked_by=None, quick_failures=0)
    out.add(Persist())
    return new, "starting"


def _readded(m: JobModel, cmd: Readded, ctx: Context, out: _Out) -> tuple[JobModel, str | None]:
    """Back in the config: a removal's stop still under way turns into a restart (the trainer goes on training), a
    job the removal stopped starts again; any other state has nothing to undo."""
    if m.state == S.STOPPING:
        return _restart(m, Restart(Origin.CONFIG, cmd.reason), ctx, out)
    if m.state == S.STOPPED:
        return _start(m, Start(Origin.CONFIG, cmd.reason), ctx, out)
    return m, None


def _reset(m: JobModel, cmd: Reset, ctx: Context, out: _Out) -> tuple[JobModel, str]:
    """Train from scratch: from rest only (stopped, completed, failed), as a start that resumes from nothing; its launch
    sets the old run dirs aside first (runner._launch). A job with a trainer, or one about to get one, is refused:
    a reset that stopped a trainer itself would throw a running training away on a mistyped job name."""
    if not m.state.at_rest:
        return m, Refused(f"not reset: it is {m.state.value}; stop it first (`isaacd stop {ctx.job}`), then "
                          f"`isaacd reset {ctx.job}`")
    if ctx.backup:
        # the bucket's checkpoints would be resumed from (and pruned against) as if they were this training's
        return m, Refused("not reset: it has a [jobs.backup] target, whose checkpoints a launch with none on disk "
                          "resumes from; give the job another [jobs.backup] url (or remove the section), "
                          f"`isaacd reload`, then `isaacd reset {ctx.job}`")
    out.add(Event("reset", {"reason": cmd.reason, "from_state": m.state.value,
                            "detail": "training from scratch: the launch sets the old run dirs aside (kept, not "
                                      "deleted) and resumes from no checkpoint"}))
    new = _to(m, S.PENDING, cmd.reason, ctx, out, launch=LaunchIntent(cmd.reason, cmd.origin, fresh=True),
              final=False, parked_by=None, quick_failures=0, startup_ooms=0, training_ooms=0, num_envs=None,
              num_envs_of=None, rollbacks=0)
    out.add(Persist())
    return new, "reset: training from scratch; the old run dirs are kept (`isaacd events` says where)"


def _resume_from(m: JobModel, cmd: ResumeFrom, ctx: Context, out: _Out) -> tuple[JobModel, str]:
    """PBT's exploit (issue 40): a new timeline from a copy of another job's checkpoint. A training member saves at
    its next iteration boundary and goes again at once (a restart: its booted spare takes the launch over where one
    is ready), one at rest goes through the queue as a start does. Refused while another stop or launch is under
    way (asked again by the sweep), and with a backup target, as a reset is: a launch that found no copy would
    resume the bucket's newest."""
    fj = FromJob(cmd.source, tuple(cmd.run_dirs))
    if ctx.backup:
        return m, Refused(f"not resumed from {cmd.source}: it has a [jobs.backup] target, whose checkpoints a launch "
                          "with none on disk resumes from")
    if m.state in (S.STARTING, S.RUNNING):
        out.add(Event("resume_from_job", {"reason": cmd.reason, "source": cmd.source, "from_state": m.state.value,
                                          "detail": f"saving, then a new timeline from a copy of {cmd.source}'s "
                                                    "newest complete checkpoint"}))
        intent_ = StopIntent(cmd.reason, cmd.origin, Then.RESTART, ctx.now + ctx.stop_timeout, from_job=fj)
        return _begin_stop(m, intent_, ctx, out), f"saving, then resuming from a copy of {cmd.source}'s checkpoint"
    if not m.state.at_rest:
        return m, Refused(f"not resumed from {cmd.source}: it is {m.state.value}; ask again once it trains or rests")
    out.add(Event("resume_from_job", {"reason": cmd.reason, "source": cmd.source, "from_state": m.state.value,
                                      "detail": f"a new timeline from a copy of {cmd.source}'s newest complete "
                                                "checkpoint (its run dirs stay where they are)"}))
    intent = LaunchIntent(cmd.reason, cmd.origin, fresh=True, from_job=fj)
    new = _to(m, S.PENDING, cmd.reason, ctx, out, launch=intent, final=False, parked_by=None, quick_failures=0,
              startup_ooms=0, training_ooms=0, rollbacks=0)
    out.add(Persist())
    return new, f"resuming from a copy of {cmd.source}'s newest complete checkpoint"


def _watchdog(m: JobModel, trip: WatchdogTrip, ctx: Context, out: _Out) -> tuple[JobModel, str | None]:
    action, reason = trip.action, f"watchdog {trip.watchdog}: {trip.detail}"
    if action == WatchdogAction.ROLLBACK and not P.rollback_allowed(m.rollbacks, trip.max_rollbacks):
        action = WatchdogAction.STOP
        reason = (f"watchdog {trip.watchdog}: still diverging after {m.rollbacks} rollbacks "
                  f"(max_rollbacks = {trip.max_rollbacks}); stopped: {trip.detail}")
    m = m.with_(watchdog_trips=bump(m.watchdog_trips, f"{trip.watchdog}/{action}"))
    out.add(Event("watchdog_trip", {"watchdog": trip.watchdog, "action": action,
                                    "configured_action": trip.configured_action, "detail": trip.detail,
                                    "values": trip.values, "threshold": trip.threshold,
                                    "hold_seconds": trip.hold_seconds, "trouble_iteration": trip.trouble_iteration,
                                    "note": trip.note}))
    out.add(Persist())
    if action == WatchdogAction.RESTART:
        return _restart(m, Restart(Origin.WATCHDOG, reason), ctx, out)
    if action == WatchdogAction.ROLLBACK:
        m = m.with_(rollbacks=m.rollbacks + 1)
        return _restart(m, Restart(Origin.WATCHDOG, reason, trip.trouble_iteration, trip.new_seed), ctx, out)
    if action == WatchdogAction.STOP:
        if trip.watchdog == THERMAL_WATCHDOG:
            # parked, not final: resumes by itself once the GPUs cool down
            return _stop(m, Stop(Origin.THERMAL, reason, final=False, park=True), ctx, out)
        return _stop(m, Stop(Origin.WATCHDOG, reason), ctx, out)
    return m, None  # log / power-cap: recorded, nothing more


# ---- what a supervisor start found (attempt/recovery.py) ---------------------------------------
def _adopted(m: JobModel, out: _Out) -> JobModel:
    """A live trainer adopted: a stop the previous supervisor began is finished, on its saved deadline (the model
    says whether it had come to SIGKILL; the runner skips a SIGINT the trainer already saw)."""
    if m.state != S.STOPPING or m.stop is None:
        return m
    out.add(Kill() if m.stop.killed else Signal(int(_signal.SIGINT)))
    out.add(Event("stop_resumed", {"reason": m.stop.reason, "then": m.stop.then.value,
                                   "detail": "a stop in flight when the supervisor stopped; carried on"}))
    return m


def _launch_unfinished(m: JobModel, msg: LaunchUnfinished, out: _Out) -> JobModel:
    """The launch the model decided never got a trainer: carry it out (the decision is on disk already)."""
    if m.state != S.STARTING:
        return m
    if msg.replayed:
        out.add(Event("launch_replayed", {"reason": m.launch.reason,
                                          "detail": "the supervisor stopped during this launch; launching it again"}))
    out.add(Launch(m.launch))
    return m


LOST_WHILE_DOWN = "trainer ended while the supervisor was not running"


def recovered(m: JobModel, found: Found) -> Message | None:
    """What a supervisor start's findings mean for the job (attempt/recovery.py records the matching history fact and
    hands the answer to `decide`): a live trainer is adopted; a launch whose trainer was never started is launched
    again; any other trainer of an active job ended while no supervisor watched (lost); a job at rest because of a
    shutdown, a config removal or a heat park resumes; a job never started that is not to start by itself stops."""
    if m.state.active:
        if found.trainer_alive:
            return Adopted()
        if m.state == S.STARTING and not found.spawned:
            return LaunchUnfinished()
        return Exited(LOST_WHILE_DOWN, ReasonClass.LOST, success=False)
    if m.state == S.STOPPED and not m.final:
        return Start(Origin.RECOVERY, "resuming after a supervisor restart")
    if m.state == S.PENDING and not found.autostart and not found.attempted:
        return Stop(Origin.CONFIG, "autostart = false")
    return None
