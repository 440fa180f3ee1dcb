"""One job's hands: feeds what its parts observe to the state machine and applies the effects it decides.

The runner decides nothing, and its parts (attempt/) act on nothing the machine did not decide:
  * the observer (attempt/observer.py) turns the runtime, the TensorBoard tail and the shim into messages;
  * recovery (attempt/recovery.py) says what a supervisor start found, as messages;
  * `jobs.machine.decide` turns each message into a new model and effects;
  * `_apply`, the one effect interpreter, carries them out in order, saving the model before any effect that
    acts (jobs/effects.py): every signal, kill and launch goes through it; a launch is planned
    (attempt/planner.py: a plan, a refusal for the machine, or a wait) and carried out (attempt/starter.py,
    which asks `_spawn` for the runtime's start);
  * `apply_spare`, beside it, carries out what the spare keeper decides (attempt/spare_effects.py: start a spare,
    kill one), at each tick, at recovery, at shutdown and when the job's runtime changes.
Facts (attempts, run dirs, exits) go to the job's history, decisions to its model, saved in one document
(attempt/record.py). Nothing here blocks: the runtimes answer at once (runtimes/base.py).
The runner also wires the job: it builds those parts, and forwards none of their facts; whoever reads one (the
supervisor, attempt/job_status.py, status/signals.py) reads the part that owns it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .attempt.crashpoint import crash_point
from .attempt.deadlines import LaunchWait
from .attempt.observer import AttemptObserver
from .attempt.planner import GpuCheck, LaunchPlanner, Waiting
from .attempt.record import JobRecord
from .attempt.recovery import leftover_spare, recovery_messages
from .attempt.reset import set_runs_aside
from .attempt.setting import JobSetting, lineage, validator
from .attempt.starter import AttemptStarter
from .backup.fingerprint import job_fingerprint
from .backup.keeper import JobBackup
from .backup.lease import Identity
from .backup.uploader import Run as BackupRun
from .clock import WALL_MINUS_MONO_SLACK, Clock, SystemClock
from .config.schema import JobConfig
from .gpu.oom_memory import OomNote
from .gpu.snapshot import GpuSnapshot
from .jobs import machine
from .jobs.effects import Effect, Event, Forget, HoldSpare, Kill, Launch, Persist, Signal
from .jobs.messages import Awaited, LaunchRefused, LaunchWaited, Message, Settle, Tick
from .jobs.model import JobModel, JobState, LaunchIntent
from .jobs.policy import num_envs_in_use
from .daemon_log import log
from .observations.checkpoints import timeline
from .runtimes.base import Handle, LaunchSpec, Runtime
from .access.owner import OwnerProblem
from .attempt.spare import SpareKeeper, keeper_idle
from .attempt.spare_mode import spare_setting
from .attempt.spare_effects import SpareEffect, StartSpare
from .attempt.evals import EvalKeeper
from .attempt.eval_effects import EvalEffect, StartEval
from .status.signals import JobSignals, job_signals
from .status.types import JobStatus
from .attempt.job_status import job_status
from .caches.sizes import SIZES
from .history.store import StateStore
from .workflows import WorkflowError
from .workflows.launcher import Program

CHECKPOINT_SCAN_INTERVAL = 2.0


def apply_spare(keeper: SpareKeeper, effects: list[SpareEffect]) -> None:
    """The effect interpreter's part for the job's spare: carries out what the keeper decided (start one, kill one)
    with the job's runtime, then tells the keeper how it went, which says so in the journal and sets its retries."""
    for effect in effects:
        if isinstance(effect, StartSpare):
            try:
                handle = keeper.runtime.start(effect.spec)
            except Exception as exc:  # noqa: BLE001 - a spare that cannot start is no reason to touch the job
                keeper.start_failed(effect, exc)
            else:
                keeper.started(effect, handle)
        else:
            error: Exception | None = None
            try:
                keeper.runtime.kill(effect.handle)
            except Exception as exc:  # noqa: BLE001 - the keeper logs it and drops the spare all the same
                error = exc
            keeper.killed(effect, error)


def apply_evals(keeper: EvalKeeper, effects: list[EvalEffect]) -> None:
    """The interpreter's part for the job's evaluations (attempt/evals.py, issue 41), as `apply_spare` is for its
    spare: start one, kill one, with the job's runtime; the keeper then says how it went."""
    for effect in effects:
        if isinstance(effect, StartEval):
            try:
                handle = keeper.runtime.start(effect.spec)
            except Exception as exc:  # noqa: BLE001 - an evaluation that cannot start is no reason to touch the job
                keeper.start_failed(effect, exc)
            else:
                keeper.started(effect, handle)
        else:
            error: Exception | None = None
            try:
                keeper.runtime.kill(effect.handle)
            except Exception as exc:  # noqa: BLE001 - the keeper logs it and drops the evaluation all the same
                error = exc
            keeper.killed(effect, error)


class JobRunner:
    """One job's wiring (its parts, built here and sharing one JobSetting) and its effect interpreter. Each fact is
    read from the part that owns it: the config from `setting`, the model, history and last save error from
    `record`, the live attempt and its progress from `observer`; the runner keeps only what the interpreter needs
    (the launch's wait, the backup keeper, when the state last changed)."""

    def __init__(self, cfg: JobConfig, runtime: Runtime, store: StateStore, state_dir: Path,
                 clock: Clock | None = None, *, gpu_check: GpuCheck | None = None,
                 gpu_memory: Callable[[str, float | None], OomNote] | None = None,
                 gpu_snapshot: Callable[[], GpuSnapshot] | None = None):
        self.store, self.state_dir = store, state_dir
        self.clock: Clock = clock or SystemClock()
        self.setting = JobSetting.of(cfg, gpu_snapshot)  # the inventory: a MIG place's UUID (issue 42)
        self.log = log.bind(job=cfg.name)
        self.record = JobRecord(self.setting, store, state_dir, self.clock)
        self.setting.place(self.record.model.placement)  # a job the queue placed before this supervisor: its GPUs named
        self.state_since = self.clock.wall()
        # a booted spare's room: the GPU sampler's snapshot (GPU memory) and the live trainer's processes
        self.spares = SpareKeeper(self.setting, runtime, state_dir, self.event, gpu_snapshot=gpu_snapshot,
                                  trainer_pids=lambda: [p for p in (self.handle.pid if self.handle else None,
                                                                    *self.observer.live.pids) if isinstance(p, int)])
        self.backup: JobBackup | None = None  # [jobs.backup]: uploads and the bucket fetch (daemon/backup/)
        self.launch_waits: str | None = None  # a launch waiting (the bucket's checkpoint, its launcher's probe): why
        self.launch_waits_on = Awaited.CHECKPOINT  # and for what
        self.observer = AttemptObserver(self.setting, runtime, self.clock, self.record, gpu_memory,
                                        on_checkpoint_saved=self._checkpoint_saved)
        self.evals = EvalKeeper(self.setting, runtime, state_dir, self.record, self.observer, self.clock.wall,
                                gpu_snapshot=gpu_snapshot, backup=lambda: self.backup)  # [jobs.eval], issue 41
        self.planner = LaunchPlanner(self.setting, runtime.name, state_dir, self.clock, self.event,
                                     self._spare_token, self._backup_keeper, gpu_check)
        self._row: tuple[tuple[object, ...], float, JobStatus] | None = None  # the last row made and its key
        self._signals: tuple[tuple[object, ...], JobSignals] | None = None  # likewise the last signals
        # issue 39, at rest: one more at each act of the runner (a message, a reload, a tick that stepped anything); a
        # row or signals made at the same count are still right. A settled job: its model and config at its last tick
        self.touched = 0
        self._row_at = self._signals_at = -1
        self._settled: tuple[JobModel, JobConfig, object, int] | None = None
        self.starter = AttemptStarter(self.setting, runtime, self.record, self.observer, self.spares,
                                      spawn=self._spawn, apply_spare=lambda effects: apply_spare(self.spares, effects))

    @property
    def runtime(self) -> Runtime:
        return self.starter.runtime

    @runtime.setter
    def runtime(self, runtime: Runtime) -> None:
        """A reload that changes the job's `runtime` (applied while no trainer runs): every part launches, watches
        and keeps its spare with the new one; a spare of the old runtime goes first."""
        if self.spares.runtime is not runtime:
            self.kill_spare("the job's runtime changed")
        for part in (self.observer, self.starter, self.spares, self.evals):
            part.runtime = runtime
        self.planner.runtime_name = runtime.name

    def reconfigure(self, cfg: JobConfig, runtime: Callable[[], Runtime] | None = None) -> None:
        """A reload's one way into the runner. The new config is seen by every part at once, on purpose: they share
        the JobSetting, so the next launch, the spare and the status all read the config in force. `runtime` (the
        one the new config names) is taken only while no trainer runs: a running trainer is watched to its end by
        the runtime that started it, and a reload never kills it."""
        self.touched += 1
        self.setting.reconfigure(cfg)
        if runtime is not None and self.handle is None:
            self.runtime = runtime()

    @property
    def state(self) -> JobState:
        """The job's state, as its record's model has it: what the supervisor asks of each runner."""
        return self.record.model.state

    @property
    def handle(self) -> Handle | None:
        """The live attempt's trainer, if one runs (the supervisor's exit watcher and shutdown ask)."""
        return self.observer.live.handle

    @property
    def releasing(self) -> bool:
        """A spare it killed is not reaped yet (attempt/spare_release.py), or an evaluation runs or is not reaped yet
        (attempt/evals.py): a removed job's runner waits for it."""
        return bool(self.spares.releasing) or self.evals.busy

    def event(self, event: str, **fields: Any) -> None:
        self.record.event(event, **fields)

    def num_envs(self) -> int:
        """The num_envs the next launch uses: the configured one, or less after a step-down."""
        m = self.record.model
        return num_envs_in_use(m.num_envs, m.num_envs_of, self.setting.cfg.num_envs)

    def program(self) -> Program | None:
        resolved = self.setting.resolved
        if resolved is None:
            return None
        try:
            return resolved.program(in_container=self.setting.cfg.in_container)
        except WorkflowError:
            return None

    @property
    def launch_wait(self) -> LaunchWait | None:
        """The wait a starting attempt is on (attempt/deadlines.py), as of the last tick."""
        return self.observer.launch.wait if self.state == JobState.STARTING else None

    # ---- messages in, effects out ----------------------------------------------------------
    def handle_message(self, msg: Message) -> str | None:
        self.touched += 1
        cfg, record = self.setting.cfg, self.record
        ctx = machine.Context(cfg.name, self.clock.monotonic(), cfg.restart, cfg.stop_timeout,
                              cfg.num_envs, cfg.oom, backup=cfg.backup is not None,
                              placed_by_isaacd=self.setting.written.placed_by_isaacd, wall=self.clock.wall())
        decision = machine.decide(record.model, msg, ctx)
        old = record.model.state
        record.model = decision.model
        self.setting.place(record.model.placement)  # the GPUs the queue gave it, named before the launch reads them
        if record.model.state != old:
            self.state_since = self.clock.wall()
        follow_ups = self._apply(decision.effects)
        for obs in follow_ups:
            self.handle_message(obs)
        return decision.reply

    def _apply(self, effects: tuple[Effect, ...]) -> list[Message]:
        """The effect interpreter: the only code that signals, kills or launches a trainer."""
        follow_ups: list[Message] = []
        for effect in effects:
            if isinstance(effect, Event):
                self.event(effect.name, **effect.fields)
            elif isinstance(effect, Persist):
                self.record.persist()
                crash_point(f"{self.state.value}.after_intent")
            elif isinstance(effect, Signal):
                live = self.observer.live
                if live.handle is not None and not live.stop_seen_by_trainer:
                    self.runtime.signal(live.handle, effect.signum)
                crash_point("signal.after_effect")
            elif isinstance(effect, Kill):
                if self.handle is not None:
                    self.runtime.kill(self.handle)
            elif isinstance(effect, Forget):
                self.observer.forget()
            elif isinstance(effect, HoldSpare):
                self.spares.hold(effect.reason, effect.until)
                self.evals.hold(effect.reason, effect.until)  # an evaluation's GPU memory counts with the spare's
                self.kill_spare(effect.reason)
            elif isinstance(effect, Launch):
                refused = self._launch(effect.intent)
                if refused is not None:
                    follow_ups.append(refused)
        return follow_ups

    def _launch(self, intent: LaunchIntent) -> LaunchRefused | None:
        """Plan attempt N and carry the plan out; a refusal goes back to the machine."""
        if intent.fresh and intent.from_job is None:  # `isaacd reset`: the old runs go aside first (again, harmlessly,
            # on a replayed launch); PBT's exploit leaves them where they are (its timeline starts at its copy)
            refused = self._set_runs_aside()
            if refused is not None:
                return refused
        plan = self.planner.plan(intent, self.record.history, self.num_envs(), waited=self.launch_waits is not None)
        if isinstance(plan, Waiting):
            # the tick asks again once it is here; the supervisor goes on
            self.launch_waits, self.launch_waits_on = plan.reason, plan.on
            return None
        self.launch_waits = None
        return plan if isinstance(plan, LaunchRefused) else self.starter.start(plan)

    def _set_runs_aside(self) -> LaunchRefused | None:
        """The reset's act (attempt/reset.py): the job's run dirs moved into a dated folder, and what status shows of
        the old training (iteration, reward, checkpoint) dropped. A run dir that cannot be moved fails the job, with
        the reason: training on would leave a run the next resume could pick up."""
        try:
            done = set_runs_aside(self.setting, self.record.history, self.clock.wall())
        except OSError as exc:
            return LaunchRefused(f"cannot reset: {exc.strerror}; fix that, then `isaacd reset {self.setting.cfg.name}`",
                                 settle=Settle.FAILED)
        self.event("runs_set_aside", folder=str(done.folder) if done.folder else None,
                   run_dirs=[dest for _, dest in done.moved],
                   detail=f"{len(done.moved)} run dir(s) kept in {done.folder}" if done.folder else "no run dirs yet")
        h, obs = self.record.history, self.observer
        h.last_iteration = h.last_mean_reward = h.last_fps = None
        obs.iteration, obs.scalars, obs.checkpoint = None, {}, None
        return None

    def _spawn(self, spec: LaunchSpec) -> Handle:
        """A launch's cold start (the starter's last step: `_apply` → `_launch` → planner → starter)."""
        return self.runtime.start(spec)

    def _spare_token(self, program: Program) -> str | None:
        return self.spares.ready_token() if self.spares.enabled(program) else None

    def kill_spare(self, reason: str) -> None:
        """The job's spare and evaluation go (a supervisor shutdown, a runtime change, the job removed), through the
        interpreter; no evaluation starts again in this runner."""
        self.touched += 1
        apply_spare(self.spares, self.spares.dismiss(reason))
        apply_evals(self.evals, self.evals.dismiss(reason))

    # ---- recovery after a supervisor (re)start, and each tick -----------------------------
    def recover(self) -> None:
        """Say what this supervisor start found (attempt/recovery.py) to the machine, which decides what to do; a
        spare the previous supervisor left (one that never took over) is killed first: a new one follows."""
        self.touched += 1
        apply_spare(self.spares, self.spares.dismiss_leftover(leftover_spare(self.record)))
        apply_evals(self.evals, self.evals.dismiss_leftover())  # evaluated again from scratch
        for msg in recovery_messages(self.setting, self.runtime, self.record, self.observer, self.spares):
            self.handle_message(msg)

    def tick(self, now: float) -> bool:
        """One step: observations, then time passing (Tick); `now` monotonic. A settled job (still at the last tick,
        same model and config) has only its checkpoint scan (issue 39). True: settled, so no trainer (`still`)."""
        settled = self._settled
        # settled at this count: the runner has not acted since (all that could move it acts through the runner)
        if settled is not None and settled[3] == self.touched and settled[0] is self.record.model \
                and settled[1] is self.setting.cfg and settled[2] is self.setting.resolved:
            # a job that never ran has no run dir to look in (its timeline is its attempts': empty, no checkpoint)
            if self.record.history.attempts and now - self.observer.checkpoint_scanned_at >= CHECKPOINT_SCAN_INTERVAL:
                before = self.observer.checkpoint
                self.observer.scan_checkpoint(now)
                if self.observer.checkpoint != before:
                    self.touched += 1
                    self._settled = None if self.evals.ecfg else (*settled[:3], self.touched)  # one to evaluate
            return True
        self._full_tick(now)
        self.touched += 1
        m = self.record.model
        self._settled = (m, self.setting.cfg, self.setting.resolved, self.touched) \
            if self._quiet() and not tick_moves(m, self.setting.written.placed_by_isaacd) else None
        return False

    def _quiet(self) -> bool:
        """Nothing of the job moves on its own: no trainer, spare, launch, backup, retried save, runtime resources
        to release or launcher probe to wait for (`still`, and what the tick would ask of those)."""
        return still(self) and keeper_idle(self.spares) and self.evals.idle(self.state) and not self.record.dirty \
            and not self.observer.ended and not self.setting.probe_pending and self.setting.cfg.backup is None

    def _full_tick(self, now: float) -> None:
        self.setting.resolve_answered()  # made while its launcher's probe ran: resolved once it answered
        for obs in self.observer.observe(now):
            self.handle_message(obs)
        if tick_moves(self.record.model, self.setting.written.placed_by_isaacd):
            self.handle_message(Tick())
        else:  # what the Tick would have done besides deciding nothing (issue 39: 1,000 queued jobs each tick)
            self.setting.place(self.record.model.placement)
        # the keeper reads the program only for a job not at rest whose spare is on: not made for the others
        program = None if self.state.at_rest or spare_setting(self.setting.cfg.spare) == "off" else self.program()
        apply_spare(self.spares, self.spares.tick(self.state, program, now))
        apply_evals(self.evals, self.evals.tick(self.state, now))
        self.starter.persist_spare_token()
        if self.record.dirty:
            self.record.persist()
        self.observer.ended = [h for h in self.observer.ended if not self._cleanup(h)]  # runtime resources released
        scan_due = now - self.observer.checkpoint_scanned_at >= CHECKPOINT_SCAN_INTERVAL
        if self.setting.cfg.backup is not None or self.backup is not None:
            self._backup_tick(scan_due)
        if self.launch_waits is not None and self.launch_waits_on in (Awaited.LAUNCHER, Awaited.PREPARATION):
            self._launch_when_fetched()  # the probe, the preparation: on their threads, asked again each tick
        if now - self.observer.checkpoint_scanned_at >= CHECKPOINT_SCAN_INTERVAL:
            self.observer.scan_checkpoint(now)

    def _cleanup(self, handle: Handle) -> bool:
        """True once the runtime has released what the trainer's start created (polled: never blocks)."""
        try:
            done = self.runtime.cleanup(handle)
        except Exception as exc:  # noqa: BLE001
            self.log.warning("cleanup_failed", error=str(exc))
            return True
        return done is None or bool(done)

    # ---- backup (daemon/backup/: the network I/O runs on its threads) ---------------------------
    def _backup_keeper(self) -> JobBackup | None:
        """The keeper for the job's current [jobs.backup]; a reload that changed or removed it replaces it."""
        cfg, resolved = self.setting.cfg, self.setting.resolved
        want = cfg.backup
        if self.backup is not None and self.backup.cfg != want:
            self.backup.close()
            self.backup = None
        if want is not None and self.backup is None and resolved is not None:
            fingerprint = job_fingerprint(cfg, resolved, self.record.history.trainer_rsl_rl_version)
            try:
                owner = self.setting.owner()  # a job of its owner's: what lands is theirs, only theirs is uploaded
            except OwnerProblem:
                owner = None  # the launch is refused, naming the owner; nothing of theirs to fetch or upload
            self.backup = JobBackup(want, cfg.name, resolved.workflow.layout,
                                    validator(self.setting, self.record.history), Identity.here(self.state_dir),
                                    fingerprint, owner)
        return self.backup

    def backup_takeover(self) -> str:
        """`isaacd backup takeover JOB`: this supervisor takes the prefix's lease whoever holds it (an event)."""
        self.touched += 1
        keeper = self._backup_keeper()
        if keeper is None:
            raise ValueError(f"{self.setting.cfg.name} has no [jobs.backup] target: nothing to take over")
        self.event("backup_takeover_requested", url=keeper.store.url, origin="operator",
                   detail="the prefix's lease is taken at the next step, whoever holds it; that holder stops "
                          "writing at its next renewal")
        return keeper.takeover()

    def _checkpoint_saved(self) -> None:
        if self.backup is not None:
            self.backup.kick()

    def _backup_tick(self, scan: bool) -> None:
        keeper = self._backup_keeper()
        if keeper is None:
            return
        for name, fields in keeper.take_notes():
            self.event(name, **fields)
        if self.launch_waits is not None and self.launch_waits_on == Awaited.CHECKPOINT:
            self._launch_when_fetched()
        if scan:  # the timeline's run dirs, for the uploader thread to look at
            runs = timeline(lineage(self.record.history))
            keeper.set_runs([BackupRun(path, offset, bound) for path, offset, bound in runs])

    def _launch_when_fetched(self) -> None:
        """A launch waits (for the bucket's checkpoint, or its launcher's probe): the machine has it asked again (the
        planner answers at once) or, after a stop meanwhile, ends it (jobs/machine.py `_launch_waited`)."""
        self.handle_message(LaunchWaited(trainer=self.handle is not None, on=self.launch_waits_on))
        if self.state != JobState.STARTING or self.handle is not None:
            self.launch_waits = None  # the wait belonged to the starting attempt: over with it

    # ---- read side -------------------------------------------------------------------------
    def signals(self) -> JobSignals:
        """What the tick hooks read of the job (status/signals.py): the last tick's value again while nothing it is
        made of changed (`signals_key`)."""
        last = self._signals
        if last is not None and self._signals_at == self.touched:
            return last[1]  # nothing acted since it was made (a still job's: see signals_key)
        key = signals_key(self)
        self._signals_at = self.touched
        if key is not None and last is not None and last[0] == key:
            return last[1]
        sig = job_signals(self)
        self._signals = None if key is None else (key, sig)
        return sig

    def snapshot(self, wm: float | None = None) -> JobStatus:
        """The job as `isaacd status` and /metrics show it (attempt/job_status.py): the last publish's row again while
        nothing it is made of changed (`still_key`), else a fresh one (issue 39: 1,000 queued jobs at every tick).
        `wm`: the publish's wall - monotonic of this runner's clock, read once for all (else read here)."""
        last = self._row
        wm = key_wall_minus_mono(self) if wm is None else wm
        if last is not None and self._row_at == self.touched and abs(last[1] - wm) < WALL_MINUS_MONO_SLACK \
                and last[0][-1] == SIZES.version and not SIZES.due():
            return last[2]  # nothing acted since it was made (a still job's: see still_key)
        key = still_key(self)
        self._row_at = self.touched
        if key is not None and last is not None and last[0] == key and abs(last[1] - wm) < WALL_MINUS_MONO_SLACK:
            return last[2]
        row = job_status(self)
        self._row = None if key is None else (key, wm, row)
        return row


def key_wall_minus_mono(r: JobRunner) -> float:
    return r.clock.wall() - r.clock.monotonic()


# The states whose Tick decides nothing (jobs/machine.py `_tick`: no launch due, no stop's deadline to watch), a
# queued job's only while the host's queue places it; tests/test_runner_at_rest.py holds the machine to it
TICK_IDLE = frozenset({JobState.STOPPED, JobState.COMPLETED, JobState.FAILED, JobState.STARTING, JobState.RUNNING})


def tick_moves(m: JobModel, placed_by_isaacd: bool) -> bool:
    """Whether the machine's Tick can decide anything for this model (False: it returns the model, no effect)."""
    return not (m.state in TICK_IDLE or m.state == JobState.QUEUED and placed_by_isaacd)


def still(r: JobRunner) -> bool:
    """No trainer, spare, launch or backup of the job moves: what it shows changes only through the runner's code."""
    live = r.observer.live
    return live.handle is None and live.tail is None and live.shim is None and not live.new_points \
        and r.backup is None and r.launch_waits is None and r.record.model.state != JobState.STARTING \
        and r.spares.spare is None and not r.evals.busy


def signals_key(r: JobRunner) -> tuple[object, ...] | None:
    """Everything a still job's signals are made of (status/signals.py `job_signals`); None: made anew."""
    if not still(r):
        return None
    obs, a = r.observer, r.record.history.current
    return (r.record.model, r.setting.cfg, r.setting.written, tuple(obs.live.pids), obs.live.started_mono,
            obs.last_progress_mono, obs.checkpoint, a, None if a is None else (a.number, a.run_dir, a.resume_from))


def still_key(r: JobRunner) -> tuple[object, ...] | None:
    """Everything a job's status row is made of while no trainer, spare, launch or backup of it moves (a queued or
    resting job): the same key, the same row. None while one of them moves (a live trainer's row reads its runtime
    and clocks each time), or while the compile caches' sizes are due to be measured (the row's `size()` asks for
    it). Values compare by identity first: the model, config and history's attempt are replaced or changed only
    by the runner's own code, and a row made before such a change has another key."""
    if not still(r) or SIZES.due():
        return None
    obs, m, rec = r.observer, r.record.model, r.record
    live = obs.live
    h, setting = rec.history, r.setting
    a = h.current
    return (m, setting.cfg, setting.written, setting.resolved, r.state_since, rec.persist_error, r.spares.off_reason,
            obs.iteration, tuple(obs.scalars.items()), obs.last_progress_wall, obs.checkpoint, tuple(live.pids),
            live.boot_line, h.last_iteration, h.last_mean_reward, h.last_fps, len(h.attempts), a,
            None if a is None else (a.number, a.started_at, a.run_dir, a.resume_from, a.last_iteration),
            r.evals.changed, SIZES.version)
