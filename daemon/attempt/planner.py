"""Plans attempt N of a job: a value, never an act. `LaunchPlanner.plan` checks the GPUs, resolves the workflow,
chooses the checkpoint (rejecting those the trainer cannot load, fetching the bucket's newest when the disk has
none), numbers and seeds the attempt, and hands its context to the launch pipeline (daemon/launch/: the same steps
a spare runs), all on a worker thread (launch/worker.py: a hung disk delays only this job). It answers with a
`LaunchPlan` for the starter (starter.py), a `LaunchRefused` for the machine to decide on (jobs/machine.py settles
the job, not this), a `WaitingForCheckpoint` while the backup fetches one, a `WaitingForLauncher` while a
pip-installed Isaac Lab's launcher has not yet answered isaacd's version probe (workflows/installed.py, on a thread
of its own), or a `WaitingForPreparation` while its worker has not answered; each wait is bounded by [jobs.launch]
runtime_start_timeout, and no other job waits. It saves nothing and starts nothing; it only makes the directories
the launch needs (the job's workdir, its compile caches: refused, naming the directory, when it cannot)"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

from ..caches import compile_caches
from ..runtimes import trainer_command
from ..backup.keeper import Fetching, JobBackup
from ..clock import Clock
from ..config.schema import JobConfig
from ..jobs.messages import Awaited, LaunchRefused, Settle
from ..jobs.model import LaunchIntent
from ..observations.checkpoints import Checkpoint
from ..launch.context import LaunchContext, Role
from ..launch.contributions import Refusal
from ..launch.pipeline import prepare
from ..launch.worker import INLINE_WAIT, Preparation
from ..os_seam.oscalls import HOST_OS, OsCalls
from ..runtimes.base import LaunchSpec
from ..access.owner import OwnerProblem
from ..history.store import Attempt, JobHistory, job_log_path
from ..workflows import ProbePending, WorkflowError, resolve
from ..workflows.launcher import Program
from .deadlines import preparation_overdue_reason, preparation_wait, probe_overdue_reason, probe_wait
from .from_job import copy_from_job
from .setting import JobSetting, newest_checkpoint, timeline_attempts, validator

GpuCheck = Callable[[JobConfig], "str | None"]


@dataclass(frozen=True)
class LaunchPlan:
    """Attempt N, spelled out: what to save first (the attempt, with its token) and what to start."""

    attempt: Attempt  # not yet in the history: the starter appends and saves it before the spawn
    spec: LaunchSpec
    program: Program
    args: list[str]  # the trainer's own arguments (a spare is handed these)
    seed: int | None
    num_envs: int
    shim_events: Path | None  # the attempt's side channel; None: the program runs without the shim
    run_dirs_before: set[str]  # the experiment dir's entries before the launch (to find the new run dir)
    spare_token: str | None  # the ready spare takes the attempt over under its own token


@dataclass(frozen=True)
class WaitingForCheckpoint:
    """The backup is fetching the bucket's newest checkpoint; the launch is asked again when it is here."""

    reason: str
    on: ClassVar[Awaited] = Awaited.CHECKPOINT


@dataclass(frozen=True)
class WaitingForLauncher:
    """The job's launcher has not yet answered isaacd's Isaac Lab version probe (on its thread); the launch is asked
    again each tick until it has."""

    reason: str
    on: ClassVar[Awaited] = Awaited.LAUNCHER


@dataclass(frozen=True)
class WaitingForPreparation:
    """The launch's preparation (daemon/launch/) runs on its worker thread past one tick (a slow disk): the launch is
    asked again each tick until it has answered."""

    reason: str
    on: ClassVar[Awaited] = Awaited.PREPARATION


Waiting = WaitingForCheckpoint | WaitingForLauncher | WaitingForPreparation
Planned = LaunchPlan | LaunchRefused | Waiting


class LaunchPlanner:
    def __init__(self, setting: JobSetting, runtime_name: str, state_dir: Path, clock: Clock,
                 event: Callable[..., None], spare_token: Callable[[Program], str | None],
                 backup_keeper: Callable[[], JobBackup | None], gpu_check: GpuCheck | None = None,
                 oscalls: OsCalls = HOST_OS):
        self.setting, self.runtime_name, self.state_dir, self.clock = setting, runtime_name, state_dir, clock
        self.event = event  # the job's journal
        self.spare_token = spare_token  # the ready spare's token, when the job's spare may take this program
        self.backup_keeper = backup_keeper
        self.gpu_check = gpu_check
        self.oscalls = oscalls
        # this launch's waits so far (`waited` False starts a new launch): since when it waits for its launcher's
        # probe and for its preparation (monotonic), and whether it has said its rejected checkpoints
        self._probe_since: float | None = None
        self._said_rejected = False
        self._preparing: Preparation[Planned] | None = None
        self._preparing_since = 0.0

    def plan(self, intent: LaunchIntent, history: JobHistory, num_envs: int, waited: bool = False) -> Planned:
        """Attempt N's plan, prepared on a worker thread (launch/worker.py): in this tick when it takes a moment,
        else a wait asked again each tick. `waited`: the same launch asked again after a wait."""
        p = self._preparing
        if not waited:
            self._probe_since, self._said_rejected = None, False
            if p is not None:
                p.stale = True  # an earlier launch's, given up (a stop meanwhile): its answer is dropped
        if p is not None and p.stale:
            if not p.done:  # the same disk: this launch waits for that one to come back first
                return self._wait_for_preparation("an earlier launch's preparation is still running")
            self._preparing = p = None
        started_now = p is None
        if p is None:
            # read on the tick, handed to the worker: the runner's backup keeper is made and replaced on the tick
            keeper = self.backup_keeper() if self.setting.cfg.backup is not None else None
            self._preparing_since = self.clock.monotonic()
            p = self._preparing = Preparation(lambda say: self._prepare(intent, history, num_envs, keeper, say),
                                              name=f"isaacd-launch-{self.setting.cfg.name}")
        got = p.answer(INLINE_WAIT if started_now else 0.0)
        if got is None:
            return self._wait_for_preparation("its preparation runs (the resume point's check, the job's directories)")
        self._preparing = None
        for name, fields in p.said:  # written by the tick: the journal is the tick's
            self.event(name, **fields)
        return got

    def _wait_for_preparation(self, what: str) -> WaitingForPreparation | LaunchRefused:
        now = self.clock.monotonic()
        wait = preparation_wait(self.setting.cfg.launch, self._preparing_since)
        if not wait.overdue(now):
            return WaitingForPreparation(f"{what}, {wait.waited(now):.0f} s")
        if self._preparing is not None:
            self._preparing.stale = True  # it may still come back; the next launch waits for it first
        self.event("launch_timeout", wait=wait.what, waited_seconds=round(wait.waited(now), 3), bound_seconds=wait.bound)
        self._preparing_since = now  # the next launch's wait counts from here
        return LaunchRefused(preparation_overdue_reason(wait, now))

    def _prepare(self, intent: LaunchIntent, history: JobHistory, num_envs: int, keeper: JobBackup | None,
                 say: Callable[..., None]) -> Planned:
        """On the worker: everything the launch needs decided and made ready. Writes no state the tick reads but
        the setting's resolved workflow (one assignment); its events go through `say`, written by the tick."""
        cfg = self.setting.cfg
        problem = self.gpu_check(cfg) if self.gpu_check else None
        if problem is not None:  # a GPU this host does not have: retrying cannot help
            return LaunchRefused(f"cannot start: {problem}", settle=Settle.FAILED)
        try:  # never waits for the launcher's probe: it runs on a thread of its own
            self.setting.resolved = resolved = resolve(cfg, wait_probe=False)
        except ProbePending as pending:
            return self._wait_for_launcher(pending, say)
        except WorkflowError as exc:  # a missing train script or an unknown Isaac Lab generation
            self._probe_since = None
            return LaunchRefused(f"cannot start: {exc.key}: {exc.message}", settle=Settle.FAILED)
        self._probe_since = None
        wf = resolved.workflow
        try:  # whom the trainer runs as (issue 32): its owner, never root
            owner = self.setting.owner()
        except OwnerProblem as exc:
            return LaunchRefused(f"cannot start: owner: {exc}", settle=Settle.FAILED)
        rejected: list[tuple[Checkpoint, str]] = []
        # a reset's launch resumes from nothing: its runner has set the old run dirs aside (attempt/reset.py)
        resume = None if intent.fresh else newest_checkpoint(self.setting, history, deep=True,
                                                              before_iteration=intent.before_iteration,
                                                              rejected=rejected)
        if intent.from_job is not None:  # PBT's exploit: a copy of another member's newest complete checkpoint
            copied = copy_from_job(intent.from_job, wf.experiment_dir(cfg), owner, self.clock.wall(), wf.layout,
                                   validator(self.setting, history))
            if isinstance(copied, str):  # back at rest: a retry would resume its own checkpoint, not the exploit's
                return LaunchRefused(f"not resumed from {intent.from_job.source}: {copied}", settle=Settle.STOPPED)
            say("checkpoint_copied", source=intent.from_job.source, path=str(copied.path), iteration=copied.iteration)
            resume = copied
        for ckpt, why in rejected if not self._said_rejected else ():  # said once, not at every retry
            say("checkpoint_rejected", path=str(ckpt.path), iteration=ckpt.iteration, problem=why)
        self._said_rejected = True
        if resume is None and any(why.startswith("incompatible") for _, why in rejected):
            # starting from scratch would silently throw the run away: stop and say why
            newest = rejected[0]
            return LaunchRefused(f"no checkpoint this trainer can load: {newest[0].path.name} is {newest[1]}. "
                                 "Run the job with the trainer that wrote it (image / isaaclab_dir), or move "
                                 "its run dirs away and `isaacd start` to train from scratch", settle=Settle.FAILED)
        if resume is None and cfg.backup is not None and not intent.fresh:  # none on disk: the bucket's newest
            bound = None if intent.before_iteration is None else intent.before_iteration - 1
            fetched = keeper.restore(bound, wf.experiment_dir(cfg)) if keeper is not None else None
            if isinstance(fetched, Fetching):
                return WaitingForCheckpoint(fetched.reason)  # the tick asks again; the supervisor goes on
            resume = fetched
        if intent.before_iteration is not None and resume is None:
            say("rollback_without_checkpoint", before_iteration=intent.before_iteration,
                detail="no complete checkpoint before the trouble; starting from scratch")
        if resume is not None and wf.is_complete(cfg, resume, None):
            return LaunchRefused(f"max_iterations reached ({resume.path.name} holds {wf.iterations_done(resume)} "
                                 f"of {cfg.max_iterations})", settle=Settle.COMPLETED)
        seed = random.randrange(2**31) if intent.new_seed else None
        number = history.attempts[-1].number + 1 if history.attempts else 1
        program = resolved.program(in_container=cfg.in_container)
        shim_events = trainer_command.shim_events_path(self.state_dir, cfg, number) if program.shim else None
        spare_token = self.spare_token(program)  # a read of the keeper's ready spare; the starter checks it again
        token = spare_token or uuid.uuid4().hex
        attempt = Attempt(number=number, started_at=self.clock.wall(), reason=intent.reason,
                          resume_from=resume.as_json() if resume else None, runtime=self.runtime_name,
                          shim_events=str(shim_events) if shim_events else None, token=token, fresh=intent.fresh)
        # one W&B run per training: a reset starts a new one
        timeline = [] if intent.fresh else timeline_attempts(history)
        first_started_at = timeline[0].started_at if timeline else attempt.started_at
        exp = wf.experiment_dir(cfg)
        run_dirs_before = {p.name for p in exp.iterdir()} if exp.is_dir() else set()
        # a step-down after a CUDA out-of-memory at start-up (jobs/machine.py) reaches the trainer as --num_envs
        job = cfg if num_envs == cfg.num_envs else cfg.model_copy(update={"num_envs": num_envs})
        args = trainer_command.trainer_args(job, resume, seed, resolved)
        ctx = LaunchContext(
            role=Role.ATTEMPT, cfg=cfg, state_dir=self.state_dir, owner=owner, token=token,
            events=shim_events, caches=tuple(compile_caches.for_job(cfg, self.state_dir)),
            experiment_dir=exp, workdir=trainer_command.workdir_path(cfg, self.state_dir),
            cwd=trainer_command.workdir(cfg, self.state_dir), log_path=job_log_path(self.state_dir, cfg.name),
            argv=tuple(program.argv(args)), trainer_args=tuple(args), attempt=number, resume=resume,
            wandb_run=trainer_command.wandb_run_id(cfg, first_started_at),
            # a node without the shared log_root fetches and uploads itself (backup/remote.py), as this token
            node_env=keeper.node_env(wf, resume, token) if keeper is not None and cfg.runtime == "ray" else {})
        spec = prepare(ctx, self.oscalls)
        if isinstance(spec, Refusal):
            return LaunchRefused(spec.reason, settle=spec.settle, crash_loop=spec.crash_loop)
        return LaunchPlan(attempt, spec, program, args, seed, num_envs, shim_events, run_dirs_before, spare_token)

    def _wait_for_launcher(self, pending: ProbePending, say: Callable[..., None]) -> WaitingForLauncher | LaunchRefused:
        """The launcher's probe runs on its thread: this launch waits, bounded by [jobs.launch] runtime_start_timeout
        from its first wait. Past it the launch is refused as a crash (backoff, the crash-loop window), as a runtime
        that does not start the trainer ends; the probe's own timeout (60 s) fails the job with its error."""
        now = self.clock.monotonic()
        if self._probe_since is None:
            self._probe_since = now
        wait = probe_wait(self.setting.cfg.launch, self._probe_since)
        if not wait.overdue(now):
            return WaitingForLauncher(f"{' '.join(pending.launcher)!r} asked its Isaac Lab version (isaacd's launcher "
                                      f"probe, {wait.waited(now):.0f} s)")
        self._probe_since = None
        say("launch_timeout", wait=wait.what, launcher=pending.launcher,
            waited_seconds=round(wait.waited(now), 3), bound_seconds=wait.bound)
        return LaunchRefused(probe_overdue_reason(wait, pending.launcher, now))


def started_event(plan: LaunchPlan, pid: int | None, cfg: JobConfig, contract: str | None, warm: bool) -> dict[str, Any]:
    """The `started` event's fields."""
    a = plan.attempt
    return {"attempt": a.number, "reason": a.reason, "pid": pid, "resume_from": a.resume_from,
            "seed": plan.seed if plan.seed is not None else cfg.seed, "contract": contract, "argv": plan.spec.argv,
            "warm_spare": warm, "num_envs": plan.num_envs}
