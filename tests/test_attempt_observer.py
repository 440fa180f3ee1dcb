"""The attempt observer (attempt/observer.py) and recovery (attempt/recovery.py) without a process: a fake runtime,
a fake clock, the shim's event file and a TensorBoard file in tmp_path. The observer turns them into messages and
facts; recovery says what it found as messages and acts on no trainer itself."""

from __future__ import annotations

import io
import json
import signal
from pathlib import Path

from backup_fakes import fake_checkpoint
from job_fakes import FakeClock, FakeRuntime, FakeTrainer

from isaacd.attempt.observer import AttemptObserver
from isaacd.attempt.record import JobRecord
from isaacd.attempt.recovery import recovery_messages
from isaacd.attempt.setting import JobSetting
from isaacd.config.schema import parse_config
from isaacd.jobs.messages import Adopted, Exited, LaunchUnfinished, Progressed
from isaacd.jobs.model import JobState, LaunchIntent, Origin, StopIntent, Then
from isaacd.runtimes.base import ExitStatus, Handle
from isaacd.attempt.spare import SpareKeeper
from isaacd.history.store import Attempt, StateStore

JOB = '[[jobs]]\nname = "cp"\nmax_iterations = 100\nlog_root = "logs"\nspare = false\n'
RUN = "2026-01-01_00-00-00_cp"


class World:
    def __init__(self, tmp_path: Path):
        self.cfg = parse_config(JOB, "t.toml", tmp_path).jobs[0]
        self.state_dir, self.clock, self.rt = tmp_path / "state", FakeClock(), FakeRuntime()
        self.setting = JobSetting.of(self.cfg)
        self.record = JobRecord(self.setting, StateStore(self.state_dir), self.state_dir, self.clock)
        self.kicks: list[int] = []
        self.observer = AttemptObserver(self.setting, self.rt, self.clock, self.record,
                                        on_checkpoint_saved=lambda: self.kicks.append(1))
        self.run_dir = (tmp_path / "logs" / "rsl_rl" / "cp" / RUN).resolve()
        self.shim = self.state_dir / "shim" / "cp" / "attempt-1.jsonl"

    def trainer(self, resume: dict | None = None) -> tuple[Attempt, FakeTrainer]:
        """Attempt 1, running (as the starter leaves it), with its shim side channel."""
        t = FakeTrainer(4001, "tok", ["train"])
        self.rt.trainers[t.pid] = t
        attempt = Attempt(number=1, started_at=self.clock.wall(), reason="initial", resume_from=resume,
                          shim_events=str(self.shim), token="tok", handle={"pid": t.pid})
        self.record.history.attempts.append(attempt)
        self.record.model = self.record.model.with_(state=JobState.STARTING)
        self.observer.started(Handle("process", "cp", {"pid": t.pid}), self.shim, set())
        return attempt, t

    def shim_says(self, *events: dict) -> None:
        self.shim.parent.mkdir(parents=True, exist_ok=True)
        with open(self.shim, "a") as fh:
            fh.write("".join(json.dumps({"rank": 0, **e}) + "\n" for e in events))

    def tensorboard(self, *steps: int) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        buf = io.BytesIO()
        for step in steps:
            ev = event_pb2.Event(step=step, wall_time=1.0, summary=summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag="Train/mean_reward", simple_value=float(step))]))
            RecordWriter(buf).write(ev.SerializeToString())
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.run_dir / "events.out.tfevents.1.host", "ab") as fh:
            fh.write(buf.getvalue())

    def observe(self, seconds: float = 0.1) -> list:
        self.clock.advance(seconds)
        return self.observer.observe(self.clock.monotonic())

    def events(self, name: str) -> list[dict]:
        return [e for e in self.record.store.events("cp") if e["event"] == name]


def test_the_shims_run_dir_is_attached_saved_and_said_once(tmp_path):
    w = World(tmp_path)
    attempt, _ = w.trainer()
    w.shim_says({"event": "shim_started", "rsl_rl_version": "5.0.1"},
                {"event": "runner_started", "run_dir": str(w.run_dir), "start_iteration": 0})
    assert w.observe() == []
    assert attempt.run_dir == str(w.run_dir) and w.record.history.trainer_rsl_rl_version == "5.0.1"
    assert StateStore(w.state_dir).load("cp").current.run_dir == str(w.run_dir)
    w.observe()
    assert len(w.events("run_dir")) == 1


def test_a_checkpoint_the_shim_saw_land_kicks_the_backup_and_the_next_scan(tmp_path):
    w = World(tmp_path)
    w.trainer()
    w.observer.checkpoint_scanned_at = w.clock.monotonic()
    w.shim_says({"event": "checkpoint_saved", "path": str(w.run_dir / "model_2.pt"), "iteration": 2})
    w.observe()
    assert w.kicks == [1] and w.observer.checkpoint_scanned_at == float("-inf")


def test_a_trainer_that_loaded_another_checkpoint_than_chosen_is_said(tmp_path):
    w = World(tmp_path)
    chosen = str(w.run_dir / "model_4.pt")
    w.trainer(resume={"path": chosen, "iteration": 4})
    w.shim_says({"event": "checkpoint_loaded", "path": chosen, "iteration": 4})
    w.observe()
    assert w.events("resume_mismatch") == []
    w.shim_says({"event": "checkpoint_loaded", "path": str(w.run_dir / "model_2.pt"), "iteration": 2})
    w.observe()
    (mismatch,) = w.events("resume_mismatch")
    assert mismatch["chosen"] == chosen and mismatch["loaded"] == str(w.run_dir / "model_2.pt")


def test_a_stop_the_trainer_saw_is_not_signalled_twice_and_its_checkpoint_is_said(tmp_path):
    w = World(tmp_path)
    w.trainer()
    w.shim_says({"event": "stop_requested", "signal": "SIGINT"})
    w.observe()
    assert w.observer.live.stop_seen_by_trainer
    w.shim_says({"event": "stopped", "iteration": 7, "checkpoint": str(w.run_dir / "model_7.pt")})
    w.observe()
    (saved,) = w.events("trainer_saved_on_stop")
    assert saved["iteration"] == 7 and saved["checkpoint"] == str(w.run_dir / "model_7.pt")


def test_new_tensorboard_iterations_are_progress(tmp_path):
    w = World(tmp_path)
    w.trainer()
    w.shim_says({"event": "runner_started", "run_dir": str(w.run_dir)})
    w.tensorboard(0, 1, 2)
    out = w.observe()
    assert out == [Progressed(2)] and w.observer.iteration == 2 and w.observer.scalars["Train/mean_reward"] == 2.0
    assert w.observer.last_progress_mono == w.clock.monotonic() and len(w.observer.live.new_points) == 3
    assert w.observe() == [] and w.observer.live.new_points == []


def test_an_exit_is_saved_before_the_machine_hears_of_it(tmp_path):
    w = World(tmp_path)
    attempt, t = w.trainer()
    w.shim_says({"event": "runner_started", "run_dir": str(w.run_dir)})
    w.tensorboard(0, 1)
    w.observe()
    t.exit = ExitStatus(signal=signal.SIGKILL)
    w.clock.advance(30)
    (exited,) = w.observe()
    assert isinstance(exited, Exited) and exited.reason_class == "signal" and not exited.success
    assert 30 <= exited.ran_seconds < 31 and not exited.reached_max and not exited.moved_forward
    saved = StateStore(w.state_dir).load("cp").current
    assert saved.exit is not None and saved.exit["signal"] == signal.SIGKILL and saved.last_iteration == 1
    assert w.observer.ended and w.events("exited")[0]["requested"] is False


def test_a_clean_exit_at_max_iterations_reached_max(tmp_path):
    w = World(tmp_path)
    attempt, t = w.trainer()
    w.shim_says({"event": "runner_started", "run_dir": str(w.run_dir)})
    w.tensorboard(98, 99)
    fake_checkpoint(w.run_dir / "model_99.pt", 99)
    w.observe()
    t.exit = ExitStatus(code=0)
    (exited,) = w.observe()
    assert exited.success and exited.reached_max and exited.moved_forward
    assert attempt.checkpoint_at_exit == 99


def test_an_adopted_trainer_whose_shim_said_its_training_finished_completes_instead_of_restarting(tmp_path):
    """Not the supervisor's child (adopted after a restart): no exit code to read. Its shim's learn_finished (learn()
    returned after its last save) says how it ended; without it the exit stays unknown, a crash."""
    from isaacd.runtimes.process import ADOPTED_EXIT

    w = World(tmp_path)
    attempt, t = w.trainer()
    w.shim_says({"event": "runner_started", "run_dir": str(w.run_dir)})
    w.tensorboard(98, 99)
    fake_checkpoint(w.run_dir / "model_99.pt", 99)
    w.observe()
    w.shim_says({"event": "learn_finished", "iteration": 99})
    t.exit = ExitStatus(detail=ADOPTED_EXIT)
    (exited,) = w.observe()
    assert exited.success and exited.reached_max and attempt.exit["code"] == 0
    w2 = World(tmp_path / "other")
    _, t2 = w2.trainer()
    w2.observe()
    t2.exit = ExitStatus(detail=ADOPTED_EXIT)
    (lost,) = w2.observe()
    assert not lost.success and "exit status unknown" in lost.description


# ---- recovery: messages, never a signal of its own ----------------------------------------------------
def test_recovery_adopts_a_live_trainer_in_a_stop_and_leaves_the_signal_to_the_machine(tmp_path):
    w = World(tmp_path)
    attempt, t = w.trainer()
    w.record.model = w.record.model.with_(state=JobState.STOPPING, stop=StopIntent(
        "operator stop", Origin.OPERATOR, Then.STOP, deadline=w.clock.monotonic() + 10))
    w.record.persist()
    w2 = World(tmp_path)  # a new supervisor, the trainer still alive
    w2.rt = w.rt
    w2.observer.runtime = w.rt
    spares = SpareKeeper(w2.cfg, w2.rt, w2.state_dir, lambda *a, **k: None)
    msgs = recovery_messages(w2.setting, w2.rt, w2.record, w2.observer, spares)
    assert msgs == [Adopted()] and t.signals == []  # the machine decides the SIGINT; _apply sends it
    assert w2.observer.live.handle is not None and w2.observer.live.handle.pid == t.pid and w2.events("adopted")


def test_recovery_of_a_launch_no_trainer_carries_is_a_launch_unfinished(tmp_path):
    w = World(tmp_path)
    w.record.history.attempts.append(Attempt(number=1, started_at=1.0, reason="initial", token="lost-token"))
    w.record.model = w.record.model.with_(state=JobState.STARTING, launch=LaunchIntent("initial"))
    w.record.persist()
    w2 = World(tmp_path)
    spares = SpareKeeper(w2.cfg, w2.rt, w2.state_dir, lambda *a, **k: None)
    assert recovery_messages(w2.setting, w2.rt, w2.record, w2.observer, spares) == [LaunchUnfinished()]
    assert w2.record.history.current.exit is not None and w2.rt.trainers == {}  # closed, nothing launched here


def test_a_boot_shows_how_far_it_got_and_its_last_line_and_a_stop_during_it_says_nothing_was_saved(tmp_path):
    w = World(tmp_path)
    w.trainer()
    log = tmp_path / "cp.log"
    log.write_text("earlier attempt's last words\n")
    w.observer.live.handle = Handle("process", "cp", {"pid": 4001, "log_path": str(log), "log_offset": log.stat().st_size})
    w.observe()
    assert w.observer.live.boot_phase == (None, None) and w.observer.live.boot_line is None  # its own output only
    with open(log, "a") as fh:
        fh.write("\x1b[32m[INFO]: Creating the scene\x1b[0m\nWarp 1.9: compiling 10%\rWarp 1.9: compiling 60%\r")
    w.shim_says({"event": "shim_started", "time": 100.0}, {"event": "env_creating", "task": "T", "time": 104.0})
    w.observe(1.0)
    assert w.observer.live.boot_phase == ("environment", 104.0)
    assert w.observer.live.boot_line == "Warp 1.9: compiling 60%"
    w.shim_says({"event": "env_created", "time": 140.0}, {"event": "runner_started", "time": 141.0},
                {"event": "env_creating", "time": 150.0})  # an eval env later is no step back
    w.observe()
    assert w.observer.live.boot_phase == ("first iteration", 141.0)
    w.shim_says({"event": "stopped", "iteration": None, "checkpoint": None, "before_first_iteration": True})
    w.observe()
    assert w.events("trainer_saved_on_stop") == []
    (stopped,) = w.events("trainer_stopped")
    assert stopped["detail"].startswith("stopped before the first checkpoint")
