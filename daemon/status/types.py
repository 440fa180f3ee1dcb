"""The typed values of `isaacd status`: one job's status, the supervisor's, and their JSON both ways.

The supervisor builds these (attempt/job_status.py) and publishes them; the metrics read them by attribute; the
control socket sends `to_json()`; `isaacd status` turns the JSON back with `from_json` and renders
attributes. The JSON is the wire format scripts read (`isaacd status --json`): its keys and shapes are
those of the dicts this replaced, so a field is added here, never renamed.

`from_json` is lenient on purpose: a missing key takes its default (an older supervisor, or a test's
partial row), an unknown key is ignored (a newer supervisor), and a nested part of the wrong shape is None.
It checks no types: the metrics check each number they export. Only a job without a name is refused.

Stdlib only: `isaacd status` imports this and must start fast.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..backup.status import BackupLease, BackupStatus, BackupUpload
from ..evals.types import EvalsStatus
from .sweeps import SweepStatus

if TYPE_CHECKING:  # read by attribute only: `isaacd status` loads nothing of the daemon's jobs/
    from ..jobs.queue_entry import QueueEntry

JSON = dict[str, Any]
_T = TypeVar("_T")


def _mapping(v: Any) -> Mapping[str, Any] | None:
    return v if isinstance(v, Mapping) else None


def _nested(conv: Callable[[Mapping[str, Any]], _T]) -> Callable[[Any], _T | None]:
    """A converter for an optional nested part: None unless the JSON holds an object there."""
    return lambda v: conv(v) if isinstance(v, Mapping) else None


_AS_IS: Mapping[str, Callable[[Any], Any]] = {}


def _kwargs(cls: type, raw: Mapping[str, Any], convert: Mapping[str, Callable[[Any], Any]] = _AS_IS) -> JSON:
    """The declared fields present in `raw`, each through its converter (if any); the rest keep their defaults."""
    return {f.name: convert.get(f.name, _same)(raw[f.name]) for f in fields(cls) if f.name in raw}


def _same(v: Any) -> Any:
    return v


def _tuple(v: Any) -> tuple[Any, ...]:
    return tuple(v) if isinstance(v, (list, tuple)) else ()


def _dict(v: Any) -> dict[str, Any]:
    return dict(v) if isinstance(v, Mapping) else {}


@dataclass(frozen=True, slots=True)
class CheckpointStatus:
    """A checkpoint as the status shows it: the newest complete one, or the one an attempt resumed from."""

    iteration: int
    path: str
    time: float | None = None  # the file's mtime; absent from a resume point rebuilt from the event journal

    def to_json(self) -> JSON:
        out: JSON = {"iteration": self.iteration, "path": self.path}
        if self.time is not None:
            out["time"] = self.time
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> CheckpointStatus:
        return cls(iteration=raw.get("iteration"), path=raw.get("path"), time=raw.get("time"))  # type: ignore[arg-type]


SPARE_LIVE = ("ready", "starting")


@dataclass(frozen=True, slots=True)
class SpareStatus:
    """The warm spare (attempt/spare.py): "ready" or "starting" with its process and costs, or "none"/"off" with why."""

    state: str
    reason: str | None = None  # "off": why no spare is kept
    pid: int | None = None
    rss_bytes: int | None = None
    preload_seconds: float | None = None
    cuda_memory_bytes: int | None = None
    mode: str | None = None  # "booted" (a second environment, parked at the runner's learn) or "imports"
    mode_reason: str | None = None  # why an imports-only spare is not booted

    @property
    def live(self) -> bool:
        return self.state in SPARE_LIVE

    def to_json(self) -> JSON:
        if self.live:
            return {"state": self.state, "pid": self.pid, "mode": self.mode, "mode_reason": self.mode_reason,
                    "rss_bytes": self.rss_bytes, "preload_seconds": self.preload_seconds,
                    "cuda_memory_bytes": self.cuda_memory_bytes}
        return {"state": self.state, "reason": self.reason}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SpareStatus:
        return cls(**_kwargs(cls, raw))


@dataclass(frozen=True, slots=True)
class BootStatus:
    """A starting attempt before its first iteration: how long it has been booting, how far it got (the shim's
    phase: imports, environment, runner, first iteration) and the trainer's last output line."""

    seconds: float | None = None  # since the attempt's launch
    phase: str | None = None  # None: the shim has said nothing (not started yet, or no shim)
    phase_seconds: float | None = None  # in this phase so far
    last_line: str | None = None  # None where the output is not a file (container runtimes: `isaacd logs`)

    def to_json(self) -> JSON:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> BootStatus:
        return cls(**_kwargs(cls, raw))


@dataclass(frozen=True, slots=True)
class LaunchWaitStatus:
    """The wait a starting job is on (attempt/deadlines.py): the spare's ack, its first step, the runtime's start."""

    what: str  # spare_ack, spare_first_step, runtime_start
    label: str  # "the spare's ack of the go"
    waited_seconds: float
    bound_seconds: float | None = None  # None: no deadline on this wait ([jobs.launch])

    def to_json(self) -> JSON:
        return {"what": self.what, "label": self.label, "waited_seconds": self.waited_seconds,
                "bound_seconds": self.bound_seconds}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> LaunchWaitStatus:
        return cls(what=raw.get("what", ""), label=raw.get("label", ""),
                   waited_seconds=raw.get("waited_seconds") or 0.0, bound_seconds=raw.get("bound_seconds"))


@dataclass(frozen=True, slots=True)
class CompileCacheStatus:
    """One of the job's compile caches (compile_caches.py): its host directory and size (None: not measured yet)."""

    name: str
    path: str
    size_bytes: int | None = None

    def to_json(self) -> JSON:
        return {"name": self.name, "path": self.path, "size_bytes": self.size_bytes}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> CompileCacheStatus:
        return cls(name=raw.get("name", ""), path=raw.get("path", ""), size_bytes=raw.get("size_bytes"))


def _caches(v: Any) -> tuple[CompileCacheStatus, ...]:
    return tuple(CompileCacheStatus.from_json(c) for c in _tuple(v) if isinstance(c, Mapping))


# the backup keeper's status (backup/status.py, where the import graph lets the keeper reach it): its JSON here
def _upload_from_json(raw: Mapping[str, Any]) -> BackupUpload:
    return BackupUpload(iteration=raw.get("iteration"), time=raw.get("time"), key=raw.get("key"),  # type: ignore[arg-type]
                        size=raw.get("size"))


def _backup_from_json(raw: Mapping[str, Any]) -> BackupStatus:
    return BackupStatus(**_kwargs(BackupStatus, raw, {"last_upload": _nested(_upload_from_json),
                                                      "lease": _nested(lambda r: BackupLease(**_kwargs(BackupLease, r)))}))


class WatchdogState(enum.StrEnum):
    """Where one watchdog stands for one job (set in watchdogs/base.py `Watchdog.step`): the `state` of
    `isaacd status --json` and the `state` label of isaacd_watchdog_state. A str, so both stay the bare word."""

    OK = "ok"  # its condition does not hold (or the trainer is not running)
    PENDING = "pending"  # the condition holds, not yet for its hold time
    TRIPPED = "tripped"  # it acted at its last step
    COOLDOWN = "cooldown"  # it acted, and waits its cooldown before it may act again
    WARMUP = "warmup"  # the attempt is too young for the condition to mean anything
    DISABLED = "disabled"  # enabled = false in its config
    IDLE = "idle"  # no trainer to watch: the job is queued, pending, backing off, stopping or at rest


@dataclass(frozen=True, slots=True)
class WatchdogStatus:
    """One watchdog's state for one job (watchdogs/base.py `Watchdog.status`)."""

    state: WatchdogState | str | None = None  # a plain str when read back from JSON (an equal value)
    since: float | None = None
    detail: str | None = None
    action: str | None = None  # configured; the xid watchdog's reads "application/reset" when they differ
    actions: tuple[str, ...] = ()  # every action it can take (its trip counters start at 0)
    actions_by_class: dict[str, str] | None = None  # xid only

    def to_json(self) -> JSON:
        out: JSON = {"state": self.state, "since": self.since, "detail": self.detail, "action": self.action,
                     "actions": list(self.actions)}
        if self.actions_by_class is not None:
            out["actions_by_class"] = dict(self.actions_by_class)
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> WatchdogStatus:
        return cls(**_kwargs(cls, raw, {"actions": _tuple}))


@dataclass(frozen=True, slots=True)
class WatchdogTripCount:
    """How often one watchdog took one action on a job (counted by the job's state machine)."""

    watchdog: str
    action: str
    count: int

    def to_json(self) -> JSON:
        return {"watchdog": self.watchdog, "action": self.action, "count": self.count}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> WatchdogTripCount:
        return cls(watchdog=raw.get("watchdog", ""), action=raw.get("action", ""),
                   count=raw.get("count"))  # type: ignore[arg-type]


def _watchdogs(v: Any) -> dict[str, WatchdogStatus]:
    return {str(k): WatchdogStatus.from_json(w) for k, w in v.items() if isinstance(w, Mapping)} \
        if isinstance(v, Mapping) else {}


def _trips(v: Any) -> tuple[WatchdogTripCount, ...]:
    return tuple(WatchdogTripCount.from_json(t) for t in _tuple(v) if isinstance(t, Mapping))


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """A job the host's queue places (issue 31): what it asked for, its order, and where it stands; the status' view
    of its queue entry (jobs/queue_entry.py, `of`). Its place and why it waits are the queue's part
    (scheduling/hook.py), added at publish."""

    request: str = ""  # "12 GiB on 1 GPU", "2 GPUs (whole)"
    gpus_asked: int = 1
    memory_bytes: int | None = None  # on each GPU; None: whole GPUs
    priority: int = 0
    preemptible: bool = True
    submitted_at: float | None = None  # wall clock: the order within a priority
    queued_since: float | None = None  # wall clock: when it last entered the queue (a preempted job: its requeue)
    placement: tuple[int | str, ...] = ()  # its places (GPU indices, MIG instances "p:j")
    placed_at: float | None = None  # wall clock
    backfill: bool = False  # started ahead of a blocked job: gives its GPUs back the moment that job could run
    preemptions: int = 0
    position: int | None = None  # in the queue, 1 = next; None: not waiting
    reason: str | None = None  # why it waits
    # run-time estimates (issue 42, scheduling/estimates.py), added by the queue's hook at publish: when a placed
    # job ends (wall clock), how long a waiting one runs once started (seconds), when the blocked job's reservation
    # starts it (wall clock), its last completed run's estimate error (took / said); None: not known
    ends_at: float | None = None
    run_seconds: float | None = None
    starts_at: float | None = None
    estimate_error: float | None = None

    @classmethod
    def of(cls, entry: QueueEntry, wall_minus_mono: float) -> "QueueStatus":
        """The status' view of a job's queue entry: its request in words and its times on the wall clock."""
        return cls(request=entry.request.describe(), gpus_asked=entry.request.gpus,
                   memory_bytes=entry.request.memory_bytes, priority=entry.priority, preemptible=entry.preemptible,
                   submitted_at=entry.submitted_at, queued_since=entry.queued_at, placement=entry.placement,
                   placed_at=None if entry.placed_at is None else entry.placed_at + wall_minus_mono,
                   backfill=entry.backfill, preemptions=entry.preemptions)

    def to_json(self) -> JSON:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "QueueStatus":
        return cls(**_kwargs(cls, raw, {"placement": _tuple}))


@dataclass(frozen=True, slots=True)
class JobStatus:
    """One job as `isaacd status` and /metrics show it, at one publish (a fresh value each tick).

    Times are wall-clock (time.time()) seconds; None is "not known" (never a fake 0)."""

    name: str
    state: str = "unknown"  # a JobState value: pending, starting, running, backing-off, stopping, stopped, ...
    state_since: float | None = None
    state_reason: str | None = None  # why it is in this state (and, while starting, what it waits for)
    runtime: str | None = None  # process, podman, systemd, ray
    workflow: str | None = None
    contract: str | None = None  # the workflow's checkpoint/logging contract, once resolved
    task: str | None = None
    device: str | None = None
    gpus: list[str] | str = field(default_factory=list)  # its claim as refs, or "all"
    pid: int | None = None
    pids: tuple[int, ...] = ()  # every process of the trainer (GPU attribution)
    cgroup: str | None = None
    container_id: str | None = None
    unit: str | None = None
    node: str | None = None  # where the trainer runs, for runtimes that place it (ray)
    waiting: str | None = None  # why it has not started yet: a placing runtime has no room, a fetch, ...
    iteration: int | None = None
    max_iterations: int | None = None
    mean_reward: float | None = None
    fps: float | None = None
    resume_from: CheckpointStatus | None = None  # the checkpoint the current attempt started from
    redo_until: int | None = None  # the furthest iteration an earlier attempt reached: redone after a resume
    scalars: dict[str, float] = field(default_factory=dict)  # the newest TensorBoard scalars, by tag
    last_progress_time: float | None = None
    checkpoint: CheckpointStatus | None = None  # the newest complete checkpoint
    restarts: int | None = None
    num_envs: int | None = None  # in use: fewer than configured after a CUDA out-of-memory step-down
    num_envs_configured: int | None = None
    cuda_ooms: dict[str, int] | None = None  # by phase: startup, training (None: an older supervisor's row)
    last_restart_reason: str | None = None
    restarts_by_reason: dict[str, int] = field(default_factory=dict)
    rollbacks: int | None = None
    run_dir: str | None = None
    attempt: int = 0
    started_at: float | None = None  # the current attempt's start, while it is active
    backoff_until: float | None = None
    stopping_then: str | None = None  # what a stop leads to: stopped, restart, ...
    parked_by: str | None = None
    persist_error: str | None = None  # the last failed save of the job's state, until one succeeds
    spare: SpareStatus | None = None
    log_path: str | None = None
    watchdogs: dict[str, WatchdogStatus] = field(default_factory=dict)  # by watchdog name
    watchdog_trips: tuple[WatchdogTripCount, ...] = ()
    backup: BackupStatus | None = None
    compile_caches: tuple[CompileCacheStatus, ...] = ()  # where its compile caches are, and how big
    launch_wait: LaunchWaitStatus | None = None  # starting: the wait it is on, how long so far, its deadline
    boot: BootStatus | None = None  # starting, before its first iteration: how long, how far, its last output
    queue: QueueStatus | None = None  # a job the host's queue places: its request, order, GPUs, place, why it waits
    owner: str | None = None  # whose job it is (issue 32): its config's `owner`; None: the supervisor's user's
    evals: EvalsStatus | None = None  # its evaluations (issue 41: attempt/evals.py); None: no [jobs.eval]

    def to_json(self) -> JSON:
        return {f.name: _to_json(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> JobStatus:
        """Raises KeyError for a row without a name; everything else is lenient (see the module docstring)."""
        if "name" not in raw:
            raise KeyError("name")
        return cls(**_kwargs(cls, raw, _JOB_PARTS))


_JOB_PARTS: Mapping[str, Callable[[Any], Any]] = {
    "pids": _tuple, "scalars": _dict, "cuda_ooms": _nested(dict), "restarts_by_reason": _dict,
    "resume_from": _nested(CheckpointStatus.from_json), "checkpoint": _nested(CheckpointStatus.from_json),
    "spare": _nested(SpareStatus.from_json), "backup": _nested(_backup_from_json),
    "launch_wait": _nested(LaunchWaitStatus.from_json),
    "boot": _nested(BootStatus.from_json),
    "queue": _nested(QueueStatus.from_json), "evals": _nested(EvalsStatus.from_json),
    "watchdogs": _watchdogs, "watchdog_trips": _trips, "compile_caches": _caches,
}


@dataclass(frozen=True, slots=True)
class SupervisorInfo:
    """The supervisor itself: who, since when, which config and how its reloads went."""

    version: str | None = None
    pid: int | None = None
    started_at: float | None = None
    uptime_seconds: float | None = None
    config_path: str | None = None  # "<embedded default>" when it runs without a file
    config_reloads_total: int | None = None
    config_errors_total: int | None = None
    last_config_error: str | None = None
    state_dir: str | None = None

    def to_json(self) -> JSON:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SupervisorInfo:
        return cls(**_kwargs(cls, raw))


@dataclass(frozen=True, slots=True)
class GpuProcessStatus:
    """A process holding memory on a GPU (NVML's host pid), and the isaacd job it belongs to (metrics/attribution.py)."""

    pid: int | None = None
    used_bytes: int | None = None  # None: the driver does not say
    job: str | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> GpuProcessStatus:
        return cls(**_kwargs(cls, raw))


@dataclass(frozen=True, slots=True)
class XidStatus:
    """How often one XID code was seen on a GPU, when last, and its class (gpu/types.py xid_class)."""

    count: int | None = None
    last_seen: float | None = None
    xid_class: str | None = None  # "class" in the JSON (a Python keyword)

    def to_json(self) -> JSON:
        return {"count": self.count, "last_seen": self.last_seen, "class": self.xid_class}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> XidStatus:
        return cls(count=raw.get("count"), last_seen=raw.get("last_seen"), xid_class=raw.get("class"))


def _xids(v: Any) -> dict[str, XidStatus]:
    return {str(k): XidStatus.from_json(x) for k, x in v.items() if isinstance(x, Mapping)} \
        if isinstance(v, Mapping) else {}


@dataclass(frozen=True, slots=True)
class GpuDeviceStatus:
    """One GPU (or MIG device) as `isaacd status` shows it (metrics/status.py gpu_status builds it from the GPU
    sampler's snapshot): identity, the latest fast fields (None: not reported), its processes, the jobs seen on it
    and assigned to it, its XIDs and its health."""

    index: str = ""  # the GPU key: "0", or "0:1" for a MIG device
    uuid: str | None = None
    model: str = ""
    pci_bus_id: str | None = None
    mig: bool | None = None
    temperature_celsius: float | None = None
    memory_temperature_celsius: float | None = None
    thermal_margin_celsius: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    sm_clock_hertz: float | None = None
    memory_clock_hertz: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    utilization_ratio: float | None = None
    memory_utilization_ratio: float | None = None
    clock_event_reasons: tuple[str, ...] = ()  # the active ones, by name
    processes: tuple[GpuProcessStatus, ...] = ()
    jobs: tuple[str, ...] = ()  # isaacd jobs seen using it (their processes)
    assigned: tuple[str, ...] = ()  # isaacd jobs whose gpus/device claim it (gpu/assign.py)
    placed: tuple[str, ...] = ()  # isaacd jobs the host's queue placed on it (their queue.placement), running or not
    asked_bytes: int | None = None  # GPU memory the queue gave those jobs (gpu_memory; a whole-GPU job: all of it)
    xids: dict[str, XidStatus] = field(default_factory=dict)  # by XID code, as text
    health: str | None = None  # "ok", "lost", "error: ...", "unhealthy: <reason>", "no data yet"

    def to_json(self) -> JSON:
        return {f.name: _to_json(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> GpuDeviceStatus:
        return cls(**_kwargs(cls, raw, {
            "clock_event_reasons": _tuple, "jobs": _tuple, "assigned": _tuple, "placed": _tuple, "xids": _xids,
            "processes": lambda v: tuple(GpuProcessStatus.from_json(p) for p in _tuple(v) if isinstance(p, Mapping))}))


@dataclass(frozen=True, slots=True)
class GpusStatus:
    """The host's GPUs when a sampler runs: the collector's state and a row per device."""

    up: bool = False
    reason: str | None = None  # why the collector is down
    source: str | None = None  # nvml, scripted, none
    driver_version: str | None = None
    xid_watch: bool = False
    devices: tuple[GpuDeviceStatus, ...] = ()

    def to_json(self) -> JSON:
        return {f.name: _to_json(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> GpusStatus:
        return cls(**_kwargs(cls, raw, {"devices": lambda v: tuple(GpuDeviceStatus.from_json(d) for d in _tuple(v)
                                                                    if isinstance(d, Mapping))}))


@dataclass(frozen=True, slots=True)
class Status:
    """Everything `isaacd status` shows: the jobs, the supervisor, and the GPUs when a sampler runs."""

    jobs: tuple[JobStatus, ...] = ()
    supervisor: SupervisorInfo = field(default_factory=SupervisorInfo)
    gpus: GpusStatus | None = None
    sweeps: tuple[SweepStatus, ...] = ()  # issue 39; "sweeps" in the JSON only when there is one

    def job(self, name: str) -> JobStatus | None:
        return next((j for j in self.jobs if j.name == name), None)

    def to_json_text(self) -> str:
        """`json.dumps(self.to_json(), default=str)`, each job's row serialised once per row made (issue 39: a
        status request at 1,000 jobs serialised every row; the rows reused at rest are the same objects)."""
        global _ROW_TEXTS
        seen, texts = _ROW_TEXTS, {}
        for j in self.jobs:
            hit = seen.get(id(j))
            texts[id(j)] = hit if hit is not None and hit[0] is j else (j, json.dumps(j.to_json(), default=str))
        _ROW_TEXTS = texts  # the rows of this status only: another thread's swap costs it a serialisation, no more
        out = ['{"jobs": [', ", ".join(texts[id(j)][1] for j in self.jobs), "]"]
        if self.gpus is not None:
            out += [', "gpus": ', json.dumps(self.gpus.to_json(), default=str)]
        if self.sweeps:
            out += [', "sweeps": ', json.dumps([s.to_json() for s in self.sweeps], default=str)]
        out += [', "supervisor": ', json.dumps(self.supervisor.to_json(), default=str), "}"]
        return "".join(out)

    def to_json(self) -> JSON:
        out: JSON = {"jobs": [j.to_json() for j in self.jobs]}
        if self.gpus is not None:
            out["gpus"] = self.gpus.to_json()
        if self.sweeps:
            out["sweeps"] = [s.to_json() for s in self.sweeps]
        out["supervisor"] = self.supervisor.to_json()
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Status:
        """Strict about the jobs (a row without a name raises); the metrics read rows one by one instead."""
        sup = _mapping(raw.get("supervisor"))
        gpus = raw.get("gpus")
        return cls(jobs=tuple(JobStatus.from_json(j) for j in _tuple(raw.get("jobs"))),
                   supervisor=SupervisorInfo.from_json(sup) if sup is not None else SupervisorInfo(),
                   gpus=GpusStatus.from_json(gpus) if isinstance(gpus, Mapping) else None,
                   sweeps=tuple(SweepStatus.from_json(s) for s in _tuple(raw.get("sweeps")) if isinstance(s, Mapping)))


# id(row) -> (the row, its JSON text), for the rows of the last status serialised (Status.to_json_text)
_ROW_TEXTS: dict[int, tuple[JobStatus, str]] = {}


def _to_json(v: Any) -> Any:
    """A field's JSON: nested values by their own to_json, tuples as lists, dicts copied."""
    if hasattr(v, "to_json"):
        return v.to_json()
    if is_dataclass(v) and not isinstance(v, type):  # a part's status defined outside this module (backup/status.py)
        return {f.name: _to_json(getattr(v, f.name)) for f in fields(v)}
    if isinstance(v, tuple):
        return [_to_json(x) for x in v]
    if isinstance(v, dict):
        return {k: _to_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return list(v)
    return v
