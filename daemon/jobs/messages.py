"""What reaches a job's state machine: commands (someone wants something) and observations (something happened).

Every message is a frozen value; `machine.decide` is the only code that turns one into a change of the job.
Commands carry their origin, so "who asked" is data, not a string prefix to parse. The closed sets of words a
message carries are StrEnums (`Settle`, `WatchdogAction`, `ReasonClass`): each member is its plain string, so
events, saved histories and metrics labels read exactly as before.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from .model import Origin
from .policy import DEFAULT_MAX_ROLLBACKS


class Settle(enum.StrEnum):
    """How a refused launch ends the job at once, instead of counting as a crash."""

    COMPLETED = "completed"  # max_iterations already reached
    FAILED = "failed"  # retrying cannot help: missing GPU, no loadable checkpoint, unknown Isaac Lab
    STOPPED = "stopped"  # PBT's exploit found no copy to resume from: back at rest, for its sweep to decide again


class WatchdogAction(enum.StrEnum):
    """What a watchdog trip does (the `action` of `[jobs.watchdogs.<name>]`, config/watchdogs.py)."""

    LOG = "log"  # recorded, nothing more
    RESTART = "restart"  # resume from the newest complete checkpoint
    ROLLBACK = "rollback"  # resume from a checkpoint before the trouble iteration
    STOP = "stop"  # come to rest (thermal: parked until the GPUs cool down)
    POWER_CAP = "power-cap"  # lower the GPUs' power limit: done by the engine, recorded by the machine


class ReasonClass(enum.StrEnum):
    """Why an attempt ended, and so why a restart was counted: a low-cardinality label (the key of
    `restarts_by_reason`, the `reason` label of the restart metrics)."""

    EXIT_CODE = "exit_code"  # exited non-zero (or 0 short of max_iterations)
    SIGNAL = "signal"  # killed by a signal
    OOM = "oom"  # OOM-killed by the kernel
    CUDA_OOM = "cuda_oom"  # out of GPU memory, by the trainer's last output
    CONFIG_ERROR = "config_error"  # the trainer cannot run as configured (daemon/attempt/config_fault.py): never restarted
    WATCHDOG = "watchdog"  # a watchdog asked for the restart (never an exit's class)
    OPERATOR = "operator"  # stopped outside isaacd, or an operator's restart
    LOST = "lost"  # the exit status is unknown (vanished while the supervisor was down), or the launch failed
    NODE_LOST = "node_lost"  # the machine it ran on went away (ray)


# ---- commands ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Start:
    origin: Origin
    reason: str


@dataclass(frozen=True)
class Stop:
    origin: Origin
    reason: str
    final: bool = True  # False: a supervisor shutdown or a config removal; the job resumes when they undo it
    park: bool = False  # thermal: stopped until the GPUs cool down


@dataclass(frozen=True)
class Restart:
    origin: Origin
    reason: str
    before_iteration: int | None = None  # a rollback: resume from a checkpoint strictly before this
    new_seed: bool = False


@dataclass(frozen=True)
class Reset:
    """`isaacd reset`: train the job again from scratch. Its old run dirs are kept, set aside at the launch."""

    origin: Origin
    reason: str


@dataclass(frozen=True)
class ResumeFrom:
    """PBT's exploit (issue 40): start a job at rest again from a copy of job `source`'s newest complete checkpoint
    (found in its `run_dirs`, newest first, when the launch is prepared), a new timeline from there."""

    origin: Origin
    reason: str
    source: str
    run_dirs: tuple[str, ...]


@dataclass(frozen=True)
class WatchdogTrip:
    """A watchdog's condition held long enough. The machine records it, applies the rollback bound and acts."""

    watchdog: str
    action: WatchdogAction  # what is done (power-cap is done by the engine; recorded here)
    configured_action: WatchdogAction  # what the watchdog's config says (action may differ: a refused power cap)
    detail: str
    values: dict[str, Any]
    threshold: Any = None
    hold_seconds: float = 0.0
    trouble_iteration: int | None = None
    new_seed: bool = False
    max_rollbacks: int = DEFAULT_MAX_ROLLBACKS
    note: str | None = None


@dataclass(frozen=True)
class Readded:
    """A reload put back a job that an earlier reload removed, before its runner was dropped: the removal is
    undone. What that takes depends on where the removal's stop got to, which is the machine's business."""

    reason: str = "back in the config"


@dataclass(frozen=True)
class Placed:
    """The host's queue (scheduling/) gave a waiting job these GPUs: launch it there."""

    gpus: tuple[int | str, ...]  # GPU indices, or a MIG instance "p:j" (issue 42)
    reason: str
    backfill: bool = False  # ahead of a blocked job: it gives them back the moment that job could run


@dataclass(frozen=True)
class Preempt:
    """The host's queue needs this job's GPUs for `by`: stop it with a save at the next iteration boundary, then
    queue it again in its old place (0 iterations lost)."""

    by: str
    reason: str


@dataclass(frozen=True)
class DropSpare:
    """The host's queue needs the GPU memory this job's warm spare holds (for `by`): no spare until `until`."""

    by: str
    reason: str
    until: float  # monotonic


Command = Start | Stop | Restart | Reset | ResumeFrom | WatchdogTrip | Readded | Placed | Preempt | DropSpare


# ---- observations --------------------------------------------------------------------------
@dataclass(frozen=True)
class Tick:
    """Time passed: backoff deadlines, stop deadlines, pending launches."""


@dataclass(frozen=True)
class Progressed:
    """The trainer logged a new iteration (starting → running)."""

    iteration: int


@dataclass(frozen=True)
class LaunchRefused:
    """The launch did not happen. `settle` ends the job (see Settle) or is None (it may work next time: the
    runtime failed to start it, the state disk is full): then it counts like a crash."""

    reason: str
    settle: Settle | None = None
    crash_loop: bool = True  # False when the trainer is not to blame (state disk full): retried, not counted
    # the runtime could not start the program for a reason no retry fixes (attempt/start_fault.py: not executable
    # by the job's user, not there): the job fails at once, as on a trainer's config error
    config_error: TrainerConfigError | None = None


@dataclass(frozen=True)
class CudaOom:
    """The trainer's output says it ran out of GPU memory (daemon/gpu/oom_message.py), with what the GPU sampler saw."""

    kind: str  # torch | cuda | warp | physx | physx_buffer
    line: str  # the trainer's own words
    fix: str  # what the operator can do, in a clause
    gpu: str | None = None  # "GPU 0 (NVIDIA H200): 131.2 of 139.8 GiB in use: ...", None when no GPU data
    trend: str | None = None  # "GPU 0: 20.1 GiB at the start, peak 139.0 GiB, 138.7 GiB at the end over 312 s"
    facts: dict[str, Any] = field(default_factory=dict)  # the same, structured, for the event


@dataclass(frozen=True)
class TrainerConfigError:
    """The trainer cannot run as configured, by its output (daemon/attempt/config_fault.py: an unknown task, a rejected
    Hydra override or flag, a missing module or file, CUDA asked of a torch or host without it) or by its failed start
    (attempt/start_fault.py: a program its user may not execute, or that is not there). A restart would fail the same
    way."""

    kind: str  # config_fault.KINDS: unknown_task | ... | missing_file | no_cuda | not_executable | missing_program
    what: str  # "the trainer does not know the task"
    line: str  # the trainer's own words
    key: str  # the config key to change
    fix: str  # what the operator changes, in a clause


@dataclass(frozen=True)
class Exited:
    """The trainer ended. Facts the runner gathered; what they mean is the machine's business."""

    description: str  # "killed by signal 9 (SIGKILL)", "exited with code 1: OSError: ..."
    reason_class: ReasonClass  # never WATCHDOG: a watchdog's restart is a stop the machine asked for
    success: bool  # exit 0, no signal, not OOM-killed
    external_stop: bool = False  # stopped outside isaacd (systemctl stop of the unit)
    reached_max: bool = False  # the job's max_iterations are done
    finished_early: str | None = None  # exit 0 short of them by the trainer's own stop rule (rl_games score_to_win)
    ran_seconds: float = 0.0
    moved_forward: bool = False  # it left a newer checkpoint than it started from
    cuda_oom: CudaOom | None = None  # set with reason_class CUDA_OOM
    config_error: TrainerConfigError | None = None  # set with reason_class CONFIG_ERROR
    # a spare handed the attempt ended before its first step (killed, crashed): why; the job starts cold at once
    handover_failed: str | None = None


@dataclass(frozen=True)
class LaunchOverdue:
    """A wait of the starting attempt ran past its deadline (attempt/deadlines.py): the trainer is to be killed and
    the job started cold at once. `event` and `fields` are the journal's account (spare_handover_timeout, ...).

    `cold_now` False (a cold launch the runtime did not start): the next launch would be the same, so its exit is a
    crash like any other (backoff, the crash-loop window), not a cold start at once outside it."""

    reason: str
    event: str
    fields: dict[str, Any] = field(default_factory=dict)
    cold_now: bool = True


class Awaited(enum.StrEnum):
    """What a launch waits for before its trainer can start (attempt/planner.py's waits)."""

    CHECKPOINT = "checkpoint"  # the backup fetching the bucket's newest checkpoint (WaitingForCheckpoint)
    LAUNCHER = "launcher"  # the launcher's answer to isaacd's Isaac Lab version probe (WaitingForLauncher)
    PREPARATION = "preparation"  # the launch's preparation on its worker thread (launch/worker.py)


@dataclass(frozen=True)
class LaunchWaited:
    """A launch waits (attempt/planner.py's WaitingForCheckpoint, WaitingForLauncher): each tick while it waits, the
    runner says so. `trainer`: a trainer runs for the job all the same. `on`: what it waits for (the words of a stop
    that ends the wait)."""

    trainer: bool = False
    on: Awaited = Awaited.CHECKPOINT


@dataclass(frozen=True)
class StopSaved:
    """The trainer saved at the stop it was asked for (its shim's `stopped` event names the checkpoint, on disk) and is
    still alive: the train script's own cleanup runs now, since the shim's quick exit refused (`cleanup` says why:
    trainer/shim_exit.py). A trainer that exits at once after its save (the quick exit) sends none: nothing to end."""

    iteration: int | None
    checkpoint: str
    cleanup: str | None = None


Observation = Tick | Progressed | LaunchRefused | Exited | LaunchOverdue | LaunchWaited | StopSaved


# ---- what a supervisor start finds (attempt/recovery.py) -------------------------------------
@dataclass(frozen=True)
class Adopted:
    """A supervisor start found the open attempt's trainer alive and now watches it. A stop that was in flight
    is carried on: SIGINT again (unless the trainer said it saw it), or SIGKILL when it had come to that."""


@dataclass(frozen=True)
class LaunchUnfinished:
    """The model says starting, yet no trainer runs for the launch: the supervisor stopped during it (`replayed`),
    or it waits for the backup's checkpoint (the `LaunchWaited` edge, not replayed). Launch it (again)."""

    replayed: bool = True


@dataclass(frozen=True)
class Found:
    """What a supervisor start found of a job (attempt/recovery.py looks); `machine.recovered` says what it means.
    Facts only: the open attempt is the history's last one while it has no exit."""

    trainer_alive: bool = False  # the open attempt's trainer runs (by its saved handle or its launch token)
    spawned: bool = False  # the open attempt has a saved handle: its trainer was started
    attempted: bool = False  # the job has any attempt in its history
    autostart: bool = True  # the job's `autostart`


Recovered = Adopted | LaunchUnfinished
Message = Command | Observation | Recovered
