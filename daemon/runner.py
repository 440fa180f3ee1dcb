"""One job's life: launch, watch, decide, restart. Driven by Supervisor.tick(); never blocks.

Decisions a user cares about (why a restart, which checkpoint, why it gave up) are written to the
job's event journal and to the structured log with the same fields.
"""

from __future__ import annotations

import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import launch
from .config import JobConfig
from .jobs import JobState, check_transition
from .joblogs import exit_with_log_tail
from .logs import log
from .rebuild import load_history
from .runtimes.base import ExitStatus, Handle, LaunchSpec, Runtime
from .signals.checkpoints import Checkpoint, Lineage, choose_resume
from .signals.tensorboard import ScalarPoint, TensorBoardTail, finite_or_none
from .store import Attempt, JobHistory, StateStore
from .workflows import Resolved, WorkflowError, resolve
from .workflows.sidechannel import ShimEvents
from .workflows.validate import VALIDATOR, expected_rsl_rl_format

CHECKPOINT_SCAN_INTERVAL = 2.0
PIDS_SCAN_INTERVAL = 2.0


@dataclass
class StopRequest:
    reason: str  # said in events and status
    then: str  # "stop" | "restart" | "rollback" | "shutdown" | "park"
    deadline: float
    killed: bool = False
    # for rollback: resume strictly before this iteration; new seed if asked
    before_iteration: int | None = None
    new_seed: bool = False
    # operator stops mark the job stopped across supervisor restarts; shutdown does not
    final: bool = True


class JobRunner:
    def __init__(self, cfg: JobConfig, runtime: Runtime, store: StateStore, state_dir: Path):
        self.cfg = cfg
        self.runtime = runtime
        self.store = store
        self.state_dir = state_dir
        self.history: JobHistory = load_history(store, cfg, state_dir)  # rebuilt from disk if damaged
        self.state = JobState.PENDING
        self.state_since = time.time()
        self.state_reason: str | None = None
        self.handle: Handle | None = None
        self.tail: TensorBoardTail | None = None
        self.stop: StopRequest | None = None
        self.backoff_until: float | None = None
        self.next_launch_reason = "initial"
        self.next_resume_before: int | None = None
        self.next_seed: int | None = None
        self.count_next_as_restart = False
        self.restart_reason_class = "exit_code"
        self._run_dirs_at_launch: set[str] = set()
        self._checkpoint: Checkpoint | None = None
        self._checkpoint_scanned_at = 0.0
        self._pids_scanned_at = 0.0
        self.iteration: int | None = None
        self.scalars: dict[str, float] = {}
        self.last_progress_time: float | None = None
        self.new_points: list[ScalarPoint] = []  # this tick's scalars, for the watchdogs
        self.pids_cache: list[int] = []
        self.parked_by: str | None = None  # a watchdog that stopped the job and will resume it
        self.gpu_check: Any = None  # (JobConfig) -> problem or None, from the GPU inventory
        self.log = log.bind(job=cfg.name)
        self.resolved: Resolved | None = None  # the job's trainer contract, resolved at each launch
        self.shim: ShimEvents | None = None  # what the launcher shim reports for the current attempt
        try:
            self.resolved = resolve(cfg)
        except WorkflowError:
            pass  # said when the job launches (and by check-config / doctor before that)

    # ---- bookkeeping -------------------------------------------------------------------
    def event(self, event: str, **fields: Any) -> None:
        self.store.append_event(self.cfg.name, event, **fields)
        warn = {"failed", "checkpoint_rejected", "config_rejected", "resume_mismatch", "start_failed",
                "tensorboard_damaged"}
        # an exit is news only when nobody asked for it and it was not a clean one
        if event == "exited" and not (fields.get("code") == 0 or fields.get("requested")):
            warn.add("exited")
        level = "warning" if event in warn else "info"
        getattr(self.log, level)(event, **fields)

    def set_state(self, new: JobState, reason: str | None = None) -> None:
        if new == self.state:
            return
        check_transition(self.cfg.name, self.state, new)
        self.event("state", old=self.state.value, new=new.value, reason=reason)
        self.state, self.state_since, self.state_reason = new, time.time(), reason

    def save(self) -> None:
        self.store.save(self.history)

    def settle(self, state: JobState, reason: str, remember: bool = True) -> None:
        """Come to rest in stopped/completed/failed; `remember` keeps it so across supervisor restarts."""
        if remember:
            self.history.final_state, self.history.final_reason = state.value, reason
            self.save()
        if state == JobState.FAILED:
            self.event("failed", reason=reason)
        self.set_state(state, reason)

    def lineage(self) -> list[Lineage]:
        return [Lineage(Path(a.run_dir) if a.run_dir else None,
                        a.resume_from["iteration"] if a.resume_from else None) for a in self.history.attempts]

    def newest_checkpoint(self, deep: bool = False, before_iteration: int | None = None,
                          rejected: list[tuple[Checkpoint, str]] | None = None) -> Checkpoint | None:
        """Newest complete checkpoint on the job's timeline; `deep` also asks whether its trainer can load it."""
        if self.resolved is None:
            return None
        wf = self.resolved.workflow
        validator = None
        if deep:
            expected = expected_rsl_rl_format(self.history.trainer_rsl_rl_version, self.resolved.generation.major,
                                              self.cfg.workflow == "builtin")
            validator = lambda c: VALIDATOR.problem(c, expected, wf.library)  # noqa: E731
        return choose_resume(self.lineage(), before_iteration, rejected, wf.layout, validator)

    # ---- startup -----------------------------------------------------------------------
    def recover(self) -> None:
        """After a supervisor (re)start: adopt a live trainer, or decide what the job should do."""
        attempt = self.history.current
        if attempt is not None and attempt.exit is None and attempt.handle:
            handle = self.runtime.adopt(self.cfg, attempt.handle) if attempt.runtime == self.runtime.name else None
            if handle is not None:
                self.handle = handle
                # the trainer may not have made its run dir yet: earlier attempts' dirs are not it
                self._run_dirs_at_launch = {Path(a.run_dir).name for a in self.history.attempts if a.run_dir}
                self.shim = ShimEvents(Path(attempt.shim_events)) if attempt.shim_events else None
                self._attach_run_dir(attempt)
                self.state = JobState.RUNNING
                self.state_since = time.time()
                self.event("adopted", attempt=attempt.number, pid=handle.pid, run_dir=attempt.run_dir)
                return
            status = ExitStatus(detail="trainer ended while the supervisor was not running")
            self._record_exit(attempt, status)
            self.next_launch_reason = status.describe()
            self.count_next_as_restart, self.restart_reason_class = True, "lost"
        final = self.history.final_state
        if final in ("stopped", "completed", "failed"):
            self.state = JobState(final)
            self.state_reason = self.history.final_reason
            return
        if not self.cfg.autostart and attempt is None:
            self.state, self.state_reason = JobState.STOPPED, "autostart = false"

    # ---- launching ---------------------------------------------------------------------
    def launch(self, reason: str) -> None:
        now = time.time()
        problem = self.gpu_check(self.cfg) if self.gpu_check else None
        if problem is not None:
            # a GPU this host does not have: retrying cannot help, so fail once with the reason
            self.settle(JobState.FAILED, f"cannot start: {problem}")
            return
        try:
            self.resolved = resolved = resolve(self.cfg)
        except WorkflowError as exc:
            # a missing train script or an unknown Isaac Lab generation: retrying cannot help either
            self.settle(JobState.FAILED, f"cannot start: {exc.key}: {exc.message}")
            return
        wf = resolved.workflow
        rejected: list[tuple[Checkpoint, str]] = []
        resume = self.newest_checkpoint(deep=True, before_iteration=self.next_resume_before, rejected=rejected)
        for ckpt, why in rejected:
            self.event("checkpoint_rejected", path=str(ckpt.path), iteration=ckpt.iteration, problem=why)
        if resume is None and any(why.startswith("incompatible") for _, why in rejected):
            # starting from scratch would silently throw the run away: stop and say why
            newest = rejected[0]
            self.settle(JobState.FAILED, f"no checkpoint this trainer can load: {newest[0].path.name} is {newest[1]}. "
                                         "Run the job with the trainer that wrote it (image / isaaclab_dir), or move "
                                         "its run dirs away and `isaacd start` to train from scratch")
            return
        if self.next_resume_before is not None and resume is None:
            self.event("rollback_without_checkpoint", before_iteration=self.next_resume_before,
                       detail="no complete checkpoint before the trouble; starting from scratch")
        if resume is not None and wf.is_complete(self.cfg, resume, None):
            self.settle(JobState.COMPLETED, f"max_iterations reached ({resume.path.name} holds "
                                            f"{wf.iterations_done(resume)} of {self.cfg.max_iterations})")
            return
        seed = self.next_seed
        if self.count_next_as_restart:
            h = self.history
            h.restarts += 1
            if self.restart_reason_class != "operator":  # an operator's restart is no crash loop
                h.restart_times.append(now)
            h.restarts_by_reason[self.restart_reason_class] = h.restarts_by_reason.get(self.restart_reason_class, 0) + 1
            h.last_restart_reason = reason
        self.history.final_state = self.history.final_reason = None
        number = self.history.attempts[-1].number + 1 if self.history.attempts else 1
        shim_events = launch.shim_events_path(self.state_dir, self.cfg, number)
        program = resolved.program(in_container=self.cfg.runtime != "process")
        attempt = Attempt(number=number, started_at=now, reason=reason,
                          resume_from=resume.as_json() if resume else None, runtime=self.runtime.name,
                          shim_events=str(shim_events) if program.shim else None)
        exp = wf.experiment_dir(self.cfg)
        self._run_dirs_at_launch = {p.name for p in exp.iterdir()} if exp.is_dir() else set()
        args = launch.trainer_args(self.cfg, resume, seed, resolved)
        if program.shim:
            shim_events.parent.mkdir(parents=True, exist_ok=True)
            shim_events.unlink(missing_ok=True)  # a number reused after history loss must not replay old news
            if self.cfg.runtime != "process":
                from .runtimes.quadlet import hand_to_container_user

                hand_to_container_user(self.cfg, [shim_events.parent])  # Isaac Lab 3 images run as uid 1000
        spec = LaunchSpec(
            job=self.cfg,
            argv=program.argv(args),
            trainer_args=args,
            env=launch.trainer_env(self.cfg, shim_events if program.shim else None),
            cwd=launch.workdir(self.cfg, self.state_dir),
            log_path=self.state_dir / "logs" / f"{self.cfg.name}.log",
            attempt=attempt.number,
        )
        self.set_state(JobState.STARTING, reason)
        self.history.attempts.append(attempt)
        try:
            self.handle = self.runtime.start(spec)
        except Exception as exc:  # noqa: BLE001 - any launch failure is a failed attempt, not a crash of ours
            self.handle = None
            self.event("start_failed", attempt=attempt.number, error=str(exc))
            status = ExitStatus(code=None, detail=f"failed to start: {exc}")
            self._record_exit(attempt, status)  # ended, so the backoff ladder counts it
            self._after_exit(attempt, status)
            return
        attempt.handle = dict(self.handle.state)
        self.save()
        self.tail = None
        self.shim = ShimEvents(shim_events) if program.shim else None
        self.new_points = []
        self.event("started", attempt=attempt.number, reason=reason, pid=self.handle.pid,
                   resume_from=attempt.resume_from, seed=seed if seed is not None else self.cfg.seed,
                   contract=wf.contract, argv=spec.argv)
        self.next_launch_reason, self.next_resume_before, self.next_seed = "initial", None, None
        self.count_next_as_restart = False

    def _attach_run_dir(self, attempt: Attempt) -> None:
        if attempt.run_dir:
            self.tail = TensorBoardTail(Path(attempt.run_dir))
            return
        found: Path | None = None
        if self.shim is not None and self.shim.report.run_dir:
            found = launch.host_path(self.cfg, self.shim.report.run_dir)  # rank 0's run dir, as the trainer said
        elif self.shim is None and self.resolved is not None:
            found = self._guess_run_dir()
        if found is not None:
            attempt.run_dir = str(found)
            self.save()
            self.tail = TensorBoardTail(found)
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
                         and p.name not in self._run_dirs_at_launch and name_re.match(p.name))
        except OSError:
            return None
        if self.cfg.ranks > 1:
            new = [p for p in new if any(p.glob("events.out.tfevents.*"))]
        return new[-1] if new else None

    # ---- the tick ------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        self.new_points = []
        if self.state in (JobState.STARTING, JobState.RUNNING, JobState.STOPPING):
            self._watch(now)
        elif self.state == JobState.BACKING_OFF and self.backoff_until is not None and now >= self.backoff_until:
            self.launch(self.next_launch_reason)
        elif self.state == JobState.PENDING:
            self.launch(self.next_launch_reason)
        if now - self._checkpoint_scanned_at >= CHECKPOINT_SCAN_INTERVAL:
            self._checkpoint_scanned_at = now
            self._checkpoint = self.newest_checkpoint()

    def _poll_shim(self, attempt: Attempt) -> None:
        """Fold in what the shim said: the run dir, checkpoints as they land, which checkpoint was loaded."""
        if self.shim is None:
            return
        for ev in self.shim.poll():
            kind = ev.get("event")
            if kind == "checkpoint_saved" and ev.get("path"):
                path = launch.host_path(self.cfg, str(ev["path"]))
                VALIDATOR.prewarm(path)  # deep validation off the tick, before any resume needs it
                self._checkpoint_scanned_at = 0.0  # status shows it at the next scan, not in 2 s
            elif kind == "checkpoint_loaded":
                wanted = attempt.resume_from["path"] if attempt.resume_from else None
                got = str(launch.host_path(self.cfg, str(ev.get("path"))))
                if wanted is not None and Path(got) != Path(wanted):
                    self.event("resume_mismatch", attempt=attempt.number, chosen=wanted, loaded=got,
                               detail="the trainer loaded another checkpoint than isaacd chose")
            elif kind in ("runner_started", "shim_started") and self.shim.report.rsl_rl_version:
                self.history.trainer_rsl_rl_version = self.shim.report.rsl_rl_version
            elif kind == "stopped":
                saved = ev.get("checkpoint")
                self.event("trainer_saved_on_stop", attempt=attempt.number, iteration=ev.get("iteration"),
                           checkpoint=str(launch.host_path(self.cfg, str(saved))) if saved else None)

    def _watch(self, now: float) -> None:
        assert self.handle is not None
        attempt = self.history.current
        assert attempt is not None
        status = self.runtime.poll(self.handle)
        self._poll_shim(attempt)
        if self.tail is None:
            self._attach_run_dir(attempt)
        if self.tail is not None:
            self.new_points = self.tail.poll(now)
            for note in self.tail.take_damage():  # a torn/overwritten record was skipped: say so
                self.event("tensorboard_damaged", **note)
            prog = self.tail.progress
            if self.new_points:
                self.last_progress_time = now
                self.iteration = prog.last_step
                self.scalars.update(prog.latest)
                if self.state == JobState.STARTING:
                    self.set_state(JobState.RUNNING, f"training at iteration {prog.last_step}")
        if status is None:
            if now - self._pids_scanned_at >= PIDS_SCAN_INTERVAL:  # a /proc walk: not every tick
                self._pids_scanned_at = now
                self.pids_cache = self.runtime.pids(self.handle)
            if self.stop is not None and not self.stop.killed and now >= self.stop.deadline:
                self.event("stop_timeout", detail="trainer ignored SIGINT; sending SIGKILL")
                self.runtime.kill(self.handle)
                self.stop.killed = True
            return
        self.pids_cache, self._pids_scanned_at = [], 0.0
        status = exit_with_log_tail(status, self.handle)  # "exited with code 1: OSError: ... No space left"
        self._record_exit(attempt, status)
        self._after_exit(attempt, status)

    def _record_exit(self, attempt: Attempt, status: ExitStatus) -> None:
        attempt.ended_at = time.time()
        attempt.exit = status.as_json()
        # a stopping trainer saves a last checkpoint: look once, for the backoff ladder, completion and status
        self._poll_shim(attempt)  # its last words: the checkpoint a stop saved, the run dir of a short run
        if self.tail is None and attempt.run_dir is None:
            self._attach_run_dir(attempt)
        self._checkpoint, self._checkpoint_scanned_at = self.newest_checkpoint(), time.time()
        attempt.checkpoint_at_exit = self._checkpoint.iteration if self._checkpoint else None
        if self.handle is not None:
            try:
                self.runtime.cleanup(self.handle)
            except Exception as exc:  # noqa: BLE001
                self.log.warning("cleanup_failed", error=str(exc))
        self.handle = None
        attempt.last_iteration = self.iteration
        h = self.history
        if self.iteration is not None:  # what status shows after a supervisor restart, before new events arrive
            h.last_iteration = self.iteration
            h.last_mean_reward = finite_or_none(self.scalars.get("Train/mean_reward"))
            h.last_fps = finite_or_none(self.scalars.get("Perf/total_fps"))
        self.save()
        self.event("exited", attempt=attempt.number, **status.as_json(), iteration=self.iteration,
                   requested=self.stop is not None)

    def reached_max(self) -> bool:
        """Called after _record_exit, which refreshed the newest checkpoint."""
        if self.resolved is None:
            return False
        if self.tail is not None:
            self.tail.poll(time.time())  # the last iterations may have landed after the last tick
        last = self.tail.progress.last_step if self.tail else None
        return self.resolved.workflow.is_complete(self.cfg, self._checkpoint, last)

    def _after_exit(self, attempt: Attempt, status: ExitStatus) -> None:
        stop, self.stop = self.stop, None
        if stop is not None:
            if stop.then in ("stop", "shutdown", "park"):
                self.settle(JobState.STOPPED, stop.reason, remember=stop.final)
                return
            # restart / rollback decided by an operator or a watchdog: go again now, no backoff
            self.next_launch_reason = stop.reason
            self.next_resume_before = stop.before_iteration
            self.next_seed = random.randrange(2**31) if stop.new_seed else None
            self.count_next_as_restart = True
            self.restart_reason_class = "watchdog" if stop.reason.startswith("watchdog") else "operator"
            self.backoff_until = time.time()
            self.set_state(JobState.BACKING_OFF, stop.reason)
            return
        if status.success and self.reached_max():
            self.settle(JobState.COMPLETED, "max_iterations reached")
            return
        if status.external_stop:
            self.settle(JobState.STOPPED, f"operator stop outside isaacd ({status.describe()})")
            return
        reason = status.describe() if not status.success else "exited with code 0 before max_iterations"
        self._schedule_restart(reason, status.reason_class)

    def _schedule_restart(self, reason: str, reason_class: str) -> None:
        policy = self.cfg.restart
        now = time.time()
        recent = [t for t in self.history.restart_times if now - t <= policy.window]
        if len(recent) >= policy.max_restarts:
            self.settle(JobState.FAILED, f"restart limit reached: {len(recent)} restarts within {policy.window:g} s "
                                         f"(max_restarts = {policy.max_restarts}); last: {reason}")
            return
        delay = self._backoff_delay(now)
        self.backoff_until = now + delay
        self.next_launch_reason = reason
        self.count_next_as_restart, self.restart_reason_class = True, reason_class
        self.event("restart_scheduled", reason=reason, delay_seconds=round(delay, 3))
        self.set_state(JobState.BACKING_OFF, f"{reason}; restarting in {delay:.1f} s")

    @staticmethod
    def _moved_forward(a: Attempt) -> bool:
        """The attempt left a newer checkpoint than it started from: resuming gains ground, no crash loop."""
        start = a.resume_from["iteration"] if a.resume_from else -1
        return a.checkpoint_at_exit is not None and a.checkpoint_at_exit > start

    def _backoff_delay(self, now: float) -> float:
        """Exponential in the number of consecutive attempts that neither ran long nor saved a newer
        checkpoint; an attempt that made progress resets the ladder (max_restarts still bounds loops)."""
        policy = self.cfg.restart
        quick = 0
        for a in reversed(self.history.attempts):
            if a.ended_at is None or a.ended_at - a.started_at >= policy.reset_after or self._moved_forward(a):
                break
            quick += 1
        return min(policy.backoff_initial * policy.backoff_factor ** max(quick - 1, 0), policy.backoff_max)

    # ---- commands (operator and watchdogs) ---------------------------------------------
    def request_stop(self, reason: str, then: str = "stop", before_iteration: int | None = None,
                     new_seed: bool = False, final: bool = True) -> str:
        if self.state in (JobState.STARTING, JobState.RUNNING) and self.handle is not None:
            self.stop = StopRequest(reason, then, time.time() + self.cfg.stop_timeout,
                                    before_iteration=before_iteration, new_seed=new_seed, final=final)
            self.runtime.signal(self.handle, signal.SIGINT)
            self.event("stopping", reason=reason, then=then, grace_seconds=self.cfg.stop_timeout)
            self.set_state(JobState.STOPPING, reason)
            return "stopping"
        if self.state == JobState.STOPPING and self.stop is not None:
            if then == "stop":
                self.stop.then, self.stop.reason = "stop", reason
            return "already stopping"
        if then in ("restart", "rollback"):
            return self.start(reason)
        if self.state in (JobState.PENDING, JobState.BACKING_OFF):
            self.settle(JobState.STOPPED, reason, remember=final)
            return "stopped"
        return f"not running ({self.state.value})"

    def start(self, reason: str = "operator start") -> str:
        if self.state.active or self.state == JobState.PENDING:
            return f"already {self.state.value}"
        self.next_launch_reason = reason
        self.count_next_as_restart = reason != "operator start"
        self.restart_reason_class = "watchdog" if reason.startswith("watchdog") else "operator"
        self.backoff_until = None
        if self.state == JobState.BACKING_OFF:
            self.launch(reason)
        else:
            self.set_state(JobState.PENDING, reason)
        return "starting"

    # ---- read side -------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        h = self.history
        attempt = h.current
        desc = self.runtime.describe(self.handle) if self.handle else {}
        prog = self.tail.progress if self.tail else None
        ckpt = self._checkpoint
        return {
            "name": self.cfg.name,
            "state": self.state.value,
            "state_since": self.state_since,
            "state_reason": self.state_reason,
            "runtime": self.cfg.runtime,
            "workflow": self.cfg.workflow,
            "contract": self.resolved.workflow.contract if self.resolved else None,
            "task": self.cfg.task,
            "device": self.cfg.device,
            "gpus": self.cfg.gpus if self.cfg.gpus == "all" else list(self.cfg.gpus),
            "pid": desc.get("pid"),
            "pids": list(self.pids_cache),
            "cgroup": desc.get("cgroup"),
            "container_id": desc.get("container_id"),
            "unit": desc.get("unit"),
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
            "last_progress_time": self.last_progress_time,
            "checkpoint": ckpt.as_json() if ckpt else None,
            "restarts": h.restarts,
            "last_restart_reason": h.last_restart_reason,
            "restarts_by_reason": dict(h.restarts_by_reason),
            "rollbacks": h.rollbacks,
            "run_dir": attempt.run_dir if attempt else None,
            "attempt": attempt.number if attempt else 0,
            "started_at": attempt.started_at if attempt and self.state.active else None,
            "backoff_until": self.backoff_until if self.state == JobState.BACKING_OFF else None,
            "log_path": str(self.state_dir / "logs" / f"{self.cfg.name}.log"),
            "watchdogs": {},
            "watchdog_trips": [{"watchdog": k.split("/")[0], "action": k.split("/")[1], "count": v}
                               for k, v in sorted(h.watchdog_trips.items())],
        }
