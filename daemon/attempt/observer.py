"""The eyes on the current attempt: the runtime's poll, the TensorBoard tail and the shim's events, turned into
messages for the machine (Progressed, Exited) and facts for the history (run dir, exit, checkpoint at exit).

It acts on no trainer: what an observation means is jobs/machine.py's business. Nothing here blocks (the runtimes
answer at once, runtimes/base.py; the shim's file and the tail are read where they are)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ..runtimes import trainer_command
from .config_fault import named_in_config
from ..gpu.oom_memory import OomNote
from ..jobs.messages import CudaOom, Exited, Message, Progressed, StopSaved, TrainerConfigError
from ..jobs.model import JobState
from .exit_tail import ExitWithOutput, exit_with_log_tail, last_output_line
from ..observations.checkpoints import Checkpoint, sweep_snapshot_temps
from ..observations.shim_events import ShimEvents
from ..observations.tensorboard import ScalarPoint, TensorBoardTail, finite_or_none
from ..runtimes.process import ADOPTED_EXIT
from ..runtimes.base import ExitStatus, Handle, Runtime
from ..access.owner import inside_log_root
from ..clock import Clock
from ..history.store import Attempt
from ..workflows.validate import VALIDATOR
from .crashpoint import crash_point
from .launch_watch import LaunchWatch
from .record import JobRecord
from .setting import JobSetting, newest_checkpoint

PIDS_SCAN_INTERVAL = 2.0
BOOT_LINE_INTERVAL = 1.0  # a booting trainer's last output line is read this often, for `isaacd status`


@dataclass
class LiveAttempt:
    """What the runner knows about the current attempt's trainer (memory only; rebuilt on adoption)."""

    handle: Handle | None = None
    tail: TensorBoardTail | None = None
    shim: ShimEvents | None = None
    started_mono: float | None = None
    run_dirs_at_launch: set[str] = field(default_factory=set)
    new_points: list[ScalarPoint] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    pids_scanned_at: float = float("-inf")
    boot_line: str | None = None  # the trainer's last output line while it boots (a process runtime's log file)
    boot_line_read_at: float = float("-inf")

    @property
    def boot_phase(self) -> tuple[str | None, float | None]:
        """How far the boot got and since when (wall time), as far as the shim can tell (observations/shim_events.py)."""
        r = self.shim.report if self.shim is not None else None
        return (r.boot_phase, r.boot_phase_since) if r is not None else (None, None)

    @property
    def stop_seen_by_trainer(self) -> bool:
        """The shim reported stop_requested: never signal it twice."""
        return self.shim is not None and self.shim.report.stop_requested


class AttemptObserver:
    def __init__(self, setting: JobSetting, runtime: Runtime, clock: Clock, record: JobRecord,
                 gpu_memory: Callable[[str, float | None], OomNote] | None = None,
                 on_checkpoint_saved: Callable[[], None] = lambda: None):
        self.setting, self.runtime, self.clock, self.record = setting, runtime, clock, record
        # the job's GPUs at a CUDA out-of-memory (name, attempt start) -> note
        self.gpu_memory = gpu_memory
        self.on_checkpoint_saved = on_checkpoint_saved
        self.live = LiveAttempt()
        self._refused_run_dirs: set[int] = set()  # attempts whose reported run dir was refused (said once)
        self.ended: list[Handle] = []  # ended trainers whose runtime resources are still being released
        self.iteration: int | None = None
        self.scalars: dict[str, float] = {}
        self.last_progress_mono: float | None = None
        self.last_progress_wall: float | None = None
        self.checkpoint: Checkpoint | None = None  # newest on the timeline, as of `checkpoint_scanned_at`
        self.checkpoint_scanned_at = float("-inf")
        self.launch = LaunchWatch(setting, record)  # the starting attempt's waits and their deadlines
        self.stop_saved: StopSaved | None = None  # a stop's save the shim reported, for the machine while it lives

    # ---- the attempt's start and end ------------------------------------------------------
    def started(self, handle: Handle, shim_events: Path | None, run_dirs_before: set[str],
                spare: tuple[ShimEvents, str, float] | None = None) -> None:
        """`spare`: the events, mode and go time (wall) of the spare handed this attempt (held to the hand-over's
        deadlines)."""
        self.live = LiveAttempt(handle=handle, shim=ShimEvents(shim_events) if shim_events else None,
                                started_mono=self.clock.monotonic(), run_dirs_at_launch=run_dirs_before)
        self.stop_saved = None
        self.launch.begin(self.live.started_mono or 0.0, spare, measure_startup=True)

    def adopt(self, attempt: Attempt, handle: Handle, spare: tuple[ShimEvents, str, float] | None = None) -> None:
        """A live trainer a supervisor start found: watch it as if we had started it (`spare`: the spare a previous
        supervisor handed this starting attempt, held to the hand-over's deadlines from now)."""
        self.live = LiveAttempt(handle=handle, started_mono=self.clock.monotonic(),
                                shim=ShimEvents(Path(attempt.shim_events)) if attempt.shim_events else None,
                                # the trainer may not have made its run dir yet: earlier attempts' dirs are not it
                                run_dirs_at_launch={Path(a.run_dir).name for a in self.record.history.attempts
                                                    if a.run_dir})
        self.launch.begin(self.live.started_mono or 0.0, spare, measure_startup=False)
        self._poll_shim(attempt)
        self._attach_run_dir(attempt)

    def forget(self) -> None:
        self.live = LiveAttempt()
        self.stop_saved = None

    def scan_checkpoint(self, now: float) -> None:
        self.checkpoint_scanned_at = now
        self.checkpoint = newest_checkpoint(self.setting, self.record.history)

    # ---- each tick ------------------------------------------------------------------------
    def observe(self, now: float) -> list[Message]:
        live, attempt = self.live, self.record.history.current
        live.new_points = []
        if live.handle is None or attempt is None:
            return []
        out: list[Message] = []
        status = self.runtime.poll(live.handle)
        starting = self.record.model.state == JobState.STARTING
        desc = self.runtime.describe(live.handle) if starting else None
        if desc is not None and desc.waiting:
            live.started_mono = now  # not placed yet (no room): the watchdogs' warm-up starts when it is
            self.launch.placed(now)
        if live.handle.state != attempt.handle:  # the runtime learnt more (container id, unit invocation)
            attempt.handle = dict(live.handle.state)
            self.record.persist()
        self._poll_shim(attempt)
        if self.record.model.state == JobState.STARTING and now - live.boot_line_read_at >= BOOT_LINE_INTERVAL:
            live.boot_line_read_at = now
            live.boot_line = last_output_line(live.handle)
        if live.tail is None:
            self._attach_run_dir(attempt)
        if live.tail is not None:
            live.new_points = live.tail.poll(now)
            for note in live.tail.take_damage():  # a torn/overwritten record was skipped: say so
                self.record.event("tensorboard_damaged", **note)
            if live.new_points:
                prog = live.tail.progress
                self.last_progress_mono, self.last_progress_wall = now, self.clock.wall()
                self.iteration = self.job_iteration(prog.last_step, attempt)
                self.scalars.update(prog.latest)
                if prog.last_step is not None:
                    out.append(Progressed(prog.last_step))
            self.launch.points(live.new_points, now)
        if desc is not None and status is None:  # a wait of the launch past its deadline: the machine decides
            overdue = self.launch.observe(now, attempt.number, desc.pid, bool(desc.waiting),
                                          live.shim.report if live.shim else None)
            if overdue is not None:
                out.append(overdue)
        if status is None:
            if self.stop_saved is not None:  # saved and still alive: its cleanup runs (issue 42: the machine decides)
                out.append(self.stop_saved)
                self.stop_saved = None
            if now - live.pids_scanned_at >= PIDS_SCAN_INTERVAL:  # a /proc walk: not every tick
                live.pids_scanned_at = now
                live.pids = self.runtime.pids(live.handle)
            return out
        cfg = self.setting.cfg  # the config values an error no restart can fix may name (an unknown task, ...)
        named = named_in_config(cfg.task, cfg.agent, cfg.extra_args, cfg.spare_preload, cfg.environment,
                                cfg.train_script)
        status = exit_with_log_tail(status, live.handle, named)  # "exited with code 1: OSError: ... No space left"
        crash_point("exit.before_save")
        out.append(self.exited(attempt, status))
        return out

    def exited(self, attempt: Attempt, status: ExitStatus) -> Exited:
        ran = self.clock.monotonic() - self.live.started_mono if self.live.started_mono is not None else 0.0
        status = self._adopted_and_finished(status)
        self.record_exit(attempt, status)
        start = attempt.resume_from["iteration"] if attempt.resume_from else -1
        moved = attempt.checkpoint_at_exit is not None and attempt.checkpoint_at_exit > start
        reached_max = status.success and self._reached_max()
        finished = self._finished_early(attempt) if status.success and not reached_max else None
        handover = self.launch.handover_failed() if self.record.model.state == JobState.STARTING else None
        return Exited(status.describe(), status.reason_class, status.success, status.external_stop,
                      config_error=self._config_error(status),
                      reached_max=reached_max, ran_seconds=ran, moved_forward=moved, finished_early=finished,
                      cuda_oom=self._cuda_oom(attempt, status), handover_failed=handover)

    def _adopted_and_finished(self, status: ExitStatus) -> ExitStatus:
        """An adopted trainer (not this supervisor's child: no exit code) whose shim said its training finished
        (learn() returned, after its last save) ended as a finished one does: code 0, so the job completes instead
        of scheduling a restart that only finds max_iterations reached."""
        shim = self.live.shim
        if status.detail != ADOPTED_EXIT or shim is None:
            return status
        shim.poll()
        if not shim.report.finished:
            return status
        return replace(status, code=0, detail="adopted after a restart (no exit code to read); its shim said its "
                                              "training finished")

    def record_exit(self, attempt: Attempt, status: ExitStatus) -> None:
        """The facts of an ended attempt, saved before the machine decides what they mean."""
        record, live = self.record, self.live
        attempt.ended_at = self.clock.wall()
        attempt.exit = status.as_json()
        self._poll_shim(attempt)  # its last words: the checkpoint a stop saved, the run dir of a short run
        if live.tail is None and attempt.run_dir is None:
            self._attach_run_dir(attempt)
        if attempt.run_dir and attempt.shim_events:  # only the shim writes snapshots
            files, size = sweep_snapshot_temps(Path(attempt.run_dir))
            if files:
                record.event("snapshot_temps_removed", attempt=attempt.number, files=files, bytes=size,
                             detail="half-written snapshots of the exited trainer")
        self.scan_checkpoint(self.clock.monotonic())
        attempt.checkpoint_at_exit = self.checkpoint.iteration if self.checkpoint else None
        if live.handle is not None:
            self.ended.append(live.handle)
        attempt.last_iteration = self.iteration
        h = record.history
        if self.iteration is not None:  # what status shows after a supervisor restart, before new events arrive
            h.last_iteration = self.iteration
            h.last_mean_reward = finite_or_none(self.scalars.get("Train/mean_reward"))
            h.last_fps = finite_or_none(self.scalars.get("Perf/total_fps"))
        record.persist()
        record.event("exited", attempt=attempt.number, **status.as_json(), iteration=self.iteration,
                     requested=record.model.stop is not None)

    def job_iteration(self, step: int | None, attempt: Attempt) -> int | None:
        """A TensorBoard step as the job's iteration (skrl counts timesteps from 0 in every resumed run)."""
        resolved = self.setting.resolved
        if step is None or resolved is None:
            return step
        rd = Path(attempt.run_dir) if attempt.run_dir else None
        ri = attempt.resume_from["iteration"] if attempt.resume_from else None
        return resolved.workflow.progress_iteration(step, rd, ri)

    # ---- what the exit means, as facts -------------------------------------------------------
    def _cuda_oom(self, attempt: Attempt, status: ExitStatus) -> CudaOom | None:
        """What the trainer's output said about GPU memory, and what the GPU sampler saw, as facts for the machine."""
        if not isinstance(status, ExitWithOutput) or status.cuda_oom is None:
            return None
        found = status.cuda_oom
        note = self.gpu_memory(self.setting.cfg.name, attempt.started_at) if self.gpu_memory else None
        return CudaOom(found.kind, found.line, found.fix(), gpu=note.gpu if note else None,
                       trend=note.trend if note else None, facts=note.facts if note else {})

    def _config_error(self, status: ExitStatus) -> TrainerConfigError | None:
        """What the trainer's output said it cannot run with, and the key to change, as facts for the machine."""
        if not isinstance(status, ExitWithOutput) or status.config_fault is None:
            return None
        found = status.config_fault
        return TrainerConfigError(found.kind, found.what, found.line, found.key, found.fix(self.setting.cfg.name))

    def _finished_early(self, attempt: Attempt) -> str | None:
        """Called after _reached_max, which polled the tail to the end: the trainer's own stop rule, if it hit one."""
        if self.setting.resolved is None or self.live.tail is None:
            return None
        prog = self.live.tail.progress
        rd = Path(attempt.run_dir) if attempt.run_dir else None
        return self.setting.resolved.workflow.finished_early(self.setting.cfg, rd, dict(prog.latest), prog.last_step)

    def _reached_max(self) -> bool:
        """Called after record_exit, which refreshed the newest checkpoint."""
        if self.setting.resolved is None:
            return False
        tail = self.live.tail
        if tail is not None:
            tail.poll(self.clock.monotonic())  # the last iterations may have landed after the last tick
        last = tail.progress.last_step if tail else None
        attempt = self.record.history.current
        if last is not None and attempt is not None:
            last = self.job_iteration(last, attempt)
        return self.setting.resolved.workflow.is_complete(self.setting.cfg, self.checkpoint, last)

    # ---- the shim and the run dir -----------------------------------------------------------
    def _poll_shim(self, attempt: Attempt) -> None:
        """Act on what the shim said (shim_events.py folds it): checkpoints as they land, which checkpoint was
        loaded, the trainer's rsl_rl version, the checkpoint a stop saved."""
        shim, cfg, record = self.live.shim, self.setting.cfg, self.record
        if shim is None:
            return
        shim.poll()
        news = shim.take_news()
        for path in news.saved:
            VALIDATOR.prewarm(trainer_command.host_path(cfg, path))  # deep validation off the tick
            self.checkpoint_scanned_at = float("-inf")  # status shows it at the next scan, not in 2 s
            self.on_checkpoint_saved()
        for path in news.loaded:
            wanted = attempt.resume_from["path"] if attempt.resume_from else None
            got = str(trainer_command.host_path(cfg, path))
            if wanted is not None and Path(got) != Path(wanted):
                record.event("resume_mismatch", attempt=attempt.number, chosen=wanted, loaded=got,
                             detail="the trainer loaded another checkpoint than isaacd chose")
        if shim.report.rsl_rl_version:
            record.history.trainer_rsl_rl_version = shim.report.rsl_rl_version
        for stopped in news.stopped:
            if stopped.checkpoint:
                saved_at = str(trainer_command.host_path(cfg, stopped.checkpoint))
                record.event("trainer_saved_on_stop", attempt=attempt.number, iteration=stopped.iteration,
                             checkpoint=saved_at)
                if not stopped.exit_now:  # held for the next look at the trainer: said only while it lives
                    self.stop_saved = StopSaved(stopped.iteration, saved_at, stopped.cleanup)
            else:  # nothing saved: say why, not a save of nothing
                record.event("trainer_stopped", attempt=attempt.number, iteration=stopped.iteration,
                             detail=unsaved_stop(stopped.iteration))

    def _attach_run_dir(self, attempt: Attempt) -> None:
        live = self.live
        if attempt.run_dir:
            live.tail = TensorBoardTail(Path(attempt.run_dir))
            return
        found: Path | None = None
        if live.shim is not None and live.shim.report.run_dir:
            found = trainer_command.host_path(self.setting.cfg, live.shim.report.run_dir)  # rank 0's run dir, as reported
            if not inside_log_root(self.setting.cfg, found):  # an owner's trainer says what it likes (issue 32)
                if attempt.number not in self._refused_run_dirs:
                    self._refused_run_dirs.add(attempt.number)
                    self.record.event("run_dir_refused", attempt=attempt.number, run_dir=str(found),
                                      detail="not under the job's log_root: isaacd reads no other user's files "
                                             "for a job that runs as its owner")
                return
        elif live.shim is None and self.setting.resolved is not None:
            found = self._guess_run_dir()
        if found is not None:
            attempt.run_dir = str(found)
            self.record.persist()
            live.tail = TensorBoardTail(found)
            self.record.event("run_dir", attempt=attempt.number, run_dir=attempt.run_dir)

    def _guess_run_dir(self) -> Path | None:
        """Without the shim: a run dir created since the launch, named exactly as this job's launches name them.

        Several ranks (Isaac Lab 2.x) each stamp a dir; rank 0's is the one that gets TensorBoard events.
        """
        cfg, resolved = self.setting.cfg, self.setting.resolved
        assert resolved is not None
        wf = resolved.workflow
        name_re = wf.run_dir_re(cfg)
        try:
            new = sorted(p for p in wf.experiment_dir(cfg).iterdir() if p.is_dir()
                         and p.name not in self.live.run_dirs_at_launch and name_re.match(p.name))
        except OSError:
            return None
        if cfg.ranks > 1:
            new = [p for p in new if any(p.glob("events.out.tfevents.*"))]
        return new[-1] if new else None


def unsaved_stop(iteration: int | None) -> str:
    """Why a trainer that stopped on request saved no checkpoint (trainer/shim.py: a stop before the first
    iteration exits at once; one after it saves through the runner, which needs its log dir and writer)."""
    if iteration is None:
        return ("stopped before the first checkpoint: no iteration of this attempt had finished (it was booting), "
                "so there was nothing to save")
    return (f"stopped after iteration {iteration} without a checkpoint: the runner had no log dir or log writer "
            "to save into")
