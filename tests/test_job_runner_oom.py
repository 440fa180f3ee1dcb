"""The runner's side of a CUDA out-of-memory (issue 23), on a fake clock and runtime: the trainer's output is read
at its exit, the GPU note is asked for, and a step-down reaches the next launch's --num_envs."""

from __future__ import annotations

from pathlib import Path

from isaacd.config.schema import parse_config
from isaacd.gpu.oom_memory import OomNote
from isaacd.runner import JobRunner
from isaacd.runtimes.base import ExitStatus, Handle, LaunchSpec
from isaacd.history.store import StateStore

from job_fakes import FakeClock, FakeRuntime

JOB = """
[[jobs]]
name = "cp"
command = ["sleep", "600"]
num_envs = 1024
[jobs.oom]
step_down = 0.5
min_num_envs = 256
"""
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79 GiB"


class LoggingRuntime(FakeRuntime):
    """Trainers write to the job's log file like the process runtime's do; the test says what."""

    def start(self, spec: LaunchSpec) -> Handle:
        h = super().start(spec)
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(spec.log_path, "ab") as fh:
            h.state.update(log_path=str(spec.log_path), log_offset=fh.seek(0, 2))
        self.log_path = spec.log_path
        return h

    def die(self, output: str, code: int = 1) -> None:
        with open(self.log_path, "a") as fh:
            fh.write(output)
        self.live()[0].exit = ExitStatus(code=code)


def setup(tmp_path: Path) -> tuple[JobRunner, LoggingRuntime, FakeClock, list]:
    cfg = parse_config(JOB, "t.toml", tmp_path).jobs[0]
    rt, clock, asked = LoggingRuntime(), FakeClock(), []
    r = JobRunner(cfg, rt, StateStore(tmp_path / "state"), tmp_path / "state", clock)

    def note(job: str, since: float | None) -> OomNote:
        asked.append((job, since))
        return OomNote("GPU 0 (NVIDIA H200) has 139.0 of 139.8 GiB in use: 120.0 GiB by pid 4242", None,
                       {"gpus": [{"gpu": "0"}]})

    r.observer.gpu_memory = note  # the observer asks it at a CUDA out-of-memory
    r.recover()
    return r, rt, clock, asked


def tick(r: JobRunner, clock: FakeClock, seconds: float = 0.1) -> None:
    clock.advance(seconds)
    r.tick(clock.monotonic())


def events(r: JobRunner, name: str) -> list[dict]:
    return [e for e in r.store.events("cp") if e["event"] == name]


def num_envs_arg(argv: list[str]) -> str:
    return argv[argv.index("--num_envs") + 1]


def test_startup_oom_in_the_output_steps_the_next_launch_down(tmp_path):
    r, rt, clock, asked = setup(tmp_path)
    tick(r, clock)
    assert num_envs_arg(rt.live()[0].argv) == "1024"
    started_at = r.record.history.current.started_at
    rt.die(f"Traceback (most recent call last):\n{OOM}\n\nSet the environment variable HYDRA_FULL_ERROR=1 for a "
           "complete stack trace.\n")
    tick(r, clock)
    assert asked == [("cp", started_at)]
    (ev,) = events(r, "cuda_oom")
    assert (ev["phase"], ev["kind"], ev["line"], ev["num_envs"]) == ("startup", "torch", OOM, 1024)
    assert ev["gpu"].startswith("GPU 0 (NVIDIA H200)") and ev["gpus"] == [{"gpu": "0"}]
    assert events(r, "exited")[0]["cuda_oom"] == {"kind": "torch", "line": OOM}
    assert r.snapshot().restarts_by_reason == {"cuda_oom": 1}
    for _ in range(50):
        if rt.live():
            break
        tick(r, clock, 1.0)
    assert num_envs_arg(rt.live()[0].argv) == "512" and events(r, "started")[-1]["num_envs"] == 512
    snap = r.snapshot()
    assert (snap.num_envs, snap.num_envs_configured, snap.cuda_ooms) == (512, 1024, {"startup": 1})


def test_another_failure_in_the_output_is_a_plain_crash(tmp_path):
    r, rt, clock, asked = setup(tmp_path)
    tick(r, clock)
    rt.die("ValueError: not an out-of-memory\n")
    tick(r, clock)
    assert asked == [] and events(r, "cuda_oom") == [] and r.snapshot().restarts_by_reason == {"exit_code": 1}


def test_a_spares_attempt_is_not_blamed_for_the_dead_trainers_oom(tmp_path):
    """A spare starts behind a training trainer, so its log offset predates that trainer's death; its own attempt
    is read from the takeover on."""
    import os

    from isaacd.attempt.exit_tail import exit_with_log_tail
    from isaacd.attempt.spare import SpareKeeper, _Spare
    from isaacd.observations.shim_events import ShimEvents

    cfg = parse_config(JOB, "t.toml", tmp_path).jobs[0]
    log = tmp_path / "cp.log"
    log.write_text("spare: preloading\n")
    handle = Handle("process", "cp", {"pid": 1, "log_path": str(log), "log_offset": 0})
    fifo = tmp_path / "control.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the spare, listening
    keeper = SpareKeeper(cfg, FakeRuntime(), tmp_path, lambda *a, **k: None)
    keeper.spare = _Spare(handle, "tok", fifo, ShimEvents(tmp_path / "ev.jsonl"), 0.0, ready=True)
    keeper.runtime.poll = lambda h: None  # alive
    with open(log, "a") as fh:
        fh.write(f"Traceback (most recent call last):\n{OOM}\n")  # the trainer it stands behind dies
    taken = keeper.take({"argv": []})
    os.close(reader)
    assert taken is not None
    with open(log, "a") as fh:
        fh.write("ValueError: the spare's own attempt failed otherwise\n")
    st = exit_with_log_tail(ExitStatus(code=1), taken[0])
    assert st.reason_class == "exit_code" and st.describe().endswith("ValueError: the spare's own attempt failed "
                                                                      "otherwise")
