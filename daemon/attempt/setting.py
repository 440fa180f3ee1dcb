"""The job's setting, shared by the runner's parts: its config (a reload replaces it), what its workflow resolved
to, and the checkpoints on its timeline (the resume choice and the deep check of what its trainer can load)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..access.owner import job_run_as
from ..config.placed import placed_config
from ..config.schema import JobConfig
from ..gpu.snapshot import GpuSnapshot
from ..observations.checkpoints import SNAPSHOT_PREFIX, Checkpoint, Lineage, Validator, choose_resume
from ..history.store import Attempt, JobHistory
from ..os_seam.oscalls import RunAs
from ..workflows import ProbePending, Resolved, WorkflowError, resolve
from ..workflows.validate import VALIDATOR, expected_rsl_rl_format


@dataclass
class JobSetting:
    """One object the parts hold, so a reload (`JobRunner.reconfigure`) reaches all of them at once.

    `cfg` is the config in force: the job as written, with the GPUs the host's queue gave it named (issue 31,
    config/placed.py); `written` is the job as written, what decides whether the queue places it."""

    cfg: JobConfig
    resolved: Resolved | None = None
    configured: JobConfig | None = None  # the job as written, once it differs from cfg (a placement)
    placement: tuple[int | str, ...] = ()
    # the GPU sampler's snapshot, wired at construction: a MIG place's UUID (CUDA_VISIBLE_DEVICES, issue 42)
    inventory: Callable[[], GpuSnapshot] | None = field(default=None, repr=False, compare=False)
    mig_uuids: dict[str, str] = field(default_factory=dict)  # MIG place -> its UUID, as far as the inventory knew
    probe_pending: bool = False  # set up while its launcher's version probe ran: resolved once it has answered
    # the owner resolved for the cfg object in force (owner()): (that cfg, its owner); a reload or a placement sets a
    # new cfg, which is resolved again
    _owner: tuple[JobConfig, RunAs | None] | None = field(default=None, repr=False, compare=False)

    @property
    def written(self) -> JobConfig:
        return self.configured if self.configured is not None else self.cfg

    def owner(self) -> RunAs | None:
        """Whom the job's trainer runs as (issue 32): its owner, or None for the supervisor's own user. Resolved once
        per config in force (issue 38: the one place the owner is resolved, read by the launch, the backup, a reset
        and a job's end). Raises access.owner.OwnerProblem (an unknown user, a supervisor that is not root); a
        problem is not kept, so a user created meanwhile is found at the next ask."""
        kept, cfg = self._owner, self.cfg
        if kept is not None and kept[0] is cfg:
            return kept[1]
        owner = job_run_as(cfg)
        self._owner = (cfg, owner)
        return owner

    def reconfigure(self, cfg: JobConfig) -> None:
        """A reload's new config, with the job's placement kept (a running trainer keeps its GPUs)."""
        self.configured = cfg
        self.cfg = placed_config(cfg, self.placement, self.mig_uuids)

    def place(self, gpus: tuple[int | str, ...]) -> None:
        """The GPUs the job holds now (its model's placement; () while it waits or rests). A MIG instance's UUID is
        looked up in the inventory until known (asked each tick: a supervisor's first passes may not have it yet)."""
        uuids = self.mig_uuids
        if any(isinstance(g, str) and g not in uuids for g in gpus):
            uuids = self._mig_uuids(gpus)
        if gpus != self.placement or uuids != self.mig_uuids:
            written = self.written
            self.configured, self.placement, self.mig_uuids = written, gpus, uuids
            self.cfg = placed_config(written, gpus, uuids)

    def _mig_uuids(self, gpus: tuple[int | str, ...]) -> dict[str, str]:
        snap = self.inventory() if self.inventory is not None else None
        if snap is None or not snap.up:
            return dict(self.mig_uuids)
        return {g: info.uuid for g in gpus if isinstance(g, str) and (info := snap.gpus.get(g)) is not None
                and info.is_mig}

    @classmethod
    def of(cls, cfg: JobConfig, inventory: Callable[[], GpuSnapshot] | None = None) -> "JobSetting":
        """Never waits for a launcher's version probe (a reload makes runners under the supervisor's lock): while it
        runs on its thread the setting is made unresolved, and `resolve_answered` fills it in on a later tick.
        `inventory`: the GPU sampler's snapshot (a MIG place's UUID)."""
        try:
            return cls(cfg, resolve(cfg, wait_probe=False), inventory=inventory)
        except ProbePending:
            return cls(cfg, probe_pending=True, inventory=inventory)
        except WorkflowError:
            return cls(cfg, inventory=inventory)  # said when the job launches (and by check-config / doctor before)

    def resolve_answered(self) -> None:
        """A setting made while its launcher's probe ran: resolved now if the answer is in (asked each tick, never
        waiting; a launch's planner resolves it itself). A trainer adopted meanwhile is watched as before."""
        if not self.probe_pending:
            return
        if self.resolved is None:
            try:
                self.resolved = resolve(self.cfg, wait_probe=False)
            except ProbePending:
                return
            except WorkflowError:
                pass  # said when the job launches
        self.probe_pending = False


def timeline_attempts(history: JobHistory) -> list[Attempt]:
    """The attempts of the job's current training: from its newest fresh start (`isaacd reset`) on, else all."""
    fresh = max((i for i, a in enumerate(history.attempts) if a.fresh), default=0)
    return history.attempts[fresh:]


def lineage(history: JobHistory) -> list[Lineage]:
    """The job's run dirs in launch order, each with the iteration it resumed from (since its last reset). A
    timeline that starts from a copy of another job's checkpoint (PBT's exploit, issue 40: a fresh attempt that
    resumed) starts at the copy's folder, so an attempt that ends before its own first save resumes the copy again,
    never nothing."""
    attempts = timeline_attempts(history)
    steps = [Lineage(Path(a.run_dir) if a.run_dir else None,
                     a.resume_from["iteration"] if a.resume_from else None) for a in attempts]
    first = attempts[0] if attempts else None
    if first is not None and first.fresh and first.resume_from and first.resume_from.get("path"):
        steps.insert(0, Lineage(Path(first.resume_from["path"]).parent, None))
    return steps


def validator(setting: JobSetting, history: JobHistory) -> Validator | None:
    """Whether this job's trainer can load a checkpoint (the deep check of the resume choice and the backup)."""
    resolved = setting.resolved
    if resolved is None:
        return None

    def problem(c: Checkpoint) -> str | None:
        expected = expected_rsl_rl_format(history.trainer_rsl_rl_version, resolved.generation.major,
                                          setting.cfg.workflow == "builtin")
        return VALIDATOR.problem(c, expected, resolved.workflow.library)
    return problem


def newest_checkpoint(setting: JobSetting, history: JobHistory, deep: bool = False,
                      before_iteration: int | None = None,
                      rejected: list[tuple[Checkpoint, str]] | None = None) -> Checkpoint | None:
    """Newest complete checkpoint on the job's timeline; `deep` (the resume's choice) also asks whether its trainer
    can load it, and whether it stays: see `lost_trainer_run_dirs`."""
    if setting.resolved is None:
        return None
    check = validator(setting, history) if deep else None
    lost = lost_trainer_run_dirs(history) if deep else set()
    if lost:
        check = _keeping_off_snapshots_in(lost, check)
    return choose_resume(lineage(history), before_iteration, rejected, setting.resolved.workflow.layout, check)


def lost_trainer_run_dirs(history: JobHistory) -> set[Path]:
    """The run dirs of trainers that may still be running unseen: those of attempts that ended with their node lost
    (ray: its raylet gone, a partition). Nothing ended those trainers: until each dies of its own it trains on and its
    launcher shim rotates its snapshots (isaacd_snapshot_<N>.pt, shim_snapshots.py keeps the newest few). A resume
    that named one of them found it deleted 3 s later ("No checkpoints in the directory", one restart wasted: CI of
    session 19). Their model_<N>.pt files are rsl_rl's own and never deleted."""
    return {Path(a.run_dir) for a in history.attempts if a.run_dir is not None and (a.exit or {}).get("node_lost")}


def _keeping_off_snapshots_in(run_dirs: set[Path], check: Validator | None) -> Validator:
    def problem(c: Checkpoint) -> str | None:
        if c.path.parent in run_dirs and c.path.name.startswith(SNAPSHOT_PREFIX):
            return ("a snapshot of the trainer on the lost node, which may still run and rotate it away: "
                    "resumed from a checkpoint it never deletes")
        return check(c) if check is not None else None
    return problem
