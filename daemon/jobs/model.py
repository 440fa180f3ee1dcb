"""The job model: its states, the one table of allowed transitions, and the decision state that is persisted.

    pending ──tick──▶ starting ──first iteration──▶ running ──exit 0 at max_iterations──▶ completed
       │ (placed by isaacd: no GPUs yet)  ▲ placed                          │ preempted: saved, then
       └──────────────▶ queued ───────────┘ ◀───────────────────────────────┘ queued again (issue 31)
                         │  (refused: completed/failed)  │  │
                         └────────exit / crash───────────┤  └──stop / restart──▶ stopping ──exit──▶ stopped
                                   (limit: failed)       ▼                          │
       starting ◀──backoff elapsed / start────── backing-off ◀──restart asked───────┘
    stopped / completed / failed ──start, reset (fresh: from no checkpoint)──▶ pending
    backing-off ──backoff elapsed, a job the queue placed──▶ queued: it gave its GPUs back when the backoff began
    (a queued job may use them meanwhile) and waits at its old place (its submission time kept); a restart at once
    (no delay) keeps them

Anything not in TRANSITIONS is a bug, raised as InvalidTransition rather than silently applied. `JobModel`
is everything `machine.decide` needs to decide, and nothing it does not: it is immutable, it is saved with
the job's history before any effect that matters acts (see effects.py), and it is read back after a
supervisor crash, so a stop, a backoff deadline or a launch in flight is carried on, never forgotten.
"""

from __future__ import annotations

import enum
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any


class JobState(str, enum.Enum):
    PENDING = "pending"
    QUEUED = "queued"  # waits for the GPUs it asked for (scheduling/: the queue places it)
    STARTING = "starting"
    RUNNING = "running"
    BACKING_OFF = "backing-off"
    STOPPING = "stopping"
    STOPPED = "stopped"
    COMPLETED = "completed"
    FAILED = "failed"

    @property
    def active(self) -> bool:
        """A trainer process/container exists (or may exist) for the job."""
        return self in (JobState.STARTING, JobState.RUNNING, JobState.STOPPING)

    @property
    def at_rest(self) -> bool:
        """Stopped, completed or failed: no trainer, and none until a start or a reset (the one definition: the
        queue's pinned GPUs, the spare keeper, `isaacd reset`, an old document's resting state read it)."""
        return self in (JobState.STOPPED, JobState.COMPLETED, JobState.FAILED)


class OomPhase(enum.StrEnum):
    """When an attempt ran out of GPU memory (jobs/machine.py decides): the key of `cuda_ooms` and the
    `phase` label of isaacd_job_cuda_ooms_total. A str, so the JSON and the label stay the bare word."""

    STARTUP = "startup"  # before the attempt's first iteration: the same launch fails the same way
    TRAINING = "training"  # after training ran: restarted like any crash


S = JobState
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    S.PENDING: frozenset({S.STARTING, S.STOPPED, S.QUEUED}),
    S.QUEUED: frozenset({S.STARTING, S.STOPPED}),
    S.STARTING: frozenset({S.RUNNING, S.BACKING_OFF, S.FAILED, S.STOPPING, S.COMPLETED, S.STOPPED}),
    S.RUNNING: frozenset({S.BACKING_OFF, S.COMPLETED, S.FAILED, S.STOPPING, S.STOPPED}),
    S.BACKING_OFF: frozenset({S.STARTING, S.STOPPED, S.QUEUED}),
    S.STOPPING: frozenset({S.STOPPED, S.BACKING_OFF, S.QUEUED}),
    S.STOPPED: frozenset({S.PENDING}),
    S.COMPLETED: frozenset({S.PENDING}),
    S.FAILED: frozenset({S.PENDING}),
}


class InvalidTransition(RuntimeError):
    pass


def check_transition(job: str, old: JobState, new: JobState) -> None:
    if new not in TRANSITIONS[old]:
        raise InvalidTransition(f"job {job}: {old.value} -> {new.value} is not an allowed transition")


class Origin(str, enum.Enum):
    """Who asked: said in events, and it decides what counts as a restart and who may undo a stop."""

    OPERATOR = "operator"  # isaacd start/stop/restart, or `systemctl stop` of the job's unit
    WATCHDOG = "watchdog"
    THERMAL = "thermal"  # the GPU temperature watchdog's park and resume
    CRASH = "crash"  # the trainer ended by itself
    CONFIG = "config"  # a reload removed or re-added the job
    SHUTDOWN = "shutdown"  # the supervisor is stopping; the next one resumes the job
    RECOVERY = "recovery"  # what a supervisor start found
    LAUNCH = "launch"  # a launch's own deadline ran out (a spare that did not take the attempt over)
    SCHEDULER = "scheduler"  # the host's queue: a placement, a preemption (scheduling/)
    SWEEP = "sweep"  # a sweep's scheduler: a trial launched, paused with a save, promoted (sweeps/)


class Then(str, enum.Enum):
    """What a stop is for."""

    STOP = "stop"  # come to rest in stopped
    PARK = "park"  # stopped until the GPUs cool down (thermal)
    RESTART = "restart"  # launch again at once, resuming (rollback: from before an iteration)
    START = "start"  # an operator's start came during the stop: come to rest, then start as `isaacd start` does
    QUEUE = "queue"  # preempted: back to the queue in its old place, resumed from the checkpoint the stop saved


@dataclass(frozen=True)
class StopIntent:
    """A stop in flight. Saved before SIGINT is sent; a new supervisor finishes it."""

    reason: str
    origin: Origin
    then: Then
    deadline: float  # monotonic: SIGKILL after this
    final: bool = True  # remembered across supervisor restarts (an operator's stop); not for shutdown/config
    killed: bool = False
    before_iteration: int | None = None  # for a rollback: resume strictly before this iteration
    new_seed: bool = False
    from_job: "FromJob | None" = None  # PBT's exploit: then launch from a copy of this job's checkpoint
    start_by: str | None = None  # then=START asked by a sweep (an ASHA promotion): its reason; None: an operator's


@dataclass(frozen=True)
class FromJob:
    """PBT's exploit (issue 40): the launch resumes from a copy of another job's newest complete checkpoint, looked
    for in `run_dirs` (that job's, newest first) when the launch is prepared."""

    source: str
    run_dirs: tuple[str, ...]


@dataclass(frozen=True)
class LaunchIntent:
    """The next launch: why, and how to resume. Set on entering pending/backing-off, used on entering starting."""

    reason: str = "initial"
    origin: Origin = Origin.OPERATOR
    before_iteration: int | None = None
    new_seed: bool = False
    fresh: bool = False  # `isaacd reset`: from no checkpoint, the job's old run dirs set aside first (kept)
    # with fresh: a new timeline that starts from a copy of this job's checkpoint (the old run dirs stay where they are)
    from_job: FromJob | None = None


@dataclass(frozen=True)
class JobModel:
    """The decision state of one job (all times monotonic seconds, on one boot: see clock.py)."""

    state: JobState = JobState.PENDING
    reason: str | None = None
    launch: LaunchIntent = field(default_factory=LaunchIntent)
    stop: StopIntent | None = None
    backoff_until: float | None = None
    backoff_seconds: float | None = None  # the delay chosen: waited again in full after a reboot
    final: bool = False  # at rest and meant to stay so across supervisor restarts
    parked_by: str | None = None  # "gpu_temperature": the thermal watchdog resumes the job, nobody else
    quick_failures: int = 0  # consecutive attempts that died young without a newer checkpoint
    restarts: int = 0
    restart_times: tuple[float, ...] = ()  # monotonic, counted restarts within the crash-loop window
    restarts_by_reason: tuple[tuple[str, int], ...] = ()
    last_restart_reason: str | None = None
    rollbacks: int = 0
    watchdog_trips: tuple[tuple[str, int], ...] = ()  # ("watchdog/action", count)
    # CUDA out of memory (issue 23). num_envs: the stepped-down count launches use (None: the configured one);
    # num_envs_of: the configured count it was stepped down from, so a config that changes num_envs voids it
    num_envs: int | None = None
    num_envs_of: int | None = None
    startup_ooms: int = 0  # consecutive attempts that ran out of GPU memory before their first iteration
    training_ooms: int = 0  # consecutive attempts that ran out of GPU memory after training ran
    cuda_ooms: tuple[tuple[str, int], ...] = ()  # (OomPhase, count): every one, for metrics
    # the host's queue (issue 31), for a job that asks for GPUs: the places it holds (physical indices, or a MIG
    # instance's key "p:j", issue 42; () while it waits or rests), when it got them (monotonic: the minimum run time), whether it went ahead of a blocked job
    # (backfill: it gives them back the moment that job could run), when it was submitted (wall clock: the queue's
    # order, kept across a preemption and a supervisor restart), and how often it was preempted
    placement: tuple[int | str, ...] = ()
    placed_at: float | None = None
    backfill: bool = False
    submitted_at: float | None = None
    queued_at: float | None = None  # wall clock: when it last entered the queue (its wait; a requeue starts anew)
    preemptions: int = 0

    def with_(self, **changes: Any) -> "JobModel":
        return replace(self, **changes)

    # ---- persistence (inside the job's history document) --------------------------------
    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["state"] = self.state.value
        d["launch"]["origin"] = self.launch.origin.value
        if self.stop is not None:
            d["stop"]["origin"] = self.stop.origin.value
            d["stop"]["then"] = self.stop.then.value
        d["restart_times"] = list(self.restart_times)
        d["restarts_by_reason"] = dict(self.restarts_by_reason)
        d["watchdog_trips"] = dict(self.watchdog_trips)
        d["cuda_ooms"] = dict(self.cuda_ooms)
        d["placement"] = list(self.placement)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "JobModel":
        """Raises ValueError/KeyError/TypeError on a damaged document (the caller rebuilds)."""
        launch = d.get("launch") or {}
        stop = d.get("stop")
        return cls(
            state=JobState(d["state"]),
            reason=d.get("reason"),
            launch=LaunchIntent(reason=str(launch.get("reason", "initial")),
                                origin=Origin(launch.get("origin", "operator")),
                                before_iteration=launch.get("before_iteration"),
                                new_seed=bool(launch.get("new_seed", False)),
                                fresh=bool(launch.get("fresh", False)),
                                from_job=_from_job(launch.get("from_job"))),
            stop=None if stop is None else StopIntent(
                reason=str(stop["reason"]), origin=Origin(stop["origin"]), then=Then(stop["then"]),
                deadline=float(stop["deadline"]), final=bool(stop.get("final", True)),
                killed=bool(stop.get("killed", False)), before_iteration=stop.get("before_iteration"),
                new_seed=bool(stop.get("new_seed", False)), from_job=_from_job(stop.get("from_job")),
                start_by=stop.get("start_by")),
            backoff_until=d.get("backoff_until"),
            backoff_seconds=d.get("backoff_seconds"),
            final=bool(d.get("final", False)),
            parked_by=d.get("parked_by"),
            quick_failures=int(d.get("quick_failures", 0)),
            restarts=int(d.get("restarts", 0)),
            restart_times=tuple(float(t) for t in d.get("restart_times", [])),
            restarts_by_reason=tuple(sorted((str(k), int(v)) for k, v in (d.get("restarts_by_reason") or {}).items())),
            last_restart_reason=d.get("last_restart_reason"),
            rollbacks=int(d.get("rollbacks", 0)),
            watchdog_trips=tuple(sorted((str(k), int(v)) for k, v in (d.get("watchdog_trips") or {}).items())),
            num_envs=None if d.get("num_envs") is None else int(d["num_envs"]),
            num_envs_of=None if d.get("num_envs_of") is None else int(d["num_envs_of"]),
            startup_ooms=int(d.get("startup_ooms", 0)),
            training_ooms=int(d.get("training_ooms", 0)),
            cuda_ooms=tuple(sorted((str(k), int(v)) for k, v in (d.get("cuda_ooms") or {}).items())),
            placement=tuple(_place(i) for i in d.get("placement") or ()),
            placed_at=None if d.get("placed_at") is None else float(d["placed_at"]),
            backfill=bool(d.get("backfill", False)),
            submitted_at=None if d.get("submitted_at") is None else float(d["submitted_at"]),
            queued_at=None if d.get("queued_at") is None else float(d["queued_at"]),
            preemptions=int(d.get("preemptions", 0)),
        )


def _place(v: Any) -> int | str:
    """A saved place: a GPU's index (every document before issue 42), or a MIG instance's key "p:j"."""
    if isinstance(v, bool):
        raise TypeError(f"not a place: {v!r}")
    if isinstance(v, int) or (isinstance(v, str) and v.isdigit()):
        return int(v)
    if isinstance(v, str) and re.fullmatch(r"\d+:\d+", v):
        return v
    raise ValueError(f"not a place: {v!r}")


# ---- a model read back (attempt/record.py): not transitions, no state came before them in this supervisor ----
def rebased(m: JobModel, now: float, stop_timeout: float) -> JobModel:
    """A saved model from another boot, whose monotonic values mean nothing here: a backoff is waited again in full,
    a stop gets its grace again, and past restarts stay inside the crash-loop window (the safe side)."""
    return m.with_(
        backoff_until=now + (m.backoff_seconds or 0.0) if m.backoff_until is not None else None,
        stop=None if m.stop is None else replace(m.stop, deadline=now + stop_timeout),
        restart_times=tuple(now for _ in m.restart_times),
        placed_at=now if m.placed_at is not None else None)  # the minimum run time counts again (the safe side)


def legacy_state(m: JobModel, open_trainer: bool, final_state: str | None, final_reason: str | None) -> JobModel:
    """The state a document written before the state machine (or rebuilt from the journal) leaves the job in:
    running, to be adopted, when its last attempt has no exit and a handle or token to find its trainer by (recovery
    then adopts it or calls it lost); else the resting state it saved, kept so across restarts; else pending."""
    if open_trainer:
        return m.with_(state=JobState.RUNNING, reason="adopting")
    if final_state in {state.value for state in JobState if state.at_rest}:
        return m.with_(state=JobState(final_state), reason=final_reason, final=True)
    return m


def bump(counts: tuple[tuple[str, int], ...], key: str) -> tuple[tuple[str, int], ...]:
    d = dict(counts)
    d[key] = d.get(key, 0) + 1
    return tuple(sorted(d.items()))


def _from_job(d: Any) -> FromJob | None:
    if not isinstance(d, dict):
        return None
    return FromJob(source=str(d["source"]), run_dirs=tuple(str(x) for x in d.get("run_dirs") or ()))
