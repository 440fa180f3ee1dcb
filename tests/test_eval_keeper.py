"""The eval keeper (attempt/evals.py, issue 41) without a process: the job's real setting, record and checkpoints on
disk, the fake runtime, and the runner's interpreter (`apply_evals`) carrying out what the keeper decides. What a
user would notice: one evaluation at a time, its score and the best in the status and the journal, a deadline's kill
counted as a failure while a stop, the queue's hold or a shutdown only reschedules it, a torn checkpoint never
launched, a previous supervisor's evaluation found by its token and killed."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from types import SimpleNamespace

from backup_fakes import fake_checkpoint
from test_attempt_planner import JOB, World
from test_spare_mode import gpu_snapshot

from isaacd.attempt.eval_effects import KillEval, StartEval
from isaacd.attempt.evals import EvalKeeper
from isaacd.config.sizes import GiB
from isaacd.jobs.model import JobState
from isaacd.observations.checkpoints import Checkpoint
from isaacd.runner import apply_evals
from isaacd.runtimes.base import ExitStatus
from isaacd.workflows import resolve

EVAL = '[jobs.eval]\nepisodes = 4\nseed = 7\ndeadline_seconds = 60\nretries = 2\n'


class Eval:
    """A job with [jobs.eval] that trained in one run dir, its checkpoints `its` on disk, and its keeper."""

    def __init__(self, tmp_path: Path, its: tuple[int, ...] = (0, 2), job: str = JOB + EVAL):
        self.w = w = World(tmp_path, job)
        w.ran()
        w.setting.resolved = resolve(w.cfg)
        for i in its:
            fake_checkpoint(w.run_dir / f"model_{i}.pt", i)
        newest = max(its)
        self.observer = SimpleNamespace(checkpoint=Checkpoint(w.run_dir / f"model_{newest}.pt", newest, 0.0, 1),
                                        live=SimpleNamespace(pids=[], new_points=[]),
                                        job_iteration=lambda step, attempt: step)
        self.keeper = self.new_keeper()
        self.now = 1000.0

    def new_keeper(self) -> EvalKeeper:
        return EvalKeeper(self.w.setting, self.w.rt, self.w.state_dir, self.w.record, self.observer,
                          self.w.clock.wall)

    def tick(self, state: JobState = JobState.RUNNING) -> list:
        """One tick, its effects carried out; a preparation still on its worker is asked again (as ticks would)."""
        for _ in range(50):
            effects = self.keeper.tick(state, self.now)
            apply_evals(self.keeper, effects)
            if effects or self.keeper._preparing is None:
                return effects
            time.sleep(0.02)
        raise AssertionError("the preparation never answered")

    def finish(self, iteration: int, return_mean: float) -> None:
        """The running evaluation writes its result and exits 0, as the trainer's eval mode does."""
        run = self.keeper.running
        assert run is not None and run.prepared.task.iteration == iteration
        ckpt = self.w.run_dir / f"model_{iteration}.pt"
        Path(f"{ckpt}.eval.json").write_text(json.dumps({
            "version": 1, "checkpoint": str(ckpt), "iteration": iteration, "episodes": 4, "num_envs": 4, "seed": 7,
            "return_mean": return_mean, "return_std": 1.0, "length_mean": 10.0, "length_std": 0.5,
            "success_rate": None, "duration_seconds": 2.0, "device": "cpu", "deterministic": True}))
        self.w.rt.trainers[run.handle.pid].exit = ExitStatus(code=0)

    def events(self, kind: str) -> list[dict]:
        return [e for e in self.w.store.events("cp") if e["event"] == kind]


def test_one_evaluation_at_a_time_each_scored_and_the_best_named(tmp_path: Path):
    t = Eval(tmp_path)
    started = t.tick()
    assert [type(e) for e in started] == [StartEval] and len(t.w.rt.live()) == 1
    assert started[0].spec.env["ISAACD_EVAL_CHECKPOINT"] == str(t.w.run_dir / "model_0.pt")  # the oldest first
    assert t.tick() == [] and len(t.w.rt.live()) == 1  # one at a time
    status = t.keeper.status()
    assert status is not None and status.running == 0 and status.waiting == 1 and status.where == "cpu"
    t.finish(0, 20.0)
    t.tick()  # read, recorded
    t.tick()  # the next one
    t.finish(2, 50.0)
    t.tick()
    status = t.keeper.status()
    assert status.last.iteration == 2 and status.best.iteration == 2 and status.best.return_mean == 50.0
    assert status.done == 2 and status.waiting == 0 and status.failed == 0 and status.last_error is None
    assert [e["iteration"] for e in t.events("eval_done")] == [0, 2]
    assert [(e["iteration"], e["previous"]) for e in t.events("eval_best")] == [(0, None), (2, 0)]
    # kept: a new keeper (a supervisor restart) reads the record and evaluates nothing twice
    t.keeper = t.new_keeper()
    assert t.tick() == [] and t.keeper.status().best.iteration == 2


def test_a_deadline_kill_is_a_failure_retried_later_while_a_stop_or_the_queues_hold_only_reschedules(tmp_path: Path):
    t = Eval(tmp_path, its=(0,))
    t.tick()
    t.now += 61  # past deadline_seconds
    kill = t.tick()
    assert [(type(e), e.failure) for e in kill] == [(KillEval, True)]
    assert signal.SIGKILL in next(iter(t.w.rt.trainers.values())).signals
    failed = t.events("eval_failed")
    assert len(failed) == 1 and "deadline_seconds = 60" in failed[0]["reason"] and failed[0]["retry_at"] is not None
    assert t.keeper.status().failed == 1 and t.keeper.status().last_error.startswith("ran past deadline")
    assert t.tick() == []  # in its backoff
    t.w.clock.advance(3600)
    assert [type(e) for e in t.tick()] == [StartEval]  # retried
    # the job stopped: killed, not counted, and nothing starts while it is stopped
    kill = t.tick(JobState.STOPPED)
    assert [(type(e), e.failure) for e in kill] == [(KillEval, False)] and t.tick(JobState.STOPPED) == []
    assert t.keeper.status().failed == 1 and t.keeper.idle(JobState.STOPPED)


def test_a_crash_without_a_result_is_a_failure_given_up_after_its_retries(tmp_path: Path):
    t = Eval(tmp_path, its=(0,))
    for attempt in (1, 2):
        assert [type(e) for e in t.tick()] == [StartEval]
        run = t.keeper.running
        t.w.rt.trainers[run.handle.pid].exit = ExitStatus(signal=signal.SIGKILL)
        t.tick()
        t.w.clock.advance(3600)
    reasons = [e["reason"] for e in t.events("eval_failed")]
    assert len(reasons) == 2 and all("SIGKILL" in r and "no result written" in r for r in reasons)
    assert [e["iteration"] for e in t.events("eval_given_up")] == [0]
    assert t.tick() == [] and t.keeper.status().given_up == (0,)


def test_a_torn_checkpoint_is_refused_before_launch_and_given_up_at_once(tmp_path: Path):
    t = Eval(tmp_path, its=(0, 2))
    whole = (t.w.run_dir / "model_0.pt").read_bytes()
    (t.w.run_dir / "model_0.pt").write_bytes(whole[: len(whole) // 2])
    started = t.tick()
    assert started == [] and not t.w.rt.trainers  # nothing launched
    given_up = t.events("eval_given_up")
    assert [e["iteration"] for e in given_up] == [0] and "not a complete zip archive" in given_up[0]["reason"]
    assert [type(e) for e in t.tick()] == [StartEval]  # the next checkpoint goes on
    assert t.keeper.running.prepared.task.iteration == 2


def test_a_previous_supervisors_evaluation_is_found_by_its_token_and_killed_then_evaluated_again(tmp_path: Path):
    t = Eval(tmp_path, its=(0,))
    t.tick()
    pid = t.keeper.running.handle.pid
    t.keeper = t.new_keeper()  # the supervisor restarted; the evaluation's process lives on
    kill = t.keeper.dismiss_leftover()
    assert [(type(e), e.leftover) for e in kill] == [(KillEval, True)] and kill[0].handle.pid == pid
    apply_evals(t.keeper, kill)
    assert t.w.rt.trainers[pid].exit is not None and "previous supervisor" in t.events("eval_stopped")[-1]["reason"]
    assert t.keeper.dismiss_leftover() == []  # its token forgotten
    assert [type(e) for e in t.tick()] == [StartEval]  # evaluated again from scratch


def test_a_gpu_evaluation_starts_where_the_sampler_shows_room_counts_for_the_queue_and_yields_to_its_hold(
        tmp_path: Path):
    job = JOB.replace('num_envs = 1024\n', 'num_envs = 1024\ndevice = "cuda:1"\ngpus = [1]\n')
    t = Eval(tmp_path, its=(0,), job=job + '[jobs.eval]\ngpu_memory = "4GiB"\n')
    assert t.tick() == [] and "GPU sampler" in (t.keeper.status().last_error or "")  # no sampler: none started
    # its trainer holds a little on GPU 0 too (a stray CUDA context), where there is room: not the GPU it runs on
    t.observer.live.pids = [4242]
    full = {"0": (1 * GiB, 80 * GiB, {4242: 1 * GiB}), "1": (78 * GiB, 80 * GiB, {})}
    t.keeper.gpu_snapshot = lambda: gpu_snapshot(full)
    t.now += 3
    assert t.tick() == [] and "4 GiB" in (t.keeper.status().last_error or "")  # 2 GiB free of the 4 it needs
    full["1"] = (70 * GiB, 80 * GiB, {})
    t.now += 3
    started = t.tick()
    assert [type(e) for e in started] == [StartEval]
    assert started[0].spec.env["CUDA_VISIBLE_DEVICES"] == "1" and t.keeper.status().where == "gpu 1 (4 GiB)"
    assert t.keeper.gpu_bytes() == 4 * GiB  # counted with the spare's by the queue (status/signals.py)
    # the queue needs the memory (DropSpare): killed, not counted as a failure, and none started during the hold
    t.keeper.hold("the queue needs GPU memory for urgent", t.now + 30)
    assert [(type(e), e.failure) for e in t.tick()] == [(KillEval, False)]
    assert t.events("eval_stopped")[-1]["reason"] == "the queue needs GPU memory for urgent"
    assert t.tick() == [] and t.keeper.gpu_bytes() == 0 and t.keeper.status().failed == 0
    t.now += 31
    assert [type(e) for e in t.tick()] == [StartEval]
    # the job gave its GPU back (queued again after a preemption): a GPU evaluation goes with it
    assert [(type(e), e.failure) for e in t.tick(JobState.QUEUED)] == [(KillEval, False)]
    assert t.tick(JobState.QUEUED) == [] and t.keeper.idle(JobState.QUEUED)
    # a supervisor shutdown: no evaluation starts again in this runner
    assert t.keeper.dismiss("supervisor shutdown") == [] and t.keeper.idle(JobState.RUNNING)


def test_a_completed_jobs_checkpoints_found_after_a_restart_are_still_evaluated(tmp_path: Path):
    t = Eval(tmp_path, its=(0,))
    newest, t.observer.checkpoint = t.observer.checkpoint, None  # a new supervisor: the observer has not looked yet
    assert t.tick(JobState.COMPLETED) == [] and t.keeper.idle(JobState.COMPLETED)  # nothing known: nothing to do
    t.observer.checkpoint = newest  # its first scan: the runner's tick is no longer settled (runner.tick)
    assert not t.keeper.idle(JobState.COMPLETED)
    assert [type(e) for e in t.tick(JobState.COMPLETED)] == [StartEval]  # at once, not at the next 2 s scan
    t.finish(0, 5.0)
    t.tick(JobState.COMPLETED)
    assert t.tick(JobState.COMPLETED) == [] and t.keeper.idle(JobState.COMPLETED)  # all done: the job may settle

