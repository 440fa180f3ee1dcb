"""The eval keeper (issue 41; /work/notes/eval-design.md C): one per runner, like the spare keeper. Each tick it looks
at the job's complete checkpoints (its timeline's run dirs, up to the observer's newest complete one) and its training
reward, asks `evals/choose.next_eval` which checkpoint comes next, and runs ONE evaluation at a time: the job's own
cold-start command line through the shim in eval mode (attempt/eval_launch.py, the launch pipeline's Role.EVAL),
prepared on a worker (launch/worker.py) and started by the runner's interpreter (`runner.apply_evals`: the keeper
decides, the interpreter acts, as for the spare). On its exit the keeper reads the result JSON beside the checkpoint
(evals/result.py), records it (evals/record.py, `<state_dir>/evals/<job>.json`) and says so in the journal:
`eval_started`, `eval_done`, `eval_failed` (reason, retry time), `eval_given_up`, `eval_best`, `eval_stopped`.

An evaluation never touches the trainer, the jobs machine or its restart counts:
- a crash, a kill from outside, a result it could not write: a failed attempt, retried with choose.py's backoff
  and given up after `retries`; one past `deadline_seconds` is killed and counts the same;
- a torn checkpoint (observations/checkpoints.checkpoint_problem) is refused before launch and given up at once;
- killed and evaluated again later, not counted as a failure (`eval_stopped`): the job stopped or failed (a GPU
  evaluation also whenever the job is not starting or running: its GPU may be given away), the queue's DropSpare hold
  (the evaluation's GPU memory counts with the spare's: status/signals.py), a supervisor shutdown, [jobs.eval]
  removed. After a completed job's end its remaining checkpoints are still evaluated.
- A supervisor restart: the token of a running evaluation is saved before its start (`<state_dir>/evals/
  <job>.token`); the next supervisor finds the process by it (runtime.find) and kills it, and the checkpoint is
  evaluated again from scratch (its attempt is counted: an evaluation a crash keeps killing is given up).
GPU evaluations start only where the GPU sampler shows `gpu_memory` free on the job's first GPU (spare_mode.gpu_rooms).
Runtimes: the process runtime only (podman needs a container name of its own: not yet).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from ..config.eval import EvalConfig
from ..config.schema import JobConfig
from ..config.sizes import gib
from ..daemon_log import log
from ..evals import pacing
from ..evals.choose import KEEP_NEWEST, EvalTask, backoff, next_eval, plan, should_give_up, waiting_count
from ..evals.record import EvalRecord, EvalStore
from ..evals.result import one_line, read_result, result_path, video_reason
from ..evals.types import EvalResult, EvalsStatus
from ..gpu.snapshot import GpuSnapshot
from ..jobs.model import JobState
from ..launch.context import EvalLaunch
from ..launch.contributions import Refusal
from ..launch.pipeline import prepare
from ..launch.worker import INLINE_WAIT, Preparation
from ..observations.checkpoints import checkpoint_problem, list_checkpoints, timeline
from ..os_seam.oscalls import HOST_OS, OsCalls
from ..runtimes.base import ExitStatus, Handle, Runtime
from .eval_effects import EvalEffect, KillEval, StartEval
from .eval_launch import eval_context, eval_log_path, evaluation, first_gpu
from .exit_tail import key_line, read_output_tail
from .setting import JobSetting, lineage
from .spare_mode import gpu_rooms
from .spare_release import Releasing

EVAL_RUNTIMES = ("process",)
SCAN_INTERVAL = 2.0  # seconds between looks at the job's run dirs for checkpoints (the observer's interval)
NOT_STARTED_RETRY = 30.0  # a preparation that failed for a reason of no checkpoint's (the owner, a directory)
REWARD_TAG = "Train/mean_reward"
ON_GPU_STATES = (JobState.STARTING, JobState.RUNNING)  # a GPU evaluation runs beside a trainer on the job's GPU
OFF_STATES = (JobState.STOPPED, JobState.FAILED)  # no evaluation at all


@dataclass(frozen=True)
class _Prepared:
    task: EvalTask
    token: str
    launch: EvalLaunch


@dataclass(frozen=True)
class _Refused:
    """The preparation refused the evaluation: `given_up` at once (a torn checkpoint), else a failed attempt."""

    task: EvalTask
    reason: str
    given_up: bool = False


@dataclass
class _Running:
    handle: Handle
    prepared: _Prepared
    started: float  # monotonic
    started_wall: float


class EvalKeeper:
    """Runs a job's evaluations, one at a time, and keeps their record."""

    def __init__(self, setting: JobSetting, runtime: Runtime, state_dir: Path, job: Any, observer: Any,
                 wall: Callable[[], float], oscalls: OsCalls = HOST_OS,
                 gpu_snapshot: Callable[[], GpuSnapshot] | None = None, backup: Callable[[], Any] | None = None):
        # `job`: the runner's record (attempt/record.py: the job's history and journal); `observer`: its observer
        # (the newest complete checkpoint, the TensorBoard points of this tick, the trainer's pids)
        self.setting, self.runtime, self.state_dir, self.job, self.observer = setting, runtime, state_dir, job, observer
        self.wall, self.oscalls, self.gpu_snapshot, self.backup = wall, oscalls, gpu_snapshot, backup
        self.store = EvalStore(state_dir)
        self._record: EvalRecord | None = None
        self.running: _Running | None = None
        self._preparing: Preparation[StartEval | _Refused | str] | None = None
        self.releasing = Releasing()  # killed or ended evaluations until their runtime has reaped them
        self.rewards: dict[int, float] = {}
        self.checkpoints: list[tuple[int, str]] = []
        self._scanned_at = float("-inf")
        self._scanned_for: Any = None  # the observer's newest complete checkpoint at that scan
        self.held_until, self.held_reason = float("-inf"), None  # type: tuple[float, str | None]
        self.not_before = float("-inf")
        self.now = 0.0
        self._drained = False
        self.problem: str | None = None  # why no evaluation can start now (said in the status)
        self.video_unavailable: str | None = None
        self.changed = 0  # one more at each change of what the status shows (runner.still_key)
        self._pinned: tuple[Any, int] | None = None
        self.pacer = pacing.Pacer()  # max_training_cost: each evaluation's measured cost, the next one's wait
        self.log = log.bind(job=setting.cfg.name)

    @property
    def ecfg(self) -> EvalConfig | None:
        return self.setting.cfg.eval

    @property
    def record(self) -> EvalRecord:
        if self._record is None:
            loaded = self.store.load(self.setting.cfg.name, self.wall())
            self._record = loaded.record
            if loaded.problem:
                self._event("eval_record_reset", reason=loaded.problem)
        return self._record

    def _event(self, name: str, **fields: Any) -> None:
        self.changed += 1
        self.job.event(name, **fields)

    @property
    def busy(self) -> bool:
        """An evaluation runs, is prepared or is not reaped yet: the runner is not still (runner.still)."""
        return self.running is not None or self._preparing is not None or bool(self.releasing)

    def idle(self, state: JobState) -> bool:
        """Nothing for the tick to do while the job's state and config stay as they are (runner._quiet)."""
        if self.busy:
            return False
        if self.pacer.pending is not None:  # its cost is measured from the trainer's next points
            return False
        e = self.ecfg
        # drained: nothing waits among the checkpoints as of the observer's newest (a newer one: look again)
        return e is None or state in OFF_STATES or self.not_before == float("inf") \
            or (self._drained and self._scanned_for == self.observer.checkpoint) \
            or (e.on_gpu and state not in ON_GPU_STATES)

    # ---- life: the keeper decides, the runner's interpreter acts (runner.apply_evals) ---------------------------
    def tick(self, state: JobState, now: float) -> list[EvalEffect]:
        self.now = now  # monotonic: an evaluation started by this tick's effects counts its deadline from here
        self.releasing.poll()
        e = self.ecfg
        if e is not None and e.every == "best":  # only "best" reads the training reward
            self._collect_rewards()
        self.pacer.observe(self.job.history.current, self.observer.live.new_points)
        self._pin_best()
        run = self.running
        if run is not None:
            why = self._stop_reason(state, now)
            if why is not None:
                return [KillEval(run.handle, why)]
            status = self.runtime.poll(run.handle)
            if status is not None:
                self._ended(run, status)
            elif e is not None and now - run.started > e.deadline_seconds:
                return [KillEval(run.handle, f"ran past deadline_seconds = {e.deadline_seconds:g} s", failure=True)]
            return []
        if e is None or state in OFF_STATES:
            self._discard_preparation()
            self.pacer.pending = None
            return []
        if (cost := self.pacer.measure(e.cost_budget, state is JobState.RUNNING, self.wall())) is not None:
            self._event("eval_cost", **self.pacer.event(cost, e.cost_budget))
        elif (why := self.pacer.take_unmeasured()) is not None:
            self._event("eval_cost_unmeasured", reason=why)
        if self._preparing is None:
            task = self._next(e, state, now)
            if task is None:
                return []
            p = self._preparing = Preparation(lambda say: self._prepare(e, task),
                                              name=f"isaacd-eval-{self.setting.cfg.name}")
            got = p.answer(INLINE_WAIT)
        else:
            got = self._preparing.answer(0.0)
        if got is None:
            return []
        self._preparing = None
        if isinstance(got, StartEval):
            if self._stop_reason(state, now) is not None or now < self.not_before:  # stopped meanwhile
                _forget_token(self.store, self.setting.cfg.name)
                return []
            return [got]
        if isinstance(got, _Refused):
            self._failed(got.task, got.reason, given_up=got.given_up)
        else:
            self.problem, self.not_before = got, now + NOT_STARTED_RETRY
            self.log.warning("eval_not_started", error=got)
        return []

    def _stop_reason(self, state: JobState, now: float) -> str | None:
        """Why a running (or just prepared) evaluation must go now, or None."""
        e = self.ecfg
        if e is None:
            return "[jobs.eval] removed"
        if state in OFF_STATES or (e.on_gpu and state not in ON_GPU_STATES):
            return f"the job is {state.value}"
        if now < self.held_until and e.on_gpu:  # a CPU evaluation holds no GPU memory: the hold is not about it
            return self.held_reason or "the queue needs its GPU memory"
        return None

    def _next(self, e: EvalConfig, state: JobState, now: float) -> EvalTask | None:
        """The next evaluation, if one may start now."""
        if now < self.not_before or self.pacer.pending is not None or self._stop_reason(state, now) is not None \
                or (state is JobState.RUNNING and self.pacer.until(e.cost_budget, self.wall()) is not None):
            return None
        cfg = self.setting.cfg
        if cfg.runtime not in EVAL_RUNTIMES or cfg.in_container:
            self.problem, self.not_before = (f'runtime = "{cfg.runtime}": evaluations run on the process runtime '
                                             "(for now)"), float("inf")
            return None
        if now - self._scanned_at >= SCAN_INTERVAL or self._scanned_for != self.observer.checkpoint:
            self._scanned_at, self._scanned_for = now, self.observer.checkpoint
            self.checkpoints = self._complete_checkpoints()
        if e.on_gpu:
            snap = self.gpu_snapshot() if self.gpu_snapshot is not None else None
            self.problem = gpu_room_problem(cfg, list(self.observer.live.pids), snap, e.gpu_memory_bytes or 0)
            if self.problem is not None:
                return None
        self.problem = None
        rec = self.record
        skipped = rec.skip(plan(e, self.checkpoints, self.rewards, rec).skipped)
        if skipped:  # more than choose.KEEP_NEWEST waited: the newest ones go first, these never
            self._save()
            self._event("eval_skipped", iterations=list(skipped), reason="newer checkpoints waited (the newest "
                                                                            f"{KEEP_NEWEST} are evaluated)")
        task = next_eval(e, self.checkpoints, self.rewards, rec, self.wall())
        # nothing chosen waits (none in its backoff either): a job at rest has nothing more to evaluate
        self._drained = task is None and waiting_count(e, self.checkpoints, self.rewards, rec) == 0
        return task

    def _complete_checkpoints(self) -> list[tuple[int, str]]:
        return complete_checkpoints(self.observer.checkpoint, self.setting.resolved, lineage(self.job.history))

    def _collect_rewards(self) -> None:
        attempt = self.job.history.current
        for p in self.observer.live.new_points:
            if p.tag == REWARD_TAG and attempt is not None:
                it = self.observer.job_iteration(p.step, attempt)
                if it is not None:
                    self.rewards[it] = p.value

    def _prepare(self, e: EvalConfig, task: EvalTask) -> StartEval | _Refused | str:
        """On the worker: the checkpoint checked whole, the token saved, then the launch pipeline."""
        path = Path(task.checkpoint)
        problem = checkpoint_problem(path)
        if problem is not None:
            return _Refused(task, f"{path.name} cannot be evaluated: {problem}", given_up=True)
        cfg, resolved = self.setting.cfg, self.setting.resolved
        if resolved is None:
            return "the job's workflow is not resolved yet"
        try:
            owner = self.setting.owner()
            program = resolved.program(in_container=False)
            if not program.shim:  # the shim turns a train script into its play path: without it, it would train
                return f"workflow = \"{cfg.workflow}\": its evaluation through isaacd's shim is not built yet"
            result_path(path).unlink(missing_ok=True)  # a stale result must not pass for this evaluation's
        except Exception as exc:  # noqa: BLE001 - an owner problem, a workflow error, a directory: said, retried
            return f"{type(exc).__name__}: {exc}"
        token = uuid.uuid4().hex
        launch = evaluation(e, cfg, path, task.iteration, resolved, e.on_gpu, tuple(self.observer.live.pids))
        spec = prepare(eval_context(cfg, self.state_dir, resolved, program, launch, token, owner), self.oscalls)
        if isinstance(spec, Refusal):
            return spec.reason
        try:  # saved before the start: how the next supervisor finds (and kills) it
            _save_token(self.store, cfg.name, token, task.iteration)
        except OSError as exc:
            return f"cannot save the evaluation's token: {exc.strerror}"
        return StartEval(spec, _Prepared(task, token, launch))

    def _discard_preparation(self) -> None:
        p = self._preparing
        if p is not None and p.done:
            self._preparing = None
            _forget_token(self.store, self.setting.cfg.name)

    # ---- what the interpreter says -------------------------------------------------------------------------------
    def started(self, start: StartEval, handle: Handle) -> None:
        p: _Prepared = start.prepared
        self.running = _Running(handle, p, self.now, self.wall())
        self.record.started(p.task.iteration)
        self._save()
        self._event("eval_started", iteration=p.task.iteration, checkpoint=p.task.checkpoint, pid=handle.pid,
                    attempt=p.task.attempt, where=self._where(p.launch))

    def start_failed(self, start: StartEval, exc: Exception) -> None:
        _forget_token(self.store, self.setting.cfg.name)
        self._failed(start.prepared.task, f"failed to start: {exc}")

    def killed(self, kill: KillEval, error: Exception | None = None) -> None:
        if error is not None:
            self.log.warning("eval_kill_failed", error=str(error))
        run = self.running
        if kill.leftover:
            self._event("eval_stopped", pid=kill.handle.pid, reason=kill.reason)
            self.releasing.add(self.runtime, kill.handle)
            _forget_token(self.store, self.setting.cfg.name)
            return
        if run is None or run.handle is not kill.handle:
            return
        self._drop(run)
        self.pacer.ended(run.started_wall, self.wall(), measure=False)  # not a usual iteration time around it
        if kill.failure:
            self._failed(run.prepared.task, kill.reason)
        else:
            self._event("eval_stopped", iteration=run.prepared.task.iteration, pid=kill.handle.pid, reason=kill.reason)

    def hold(self, reason: str, until: float) -> None:
        """No evaluation until `until` (monotonic): the queue needs the job's extra GPU memory (DropSpare)."""
        self.held_reason, self.held_until = reason, max(self.held_until, until)

    def dismiss(self, why: str) -> list[EvalEffect]:
        """The running evaluation is to go (a shutdown, a runtime change, the job removed): its kill; no evaluation
        starts again in this runner (a runtime change is rare: the next supervisor start evaluates again)."""
        self.not_before, self.problem = float("inf"), f"evaluations stopped: {why}"
        self._discard_preparation()
        return [] if self.running is None else [KillEval(self.running.handle, why)]

    def dismiss_leftover(self) -> list[EvalEffect]:
        """A previous supervisor's evaluation, found by the token it saved: killed (evaluated again later)."""
        token = _saved_token(self.store, self.setting.cfg.name)
        finder = getattr(self.runtime, "find", None)
        if token is None:
            return []
        handle = finder(self.setting.cfg, token) if finder is not None else None
        if handle is None:
            _forget_token(self.store, self.setting.cfg.name)
            return []
        return [KillEval(handle, "left running by the previous supervisor: evaluated again", leftover=True)]

    # ---- outcomes -----------------------------------------------------------------------------------------------
    def _ended(self, run: _Running, status: ExitStatus) -> None:
        self._drop(run)
        self.pacer.ended(run.started_wall, self.wall())  # its cost: measured from the trainer's next points
        task, result = run.prepared.task, run.prepared.launch.result
        got = read_result(result, self.wall(), task.iteration)
        if isinstance(got, EvalResult) and status.code == 0:
            self._done(got, result)
            return
        reason = got if isinstance(got, str) and not got.startswith("no result at") else status.describe()
        if isinstance(got, str) and got.startswith("no result at"):
            tail = key_line(read_output_tail(eval_log_path(self.state_dir, self.setting.cfg.name),
                                             run.handle.state.get("log_offset", 0)))
            reason = f"{status.describe()}{f': {tail}' if tail else ''} (no result written)"
        self._failed(task, one_line(reason))

    def _done(self, res: EvalResult, result_file: str) -> None:
        previous = self.record.best
        new_best = self.record.finished(res)
        self._save()
        if self.ecfg is not None and self.ecfg.video:  # the newest result's reason (None once one has a video), as
            self.video_unavailable = video_reason(result_file)  # `isaacd doctor` reads it (cli/doctor_eval.py)
        self._event("eval_done", iteration=res.iteration, checkpoint=res.checkpoint, return_mean=res.return_mean,
                    return_std=res.return_std, length_mean=res.length_mean, episodes=res.episodes,
                    success_rate=res.success_rate, duration_seconds=res.duration_seconds)
        if new_best:
            self._event("eval_best", iteration=res.iteration, checkpoint=res.checkpoint, return_mean=res.return_mean,
                        previous=previous)
            self._pin_best()

    def _failed(self, task: EvalTask, reason: str, given_up: bool = False) -> None:
        e, rec, at = self.ecfg, self.record, self.wall()
        n = rec.failed(task.iteration, reason, at)
        give_up = given_up or (e is not None and should_give_up(e, rec, task.iteration))
        if give_up:
            rec.give_up(task.iteration, reason, at)
        self._save()
        self._event("eval_failed", iteration=task.iteration, checkpoint=task.checkpoint, reason=reason, attempt=n,
                    retry_at=None if give_up else round(at + backoff(n), 3))
        if give_up:
            self._event("eval_given_up", iteration=task.iteration, checkpoint=task.checkpoint, reason=reason,
                        failures=n)

    def _drop(self, run: _Running) -> None:
        if self.running is run:
            self.running = None
        self.releasing.add(self.runtime, run.handle)
        _forget_token(self.store, self.setting.cfg.name)

    def _save(self) -> None:
        self.changed += 1
        try:
            self.store.save(self.record)
        except OSError as exc:  # kept in memory; saved again at the next change
            self.log.warning("eval_record_not_saved", error=str(exc))

    def _pin_best(self) -> None:
        """The best checkpoint kept in the bucket whatever `keep` says (backup/keeper.py `pin`)."""
        keeper = self.backup() if self.backup is not None else None
        best = self._record.best if self._record is not None else None
        if keeper is None or best is None or self._pinned == (keeper, best):
            return
        keeper.pin(frozenset({best}))
        self._pinned = (keeper, best)

    # ---- read side ----------------------------------------------------------------------------------------------
    def _where(self, launch: EvalLaunch | None = None) -> str:
        e = self.ecfg
        return "" if e is None else e.where(launch.gpu if launch is not None else None)

    def gpu_bytes(self) -> int:
        """The GPU memory the running evaluation holds on the job's GPU (counted as the job's by the queue)."""
        e, run = self.ecfg, self.running
        return (e.gpu_memory_bytes or 0) if e is not None and run is not None and run.prepared.launch.gpu else 0

    def status(self) -> EvalsStatus | None:
        e = self.ecfg
        if e is None:
            return None
        rec, run = self.record, self.running
        running = run.prepared.task.iteration if run is not None else None
        last, newest = rec.last_failure, rec.last_result
        # the newest failure matters while no result came after it; what stops every evaluation matters always
        failure = last.reason if last is not None and (newest is None or last.at > newest.finished_at) else None
        return EvalsStatus(every=e.every_text, last=newest, best=rec.best_result, running=running,
                           running_since=run.started_wall if run is not None else None,
                           waiting=waiting_count(e, self.checkpoints, self.rewards, rec, running),
                           failed=rec.failure_count(), given_up=tuple(sorted(rec.given_up)),
                           done=len(rec.results), last_error=self.problem or failure,
                           video_unavailable=self.video_unavailable,
                           where=self._where(run.prepared.launch if run is not None else None),
                           **asdict(self.pacer.shown(e.cost_budget, self.wall(), run is None)))


def gpu_room_problem(cfg: JobConfig, trainer_pids: list[int], snap: GpuSnapshot | None, need: int) -> str | None:
    """Why a GPU evaluation cannot start now: the job's first GPU has not `need` bytes free as the GPU sampler last
    saw it (spare_mode.gpu_rooms), or the sampler does not show it; None: it fits."""
    rooms = gpu_rooms(cfg, trainer_pids, snap)
    if not rooms:
        return "waiting for the GPU sampler to show the job's GPU"
    room = next((r for r in rooms if r.where == f"GPU {first_gpu(cfg)}"), rooms[0])  # the one it will run on
    if room.free is None or room.free < need:
        return (f"waiting for {gib(need)} free on the job's {room.where} "
                f"(free: {'unknown' if room.free is None else gib(room.free)})")
    return None


def _token_path(store: EvalStore, job: str) -> Path:
    return store.dir / f"{job}.token"


def _save_token(store: EvalStore, job: str, token: str, iteration: int) -> None:
    store.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = _token_path(store, job)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, json.dumps({"token": token, "iteration": iteration}).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _saved_token(store: EvalStore, job: str) -> str | None:
    try:
        raw = json.loads(_token_path(store, job).read_text())
    except (OSError, ValueError):
        return None
    token = raw.get("token") if isinstance(raw, dict) else None
    return token if isinstance(token, str) and token else None


def _forget_token(store: EvalStore, job: str) -> None:
    try:
        _token_path(store, job).unlink()
    except OSError:
        pass


def complete_checkpoints(newest: Any, resolved: Any, runs: Any) -> list[tuple[int, str]]:
    """The job's trainer checkpoints (model_N.pt, not the shim's snapshots) up to its newest complete one (`newest`,
    the observer's), over its timeline's run dirs (`runs`: the lineage of its attempts)."""
    if newest is None or resolved is None:
        return []
    layout = resolved.workflow.layout
    found: dict[int, str] = {}
    for run_dir, offset, bound in timeline(runs):
        for c in list_checkpoints(run_dir, layout, offset):
            if c.iteration <= newest.iteration and (bound is None or c.iteration <= bound) \
                    and not c.path.name.startswith("isaacd_snapshot_"):
                found.setdefault(c.iteration, str(c.path))
    return sorted(found.items())
