"""One job's hands and eyes: observes its trainer, feeds what it sees to the state machine, applies the effects.

The runner decides nothing. `observe` turns the runtime, the TensorBoard tail and the shim's side channel
into observations (values); `jobs.machine.decide` turns each observation or command into a new model and
effects; `_apply` carries the effects out in order, saving the model before any effect that acts (see
jobs/effects.py). Facts (attempts, run dirs, exits) go to the job's history; decisions live in the model,
saved in the same document. Nothing here blocks: the runtimes answer at once (runtimes/base.py).
"""

from __future__ import annotations

import os
import random
import signal
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from . import launch
from .backup.keeper import Fetching, JobBackup
from .backup.uploader import Run as BackupRun
from .clock import Clock, SystemClock
from .config import JobConfig
from .gpu.assign import status_gpus
from .gpumemory import OomNote
from .jobs import machine
from .jobs.effects import Effect, Event, Forget, Kill, Launch, Persist, Signal
from .jobs.messages import CudaOom, Exited, LaunchRefused, Message, Progressed, Start, Stop, Tick
from .jobs.policy import num_envs_in_use
from .jobs.model import JobModel, JobState, LaunchIntent, Origin
from .joblogs import ExitWithOutput, exit_with_log_tail
from .logs import log
from .rebuild import load_history
from .runtimes.base import ExitStatus, Handle, LaunchSpec, Runtime
from .observations.checkpoints import Checkpoint, Lineage, Validator, choose_resume, sweep_snapshot_temps, timeline
from .spare import SpareKeeper
from .observations.tensorboard import ScalarPoint, TensorBoardTail, finite_or_none
from .store import Attempt, JobHistory, StateStore
from .workflows import Resolved, WorkflowError, resolve
from .workflows.launcher import Program
from .observations.shim_events import ShimEvents
from .workflows.validate import VALIDATOR, expected_rsl_rl_format

CHECKPOINT_SCAN_INTERVAL = 2.0
PIDS_SCAN_INTERVAL = 2.0
CRASH_AT_ENV = "ISAACD_TEST_CRASH_AT"  # the crash test's seam: SIGKILL ourselves at one effect boundary
WARN_EVENTS = {"failed", "checkpoint_rejected", "config_rejected", "resume_mismatch", "start_failed",
               "tensorboard_damaged", "state_save_failed", "stop_timeout", "cuda_oom", "num_envs_stepped_down"}


def crash_point(label: str) -> None:
    """Die here, as a power cut would, when the crash test asks for this boundary (tests/test_crash_consistency.py).
    Only an environment variable set by that test reaches this; nothing else can."""
    if os.environ.get(CRASH_AT_ENV) == label:
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class JobSignals:
    """What the watchdogs read about a job this tick (a value: they never reach into the runner)."""

    name: str
    cfg: JobConfig
    alive: bool  # a trainer runs and is not being stopped
    attempt: int
    attempt_started_at: float | None  # monotonic
    first_step: int | None
    iteration: int | None
    last_progress_time: float | None  # monotonic
    new_points: tuple[ScalarPoint, ...] = ()
    pids: tuple[int, ...] = ()
    parked_by: str | None = None
    state: JobState = JobState.PENDING
    waiting: bool = False  # the runtime has not placed the trainer yet (ray: no room): not a hang


@dataclass
class _Live:
    """What the runner knows about the current attempt's trainer (memory only; rebuilt on adoption)."""

    handle: Handle | None = None
    tail: TensorBoardTail | None = None
    shim: ShimEvents | None = None
    started_mono: float | None = None
    run_dirs_at_launch: set[str] = field(default_factory=set)
    new_points: list[ScalarPoint] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    pids_scanned_at: float = float("-inf")
    stop_seen_by_trainer: bool = False  # the shim reported stop_requested: never signal it twice


class JobRunner:
    def __init__(self, cfg: JobConfig, runtime: Runtime, store: StateStore, state_dir: Path,
                 clock: Clock | None = None):
        self.cfg = cfg
        self.runtime = runtime
        self.store = store
        self.state_dir = state_dir
        self.clock: Clock = clock or SystemClock()
        self.log = log.bind(job=cfg.name)
        self.history: JobHistory = load_history(store, cfg, state_dir)  # rebuilt from disk if damaged
        self.model: JobModel = self._model_from_history()
        self.state_since = self.clock.wall()
        self.live = _Live()
        self.cleanups: list[Handle] = []  # ended trainers whose runtime resources are still being released
        self.spares = SpareKeeper(cfg, runtime, state_dir, self.event)
        self.gpu_check: Callable[[JobConfig], str | None] | None = None  # set by the supervisor
        # the job's GPUs at a CUDA out-of-memory (name, attempt start) -> note; set by the supervisor
        self.gpu_memory: Callable[[str, float | None], OomNote] | None = None
        self.resolved: Resolved | None = None
        self.persist_error: str | None = None  # the last failed save, until a save succeeds
        self._dirty = False
        self._checkpoint: Checkpoint | None = None
        self._checkpoint_scanned_at = float("-inf")
        self.iteration: int | None = None
        self.scalars: dict[str, float] = {}
        self.last_progress_mono: float | None = None
        self.last_progress_wall: float | None = None
        self.backup: JobBackup | None = None  # [jobs.backup]: uploads and the bucket fetch (daemon/backup/)
        self.launch_waits: str | None = None  # a launch waiting for the bucket's checkpoint: why
        try:
            self.resolved = resolve(cfg)
        except WorkflowError:
            pass  # said when the job launches (and by check-config / doctor before that)

    @property
    def state(self) -> JobState:
        return self.model.state

    @property
    def handle(self) -> Handle | None:
        return self.live.handle

    # ---- the model on disk ---------------------------------------------------------------
    def _model_from_history(self) -> JobModel:
        """The saved model, rebased when the machine rebooted since; or one derived from an older document."""
        h, now = self.history, self.clock.monotonic()
        if h.machine is not None:
            try:
                m = JobModel.from_json(h.machine)
            except (KeyError, TypeError, ValueError) as exc:
                self.log.error("job_model_damaged", error=str(exc), detail="derived again from the history")
            else:
                if h.boot_id == self.clock.boot_id:
                    return m
                # monotonic values from another boot mean nothing: wait a backoff again in full, give a
                # stop its grace again, and keep past restarts inside the crash-loop window (the safe side)
                return m.with_(
                    backoff_until=now + (m.backoff_seconds or 0.0) if m.backoff_until is not None else None,
                    stop=None if m.stop is None else replace(m.stop, deadline=now + self.cfg.stop_timeout),
                    restart_times=tuple(now for _ in m.restart_times))
        # a history written before the state machine: keep its counters and its resting state
        wall = self.clock.wall()
        m = JobModel(restarts=h.restarts, restart_times=tuple(now - max(wall - t, 0.0) for t in h.restart_times),
                     restarts_by_reason=tuple(sorted(h.restarts_by_reason.items())),
                     last_restart_reason=h.last_restart_reason, rollbacks=h.rollbacks,
                     watchdog_trips=tuple(sorted(h.watchdog_trips.items())))
        cur = h.current
        if cur is not None and cur.exit is None and (cur.handle or cur.token):
            return m.with_(state=JobState.RUNNING, reason="adopting")
        if h.final_state in ("stopped", "completed", "failed"):
            return m.with_(state=JobState(h.final_state), reason=h.final_reason, final=True)
        return m

    def _persist(self) -> bool:
        """Save history + model. A failure (disk full, fds exhausted) is reported once per distinct error and
        retried every tick; the caller decides whether to act without it (a launch does not)."""
        m, h = self.model, self.history
        h.machine, h.boot_id = m.to_json(), self.clock.boot_id
        # mirrored for readers of the document (and an older isaacd): the model is the authority
        h.restarts, h.restarts_by_reason = m.restarts, dict(m.restarts_by_reason)
        h.last_restart_reason, h.rollbacks, h.watchdog_trips = m.last_restart_reason, m.rollbacks, dict(m.watchdog_trips)
        rest = m.state in (JobState.STOPPED, JobState.COMPLETED, JobState.FAILED) and m.final
        h.final_state, h.final_reason = (m.state.value, m.reason) if rest else (None, None)
        h.restart_times = []
        try:
            self.store.save(h)
        except OSError as exc:
            self._dirty = True
            problem = f"cannot save the job's state in {self.store.jobs_dir}: {exc.strerror or exc}"
            if problem != self.persist_error:
                self.persist_error = problem
                self.event("state_save_failed", error=problem, detail="retrying every tick")
            return False
        self._dirty = False
        if self.persist_error is not None:
            self.persist_error = None
            self.event("state_saved", detail="the job's state is on disk again")
        return True

    # ---- events --------------------------------------------------------------------------
    def event(self, event: str, **fields: Any) -> None:
        level = "warning" if event in WARN_EVENTS or (
            event == "exited" and not (fields.get("code") == 0 or fields.get("requested"))) else "info"
        getattr(self.log, level)(event, **fields)
        try:
            self.store.append_event(self.cfg.name, event, **fields)
        except OSError as exc:  # a full state disk must not stop the job's care; the log above has it
            self.log.error("journal_append_failed", journal_event=event, error=str(exc))

    # ---- messages in, effects out ----------------------------------------------------------
    def handle_message(self, msg: Message) -> str | None:
        ctx = machine.Context(self.cfg.name, self.clock.monotonic(), self.cfg.restart, self.cfg.stop_timeout,
                              self.cfg.num_envs, self.cfg.oom)
        decision = machine.decide(self.model, msg, ctx)
        old = self.model.state
        self.model = decision.model
        if self.model.state != old:
            self.state_since = self.clock.wall()
        follow_ups = self._apply(decision.effects)
        for obs in follow_ups:
            self.handle_message(obs)
        return decision.reply

    def _apply(self, effects: tuple[Effect, ...]) -> list[Message]:
        follow_ups: list[Message] = []
        for effect in effects:
            if isinstance(effect, Event):
                self.event(effect.name, **effect.fields)
            elif isinstance(effect, Persist):
                self._persist()
                crash_point(f"{self.model.state.value}.after_intent")
            elif isinstance(effect, Signal):
                if self.live.handle is not None and not self.live.stop_seen_by_trainer:
                    self.runtime.signal(self.live.handle, effect.signum)
                crash_point("signal.after_effect")
            elif isinstance(effect, Kill):
                if self.live.handle is not None:
                    self.runtime.kill(self.live.handle)
            elif isinstance(effect, Forget):
                self.live = _Live()
            elif isinstance(effect, Launch):
                refused = self._launch(effect.intent)
                if refused is not None:
                    follow_ups.append(refused)
        return follow_ups

    # ---- launching ---------------------------------------------------------------------
    def newest_checkpoint(self, deep: bool = False, before_iteration: int | None = None,
                          rejected: list[tuple[Checkpoint, str]] | None = None) -> Checkpoint | None:
        """Newest complete checkpoint on the job's timeline; `deep` also asks whether its trainer can load it."""
        if self.resolved is None:
            return None
        return choose_resume(self._lineage(), before_iteration, rejected, self.resolved.workflow.layout,
                             self._validator() if deep else None)

    def _lineage(self) -> list[Lineage]:
        return [Lineage(Path(a.run_dir) if a.run_dir else None,
                        a.resume_from["iteration"] if a.resume_from else None) for a in self.history.attempts]

    def _validator(self) -> Validator | None:
        """Whether this job's trainer can load a checkpoint (the deep check of the resume choice and the backup)."""
        if self.resolved is None:
            return None
        resolved = self.resolved

        def problem(c: Checkpoint) -> str | None:
            expected = expected_rsl_rl_format(self.history.trainer_rsl_rl_version, resolved.generation.major,
                                              self.cfg.workflow == "builtin")
            return VALIDATOR.problem(c, expected, resolved.workflow.library)
        return problem

    def _launch(self, intent: LaunchIntent) -> LaunchRefused | None:
        """Plan attempt N and start it: the token is saved before the spawn, the handle right after."""
        problem = self.gpu_check(self.cfg) if self.gpu_check else None
        if problem is not None:  # a GPU this host does not have: retrying cannot help
            return LaunchRefused(f"cannot start: {problem}", settle="failed")
        try:
            self.resolved = resolved = resolve(self.cfg)
        except WorkflowError as exc:  # a missing train script or an unknown Isaac Lab generation
            return LaunchRefused(f"cannot start: {exc.key}: {exc.message}", settle="failed")
        wf = resolved.workflow
        rejected: list[tuple[Checkpoint, str]] = []
        resume = self.newest_checkpoint(deep=True, before_iteration=intent.before_iteration, rejected=rejected)
        for ckpt, why in rejected if self.launch_waits is None else ():  # said once, not at every retry
            self.event("checkpoint_rejected", path=str(ckpt.path), iteration=ckpt.iteration, problem=why)
        if resume is None and any(why.startswith("incompatible") for _, why in rejected):
            # starting from scratch would silently throw the run away: stop and say why
            newest = rejected[0]
            return LaunchRefused(f"no checkpoint this trainer can load: {newest[0].path.name} is {newest[1]}. "
                                 "Run the job with the trainer that wrote it (image / isaaclab_dir), or move "
                                 "its run dirs away and `isaacd start` to train from scratch", settle="failed")
        if resume is None and self.cfg.backup is not None:  # no usable checkpoint on disk: the bucket's newest
            keeper = self._backup_keeper()
            bound = None if intent.before_iteration is None else intent.before_iteration - 1
            fetched = keeper.restore(bound, wf.experiment_dir(self.cfg)) if keeper is not None else None
            if isinstance(fetched, Fetching):
                self.launch_waits = fetched.reason  # the tick launches once it is here; the supervisor goes on
                return None
            resume = fetched
        self.launch_waits = None
        if intent.before_iteration is not None and resume is None:
            self.event("rollback_without_checkpoint", before_iteration=intent.before_iteration,
                       detail="no complete checkpoint before the trouble; starting from scratch")
        if resume is not None and wf.is_complete(self.cfg, resume, None):
            return LaunchRefused(f"max_iterations reached ({resume.path.name} holds {wf.iterations_done(resume)} "
                                 f"of {self.cfg.max_iterations})", settle="completed")
        seed = random.randrange(2**31) if intent.new_seed else None
        number = self.history.attempts[-1].number + 1 if self.history.attempts else 1
        shim_events = launch.shim_events_path(self.state_dir, self.cfg, number)
        program = resolved.program(in_container=self.cfg.in_container)
        spare_token = self.spares.ready_token() if self.spares.enabled(program) else None
        token = spare_token or uuid.uuid4().hex
        attempt = Attempt(number=number, started_at=self.clock.wall(), reason=intent.reason,
                          resume_from=resume.as_json() if resume else None, runtime=self.runtime.name,
                          shim_events=str(shim_events) if program.shim else None, token=token)
        first_started_at = self.history.attempts[0].started_at if self.history.attempts else attempt.started_at
        exp = wf.experiment_dir(self.cfg)
        run_dirs_before = {p.name for p in exp.iterdir()} if exp.is_dir() else set()
        num_envs = self.num_envs()
        # a step-down after a CUDA out-of-memory at start-up (jobs/machine.py) reaches the trainer as --num_envs
        job = self.cfg if num_envs == self.cfg.num_envs else self.cfg.model_copy(update={"num_envs": num_envs})
        args = launch.trainer_args(job, resume, seed, resolved)
        if program.shim:
            shim_events.parent.mkdir(parents=True, exist_ok=True)
            shim_events.unlink(missing_ok=True)  # a number reused after history loss must not replay old news
            if self.cfg.in_container:
                from .runtimes.quadlet import hand_to_container_user

                hand_to_container_user(self.cfg, [shim_events.parent])  # Isaac Lab 3 images run as uid 1000
        env = launch.trainer_env(self.cfg, shim_events if program.shim else None, token,
                                 wandb_run=launch.wandb_run_id(self.cfg, first_started_at))
        keeper = self._backup_keeper() if self.cfg.runtime == "ray" else None
        if keeper is not None:  # a node without the shared log_root fetches and uploads itself (backup/remote.py)
            env.update(keeper.node_env(wf, resume))
        spec = LaunchSpec(job=self.cfg, argv=program.argv(args), trainer_args=args, env=env,
                          cwd=launch.workdir(self.cfg, self.state_dir),
                          log_path=self.state_dir / "logs" / f"{self.cfg.name}.log", attempt=number, token=token)
        self.history.attempts.append(attempt)
        if spare_token and self.spares.spare is not None:
            attempt.handle = dict(self.spares.spare.handle.state)  # the spare becomes this attempt's trainer
        if not self._persist():
            # a trainer we could not find again after a crash would be a duplicate waiting to happen
            self._never_started(attempt, "not started: state not saved")
            return LaunchRefused(f"not starting: {self.persist_error}", crash_loop=False)
        crash_point("launch.after_intent")
        handle = self._hand_to_spare(program, args, spec) if spare_token else None
        warm = handle is not None
        if spare_token and handle is None:  # the spare went away: a cold start, under a token of its own
            attempt.token, attempt.handle = uuid.uuid4().hex, {}
            spec = replace(spec, token=attempt.token, env={**spec.env, launch.LAUNCH_TOKEN_ENV: attempt.token})
            if not self._persist():
                self._never_started(attempt, "not started: state not saved")
                return LaunchRefused(f"not starting: {self.persist_error}", crash_loop=False)
        if handle is None:
            try:
                handle = self.runtime.start(spec)
            except Exception as exc:  # noqa: BLE001 - any launch failure is a failed attempt, not a crash of ours
                self.event("start_failed", attempt=number, error=str(exc))
                self._record_exit(attempt, ExitStatus(code=None, detail=f"failed to start: {exc}"))
                return LaunchRefused(f"failed to start: {exc}")
        crash_point("launch.after_effect")
        attempt.handle = dict(handle.state)
        self.live = _Live(handle=handle, shim=ShimEvents(shim_events) if program.shim else None,
                          started_mono=self.clock.monotonic(), run_dirs_at_launch=run_dirs_before)
        self._persist()
        self.event("started", attempt=number, reason=intent.reason, pid=handle.pid, resume_from=attempt.resume_from,
                   seed=seed if seed is not None else self.cfg.seed, contract=wf.contract, argv=spec.argv,
                   warm_spare=warm, num_envs=num_envs)
        return None

    def num_envs(self) -> int:
        """The num_envs the next launch uses: the configured one, or less after a step-down."""
        m = self.model
        return num_envs_in_use(m.num_envs, m.num_envs_of, self.cfg.num_envs)

    def _never_started(self, attempt: Attempt, why: str) -> None:
        """Close an attempt no trainer ever ran for (so it is no open attempt to adopt)."""
        attempt.ended_at = self.clock.wall()
        attempt.exit = {"code": None, "signal": None, "oom_killed": False, "external_stop": False, "description": why}

    def _hand_to_spare(self, program: Program, args: list[str], spec: LaunchSpec) -> Handle | None:
        """Give the attempt's command line to the ready spare; its handle, or None to start cold."""
        go = {"argv": program.go_argv(args), "cwd": str(spec.cwd), "plain": program.plain_spare,
              "env": {k: spec.env[k] for k in (launch.SHIM_EVENTS_ENV, "ISAACD_SNAPSHOT_EVERY",
                                              "ISAACD_SNAPSHOT_MIN_SECONDS", "ISAACD_SNAPSHOT_BUDGET",
                                              *launch.WANDB_ENV)
                      if k in spec.env}}
        resume = (self.history.current.resume_from if self.history.current else None) or {}
        taken = self.spares.take(go, attempt_args=args, checkpoint=resume.get("path"))  # a booted spare needs both
        if taken is None:
            return None
        self._persist_spare_token()
        return taken[0]

    def _persist_spare_token(self) -> None:
        if self.history.spare_token != self.spares.token:
            self.history.spare_token = self.spares.token
            self._persist()

    def program(self) -> Program | None:
        if self.resolved is None:
            return None
        try:
            return self.resolved.program(in_container=self.cfg.in_container)
        except WorkflowError:
            return None

    # ---- recovery after a supervisor (re)start -------------------------------------------
    def recover(self) -> None:
        """Adopt a live trainer (by its saved handle, or by the token saved before its spawn), finish a stop
        that was in flight, or carry on with what the saved model says. Replays are idempotent: a stop is
        re-signalled only if the trainer never saw it, a launch is redone only if no trainer carries its token."""
        m, attempt = self.model, self.history.current
        if self.history.spare_token and (attempt is None or attempt.token != self.history.spare_token):
            self.spares.kill_leftover(self.history.spare_token)  # one that never took over: a new one follows
        if m.state.active:
            open_attempt = attempt if attempt is not None and attempt.exit is None else None
            handle = self._find_trainer(open_attempt) if open_attempt is not None else None
            if handle is not None:
                assert open_attempt is not None
                self._adopt(open_attempt, handle)
                return
            if m.state == JobState.STARTING and (open_attempt is None or not open_attempt.handle):
                # the launch was decided (its attempt perhaps saved) but no trainer carries its token
                if open_attempt is not None:
                    self._never_started(open_attempt, "never started: the supervisor stopped during the launch")
                self.event("launch_replayed", reason=m.launch.reason,
                           detail="the supervisor stopped during this launch; launching it again")
                refused = self._launch(m.launch)
                if refused is not None:
                    self.handle_message(refused)
                return
            status = ExitStatus(detail="trainer ended while the supervisor was not running")
            if open_attempt is not None:
                self._record_exit(open_attempt, status)
            self.handle_message(Exited(status.describe(), "lost", success=False))
            return
        if m.state == JobState.STOPPED and not m.final:
            # stopped by a supervisor shutdown, a config removal or a heat park: the job goes on
            self.handle_message(Start(Origin.RECOVERY, "resuming after a supervisor restart"))
            return
        if m.state == JobState.PENDING and not self.cfg.autostart and attempt is None:
            self.handle_message(Stop(Origin.CONFIG, "autostart = false"))

    def _find_trainer(self, attempt: Attempt) -> Handle | None:
        if attempt.runtime != self.runtime.name:
            return None
        if attempt.handle:
            return self.runtime.adopt(self.cfg, attempt.handle)
        finder = getattr(self.runtime, "find", None)
        if attempt.token and finder is not None:
            handle = finder(self.cfg, attempt.token)
            if handle is not None:
                attempt.handle = dict(handle.state)
                self._persist()
            return handle
        return None

    def _adopt(self, attempt: Attempt, handle: Handle) -> None:
        self.live = _Live(handle=handle, started_mono=self.clock.monotonic(),
                          shim=ShimEvents(Path(attempt.shim_events)) if attempt.shim_events else None,
                          # the trainer may not have made its run dir yet: earlier attempts' dirs are not it
                          run_dirs_at_launch={Path(a.run_dir).name for a in self.history.attempts if a.run_dir})
        self._poll_shim(attempt)
        self._attach_run_dir(attempt)
        self.event("adopted", attempt=attempt.number, pid=handle.pid, run_dir=attempt.run_dir)
        stop = self.model.stop
        if self.model.state == JobState.STOPPING and stop is not None:
            # finish the stop the previous supervisor began: its deadline is still on this boot's clock
            if stop.killed:
                self.runtime.kill(handle)
            elif not self.live.stop_seen_by_trainer:
                self.runtime.signal(handle, signal.SIGINT)
            self.event("stop_resumed", reason=stop.reason, then=stop.then.value,
                       detail="a stop in flight when the supervisor stopped; carried on")

    # ---- observing -------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """One step: what happened (observations), then time passing (Tick). `now` is monotonic."""
        self.live.new_points = []
        for obs in self._observe(now):
            self.handle_message(obs)
        self.handle_message(Tick())
        self.spares.tick(self.state, self.program(), now)
        self._persist_spare_token()
        if self._dirty:
            self._persist()
        self.cleanups = [h for h in self.cleanups if not self._cleanup(h)]
        if self.cfg.backup is not None or self.backup is not None:
            self._backup_tick(now - self._checkpoint_scanned_at >= CHECKPOINT_SCAN_INTERVAL)
        if now - self._checkpoint_scanned_at >= CHECKPOINT_SCAN_INTERVAL:
            self._checkpoint_scanned_at = now
            self._checkpoint = self.newest_checkpoint()

    # ---- backup (daemon/backup/: the network I/O runs on its threads) ---------------------------
    def _backup_keeper(self) -> JobBackup | None:
        """The keeper for the job's current [jobs.backup]; a reload that changed or removed it replaces it."""
        want = self.cfg.backup
        if self.backup is not None and self.backup.cfg != want:
            self.backup.close()
            self.backup = None
        if want is not None and self.backup is None and self.resolved is not None:
            self.backup = JobBackup(want, self.cfg.name, self.resolved.workflow.layout, self._validator())
        return self.backup

    def _backup_tick(self, scan: bool) -> None:
        keeper = self._backup_keeper()
        if keeper is None:
            return
        for name, fields in keeper.take_notes():
            self.event(name, **fields)
        if self.launch_waits is not None:
            self._launch_when_fetched()
        if scan:  # the timeline's run dirs, for the uploader thread to look at
            keeper.set_runs([BackupRun(path, offset, bound) for path, offset, bound in timeline(self._lineage())])

    def _launch_when_fetched(self) -> None:
        """A launch waits for the bucket's checkpoint: ask again (returns at once); a stop meanwhile ends the wait."""
        if self.state == JobState.STARTING and self.live.handle is None:
            refused = self._launch(self.model.launch)
            if refused is not None:
                self.launch_waits = None
                self.handle_message(refused)
            return
        self.launch_waits = None
        if self.state == JobState.STOPPING:
            self.handle_message(Exited("not started: stopped while its checkpoint was fetched from the backup "
                                       "target", "operator", success=False))

    def _cleanup(self, handle: Handle) -> bool:
        """True once the runtime has released what the trainer's start created (polled: never blocks)."""
        try:
            done = self.runtime.cleanup(handle)
        except Exception as exc:  # noqa: BLE001
            self.log.warning("cleanup_failed", error=str(exc))
            return True
        return done is None or bool(done)

    def _observe(self, now: float) -> list[Message]:
        live, attempt = self.live, self.history.current
        if live.handle is None or attempt is None:
            return []
        out: list[Message] = []
        status = self.runtime.poll(live.handle)
        if self.state == JobState.STARTING and self.runtime.describe(live.handle).get("waiting"):
            live.started_mono = now  # not placed yet (no room): the watchdogs' warm-up starts when it is
        if live.handle.state != attempt.handle:  # the runtime learnt more (container id, unit invocation)
            attempt.handle = dict(live.handle.state)
            self._persist()
        self._poll_shim(attempt)
        if live.tail is None:
            self._attach_run_dir(attempt)
        if live.tail is not None:
            live.new_points = live.tail.poll(now)
            for note in live.tail.take_damage():  # a torn/overwritten record was skipped: say so
                self.event("tensorboard_damaged", **note)
            if live.new_points:
                prog = live.tail.progress
                self.last_progress_mono, self.last_progress_wall = now, self.clock.wall()
                self.iteration = self._job_iteration(prog.last_step, attempt)
                self.scalars.update(prog.latest)
                if prog.last_step is not None:
                    out.append(Progressed(prog.last_step))
        if status is None:
            if now - live.pids_scanned_at >= PIDS_SCAN_INTERVAL:  # a /proc walk: not every tick
                live.pids_scanned_at = now
                live.pids = self.runtime.pids(live.handle)
            return out
        status = exit_with_log_tail(status, live.handle)  # "exited with code 1: OSError: ... No space left"
        crash_point("exit.before_save")
        out.append(self._exited(attempt, status))
        return out

    def _exited(self, attempt: Attempt, status: ExitStatus) -> Exited:
        ran = self.clock.monotonic() - self.live.started_mono if self.live.started_mono is not None else 0.0
        self._record_exit(attempt, status)
        start = attempt.resume_from["iteration"] if attempt.resume_from else -1
        moved = attempt.checkpoint_at_exit is not None and attempt.checkpoint_at_exit > start
        reached_max = status.success and self._reached_max()
        finished = self._finished_early(attempt) if status.success and not reached_max else None
        return Exited(status.describe(), status.reason_class, status.success, status.external_stop,
                      reached_max=reached_max, ran_seconds=ran, moved_forward=moved, finished_early=finished,
                      cuda_oom=self._cuda_oom(attempt, status))

    def _cuda_oom(self, attempt: Attempt, status: ExitStatus) -> CudaOom | None:
        """What the trainer's output said about GPU memory, and what the GPU sampler saw, as facts for the machine."""
        if not isinstance(status, ExitWithOutput) or status.cuda_oom is None:
            return None
        found = status.cuda_oom
        note = self.gpu_memory(self.cfg.name, attempt.started_at) if self.gpu_memory else None
        return CudaOom(found.kind, found.line, found.fix(), gpu=note.gpu if note else None,
                       trend=note.trend if note else None, facts=note.facts if note else {})

    def _finished_early(self, attempt: Attempt) -> str | None:
        """Called after _reached_max, which polled the tail to the end: the trainer's own stop rule, if it hit one."""
        if self.resolved is None or self.live.tail is None:
            return None
        prog = self.live.tail.progress
        rd = Path(attempt.run_dir) if attempt.run_dir else None
        return self.resolved.workflow.finished_early(self.cfg, rd, dict(prog.latest), prog.last_step)

    def _poll_shim(self, attempt: Attempt) -> None:
        """Fold in what the shim said: the run dir, checkpoints as they land, which checkpoint was loaded."""
        shim = self.live.shim
        if shim is None:
            return
        for ev in shim.poll():
            kind = ev.get("event")
            if kind == "checkpoint_saved" and ev.get("path"):
                VALIDATOR.prewarm(launch.host_path(self.cfg, str(ev["path"])))  # deep validation off the tick
                self._checkpoint_scanned_at = float("-inf")  # status shows it at the next scan, not in 2 s
                if self.backup is not None:
                    self.backup.kick()
            elif kind == "checkpoint_loaded":
                wanted = attempt.resume_from["path"] if attempt.resume_from else None
                got = str(launch.host_path(self.cfg, str(ev.get("path"))))
                if wanted is not None and Path(got) != Path(wanted):
                    self.event("resume_mismatch", attempt=attempt.number, chosen=wanted, loaded=got,
                               detail="the trainer loaded another checkpoint than isaacd chose")
            elif kind in ("runner_started", "shim_started") and shim.report.rsl_rl_version:
                self.history.trainer_rsl_rl_version = shim.report.rsl_rl_version
            elif kind == "stop_requested":
                self.live.stop_seen_by_trainer = True
            elif kind == "stopped":
                saved = ev.get("checkpoint")
                self.event("trainer_saved_on_stop", attempt=attempt.number, iteration=ev.get("iteration"),
                           checkpoint=str(launch.host_path(self.cfg, str(saved))) if saved else None)

    def _attach_run_dir(self, attempt: Attempt) -> None:
        if attempt.run_dir:
            self.live.tail = TensorBoardTail(Path(attempt.run_dir))
            return
        found: Path | None = None
        if self.live.shim is not None and self.live.shim.report.run_dir:
            found = launch.host_path(self.cfg, self.live.shim.report.run_dir)  # rank 0's run dir, as reported
        elif self.live.shim is None and self.resolved is not None:
            found = self._guess_run_dir()
        if found is not None:
            attempt.run_dir = str(found)
            self._persist()
            self.live.tail = TensorBoardTail(found)
            self.event("run_dir", attempt=attempt.number, run_dir=attempt.run_dir)

    def _guess_run_dir(self) -> Path | None:
        """Without the shim: a run dir created since the launch, named exactly as this job's launches name them.

        Several ranks (Isaac Lab 2.x) each stamp a dir; rank 0's is the one that gets TensorBoard events.
        """
        assert self.resolved is not None
        wf = self.resolved.workflow
        name_re = wf.run_dir_re(self.cfg)
        try:
            new = sorted(p for p in wf.experiment_dir(self.cfg).iterdir() if p.is_dir()
                         and p.name not in self.live.run_dirs_at_launch and name_re.match(p.name))
        except OSError:
            return None
        if self.cfg.ranks > 1:
            new = [p for p in new if any(p.glob("events.out.tfevents.*"))]
        return new[-1] if new else None

    def _record_exit(self, attempt: Attempt, status: ExitStatus) -> None:
        """The facts of an ended attempt, saved before the machine decides what they mean."""
        attempt.ended_at = self.clock.wall()
        attempt.exit = status.as_json()
        self._poll_shim(attempt)  # its last words: the checkpoint a stop saved, the run dir of a short run
        if self.live.tail is None and attempt.run_dir is None:
            self._attach_run_dir(attempt)
        if attempt.run_dir and attempt.shim_events:  # only the shim writes snapshots
            files, size = sweep_snapshot_temps(Path(attempt.run_dir))
            if files:
                self.event("snapshot_temps_removed", attempt=attempt.number, files=files, bytes=size,
                           detail="half-written snapshots of the exited trainer")
        self._checkpoint, self._checkpoint_scanned_at = self.newest_checkpoint(), self.clock.monotonic()
        attempt.checkpoint_at_exit = self._checkpoint.iteration if self._checkpoint else None
        if self.live.handle is not None:
            self.cleanups.append(self.live.handle)
        attempt.last_iteration = self.iteration
        h = self.history
        if self.iteration is not None:  # what status shows after a supervisor restart, before new events arrive
            h.last_iteration = self.iteration
            h.last_mean_reward = finite_or_none(self.scalars.get("Train/mean_reward"))
            h.last_fps = finite_or_none(self.scalars.get("Perf/total_fps"))
        self._persist()
        self.event("exited", attempt=attempt.number, **status.as_json(), iteration=self.iteration,
                   requested=self.model.stop is not None)

    def _reached_max(self) -> bool:
        """Called after _record_exit, which refreshed the newest checkpoint."""
        if self.resolved is None:
            return False
        tail = self.live.tail
        if tail is not None:
            tail.poll(self.clock.monotonic())  # the last iterations may have landed after the last tick
        last = tail.progress.last_step if tail else None
        attempt = self.history.current
        if last is not None and attempt is not None:
            last = self._job_iteration(last, attempt)
        return self.resolved.workflow.is_complete(self.cfg, self._checkpoint, last)

    def _job_iteration(self, step: int | None, attempt: Attempt) -> int | None:
        """A TensorBoard step as the job's iteration (skrl counts timesteps from 0 in every resumed run)."""
        if step is None or self.resolved is None:
            return step
        rd = Path(attempt.run_dir) if attempt.run_dir else None
        ri = attempt.resume_from["iteration"] if attempt.resume_from else None
        return self.resolved.workflow.progress_iteration(step, rd, ri)

    # ---- read side -------------------------------------------------------------------------
    def signals(self) -> JobSignals:
        live, attempt = self.live, self.history.current
        prog = live.tail.progress if live.tail else None
        return JobSignals(
            name=self.cfg.name, cfg=self.cfg,
            alive=self.state in (JobState.STARTING, JobState.RUNNING) and live.handle is not None,
            attempt=attempt.number if attempt else 0, attempt_started_at=live.started_mono,
            first_step=self._job_iteration(prog.first_step, attempt) if prog and attempt else None,
            iteration=self._job_iteration(prog.last_step, attempt) if prog and attempt else None,
            last_progress_time=self.last_progress_mono, new_points=tuple(live.new_points), pids=tuple(live.pids),
            parked_by=self.model.parked_by, state=self.state,
            waiting=bool(live.handle is not None and self.runtime.describe(live.handle).get("waiting")))

    def snapshot(self) -> dict[str, Any]:
        """The job as `isaacd status` and /metrics show it: a fresh dict each tick, never changed afterwards."""
        h, m, live = self.history, self.model, self.live
        attempt = h.current
        desc = self.runtime.describe(live.handle) if live.handle else {}
        prog = live.tail.progress if live.tail else None
        ckpt = self._checkpoint
        wall_minus_mono = self.clock.wall() - self.clock.monotonic()
        backoff_until = m.backoff_until + wall_minus_mono if m.state == JobState.BACKING_OFF and \
            m.backoff_until is not None else None
        return {
            "name": self.cfg.name,
            "state": m.state.value,
            "state_since": self.state_since,
            "state_reason": f"{m.reason}; waiting: {desc['waiting']}" if m.state == JobState.STARTING
            and desc.get("waiting") else m.reason,
            "runtime": self.cfg.runtime,
            "workflow": self.cfg.workflow,
            "contract": self.resolved.workflow.contract if self.resolved else None,
            "task": self.cfg.task,
            "device": self.cfg.device,
            "gpus": status_gpus(self.cfg),
            "pid": desc.get("pid"),
            "pids": list(live.pids),
            "cgroup": desc.get("cgroup"),
            "container_id": desc.get("container_id"),
            "unit": desc.get("unit"),
            "node": desc.get("node"),  # where the trainer runs, for runtimes that place it (ray)
            "waiting": desc.get("waiting"),  # why a placing runtime has not started it yet (no room, ...)
            "iteration": self.iteration if self.iteration is not None else h.last_iteration,
            "max_iterations": self.cfg.max_iterations,
            "mean_reward": finite_or_none(prog.mean_reward if prog else self.scalars.get("Train/mean_reward",
                                                                                          h.last_mean_reward)),
            "fps": finite_or_none(prog.fps if prog else self.scalars.get("Perf/total_fps", h.last_fps)),
            # a resumed run redoes the iterations after its checkpoint: say so until it has caught up
            "resume_from": attempt.resume_from if attempt else None,
            "redo_until": max((a.last_iteration for a in h.attempts[:-1] if a.last_iteration is not None),
                              default=None),
            "scalars": dict(self.scalars),
            "last_progress_time": self.last_progress_wall,
            "checkpoint": ckpt.as_json() if ckpt else None,
            "restarts": m.restarts,
            "num_envs": self.num_envs(),  # in use: less than configured after a step-down (CUDA out of memory)
            "num_envs_configured": self.cfg.num_envs,
            "cuda_ooms": dict(m.cuda_ooms),
            "last_restart_reason": m.last_restart_reason,
            "restarts_by_reason": dict(m.restarts_by_reason),
            "rollbacks": m.rollbacks,
            "run_dir": attempt.run_dir if attempt else None,
            "attempt": attempt.number if attempt else 0,
            "started_at": attempt.started_at if attempt and m.state.active else None,
            "backoff_until": backoff_until,
            "stopping_then": m.stop.then.value if m.stop is not None and m.state == JobState.STOPPING else None,
            "parked_by": m.parked_by,
            "persist_error": self.persist_error,
            "spare": self.spares.status(),
            "log_path": str(self.state_dir / "logs" / f"{self.cfg.name}.log"),
            "watchdogs": {},
            "watchdog_trips": [{"watchdog": k.split("/")[0], "action": k.split("/")[1], "count": v}
                               for k, v in m.watchdog_trips],
            "backup": self.backup.status() if self.backup is not None else None,
            **({"state_reason": f"{m.reason}; waiting: {self.launch_waits}", "waiting": self.launch_waits}
               if self.launch_waits is not None else {}),
        }
