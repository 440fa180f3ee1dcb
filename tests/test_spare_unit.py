"""The spare keeper over the process runtime on a fake kernel (os_fakes.FakeOs): when a spare starts, how a crash
hands it the attempt through its FIFO, and what happens when the hand-over cannot be made. No process, no FIFO;
the real ones are proven by test_instant_recovery.py and test_shim_spare.py.
"""

from __future__ import annotations

import errno
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from isaacd.config.schema import parse_config
from isaacd.jobs.model import JobState
from isaacd.runtimes.process import ProcessRuntime
from isaacd.attempt.spare import RETRY_MIN, SpareKeeper
from isaacd_trainer.shim_protocol import SPARE_CONTROL_ENV
from isaacd.runner import apply_spare
from isaacd.status.types import SpareStatus
from isaacd.workflows import resolve
from isaacd.workflows.launcher import Program

from os_fakes import FakeOs

PROGRAM = Program(prefix=["python3", "shim.py", "train.py"], suffix=[], shim=True,
                  spare_head=["python3", "shim.py"], target=("train.py",))
GO = {"argv": ["train.py", "--resume"], "env": {"A": "1"}, "cwd": "/work"}


def acted(keeper: SpareKeeper, decided: Any) -> Any:
    """What the keeper decided, carried out as the runner does (runner.apply_spare: the runtime starts or kills, then
    the keeper hears how it went); a hand-over (take's handle and token) comes back as is, effects as None."""
    if isinstance(decided, list):
        apply_spare(keeper, decided)
        return None
    return decided


@pytest.fixture()
def world(tmp_path: Path) -> dict[str, Any]:
    cfg = parse_config(f'[[jobs]]\nname = "p"\nlog_root = "{tmp_path}/logs"\n', "t.toml", tmp_path).jobs[0]
    kernel = FakeOs()
    kernel.add(1, pid=100)
    said: list[tuple[str, dict[str, Any]]] = []
    keeper = SpareKeeper(cfg, ProcessRuntime(kernel), tmp_path / "state", lambda name, **kw: said.append((name, kw)),
                         oscalls=kernel)
    return {"kernel": kernel, "keeper": keeper, "said": said, "state": tmp_path / "state"}


def _ready_spare(world: dict[str, Any]) -> int:
    keeper: SpareKeeper = world["keeper"]
    acted(keeper, keeper.tick(JobState.RUNNING, PROGRAM, 10.0))
    sp = keeper.spare
    assert sp is not None
    events = world["state"] / "spare" / "p" / f"events-{sp.token}.jsonl"
    events.write_text(json.dumps({"event": "spare_ready", "preload_seconds": 4.2, "rss_bytes": 1 << 30}) + "\n")
    acted(keeper, keeper.tick(JobState.RUNNING, PROGRAM, 11.0))
    assert keeper.ready_token() == sp.token
    return sp.handle.pid


def test_a_spare_starts_behind_a_training_trainer_and_waits_on_its_own_fifo(world):
    keeper: SpareKeeper = world["keeper"]
    acted(keeper, keeper.tick(JobState.STARTING, PROGRAM, 10.0))
    assert world["kernel"].spawns == []  # never competes with a trainer's own start-up
    acted(keeper, keeper.tick(JobState.RUNNING, PROGRAM, 10.0))
    (call,) = world["kernel"].spawns
    assert call.argv == ["python3", "shim.py", "--isaacd-spare"] and call.new_session
    control = Path(call.env[SPARE_CONTROL_ENV])
    assert control.exists() and control.name == f"control-{keeper.spare.token}.fifo"
    assert world["said"][-1][0] == "spare_started"


def test_at_a_crash_the_ready_spare_gets_the_attempt_as_one_go_line_and_its_log_starts_there(world):
    keeper: SpareKeeper = world["keeper"]
    pid = _ready_spare(world)
    log = Path(keeper.spare.handle.state["log_path"])
    log.write_bytes(b"what the dead trainer wrote after the spare started\n")
    token = keeper.spare.token
    taken = acted(keeper, keeper.take(GO))
    assert taken is not None and taken[0].pid == pid and taken[1] == token
    assert list(world["kernel"].fifo_writes.values()) == [(json.dumps(GO) + "\n").encode()]
    assert taken[0].state["log_offset"] == log.stat().st_size  # the dead trainer's last words are not the attempt's
    assert keeper.spare is None and world["kernel"].group_signals == []  # the spare lives on as the trainer


def test_a_go_line_the_fifo_takes_in_pieces_arrives_whole(world, monkeypatch):
    kernel: FakeOs = world["kernel"]
    _ready_spare(world)
    real_write = kernel.write_fd
    monkeypatch.setattr(kernel, "write_fd", lambda fd, data: real_write(fd, data[:7]))
    assert acted(world["keeper"], world["keeper"].take(GO)) is not None
    assert list(kernel.fifo_writes.values()) == [(json.dumps(GO) + "\n").encode()]


def test_a_spare_that_no_longer_reads_its_fifo_is_killed_and_the_attempt_starts_cold(world, monkeypatch):
    kernel: FakeOs = world["kernel"]
    pid = _ready_spare(world)

    def nobody_reads(path: Path, flags: int) -> int:
        raise OSError(errno.ENXIO, "No such device or address")

    monkeypatch.setattr(kernel, "open_fd", nobody_reads)
    assert acted(world["keeper"], world["keeper"].take(GO)) is None
    assert kernel.group_signals == [(pid, signal.SIGKILL)] and world["keeper"].spare is None
    assert world["said"][-1] == ("spare_stopped", {"pid": pid, "reason": "handover failed"})


def test_a_spare_that_dies_is_replaced_after_a_growing_wait(world):
    kernel: FakeOs = world["kernel"]
    keeper: SpareKeeper = world["keeper"]
    pid = _ready_spare(world)
    kernel.end(pid, 1)
    acted(keeper, keeper.tick(JobState.RUNNING, PROGRAM, 20.0))
    assert keeper.spare is None and world["said"][-1][0] == "spare_exited"
    assert keeper.retry_at == 20.0 + RETRY_MIN
    acted(keeper, keeper.tick(JobState.RUNNING, PROGRAM, 20.0 + RETRY_MIN - 0.1))
    assert len(kernel.spawns) == 1
    acted(keeper, keeper.tick(JobState.RUNNING, PROGRAM, 20.0 + RETRY_MIN))
    assert len(kernel.spawns) == 2


def test_a_spare_is_killed_when_the_job_comes_to_rest_and_leaves_no_fifo(world):
    pid = _ready_spare(world)
    acted(world["keeper"], world["keeper"].tick(JobState.STOPPED, PROGRAM, 30.0))
    assert world["kernel"].group_signals == [(pid, signal.SIGKILL)] and world["keeper"].spare is None
    assert world["said"][-1] == ("spare_stopped", {"pid": pid, "reason": "the job is stopped"})
    assert not list((world["state"] / "spare" / "p").glob("*.fifo"))
    assert world["keeper"].status().state == "none"


def test_without_the_launcher_shim_there_is_no_spare_and_status_says_why(world, tmp_path):
    # the program the runner builds for a builtin job with `shim = false` (test_instant_recovery's e2e case)
    cfg = parse_config(f'[[jobs]]\nname = "p"\nlog_root = "{tmp_path}/logs"\nshim = false\n', "t.toml",
                       tmp_path).jobs[0]
    no_shim = resolve(cfg).program(in_container=False)
    assert no_shim.spare_head is None
    acted(world["keeper"], world["keeper"].tick(JobState.RUNNING, no_shim, 10.0))
    assert world["kernel"].spawns == []
    assert world["keeper"].status() == SpareStatus(state="off",
                                                   reason="the launcher shim is off (shim = false), or a raw command")


def test_a_spare_left_by_the_previous_supervisor_is_killed(world):
    kernel: FakeOs = world["kernel"]
    leftover = kernel.add(1, env={"ISAACD_LAUNCH_TOKEN": "tok-spare"})
    acted(world["keeper"], world["keeper"].dismiss_leftover("tok-spare"))
    assert kernel.group_signals == [(leftover.pid, signal.SIGKILL)] and leftover.pid not in kernel.procs
    assert world["said"][-1] == ("spare_stopped", {"pid": leftover.pid, "reason": "left by the previous supervisor"})


def test_status_shows_the_spares_memory_from_proc(world):
    _ready_spare(world)
    st = world["keeper"].status()
    assert st.state == "ready" and st.rss_bytes == 2048 * 1024 and st.preload_seconds == 4.2


def _held_ends(kernel: FakeOs, control: Path) -> list[int]:
    """Our open ends of a spare's FIFO (fds the keeper holds, not yet closed)."""
    return [fd for fd, (path, _flags) in kernel.open_fds.items() if path == str(control)]


def test_the_keeper_holds_its_end_of_the_fifo_until_the_go_so_a_spare_dies_with_its_supervisor(world):
    """A container spare cannot see its parent die: it exits on EOF of its FIFO, which comes when the last writer
    goes. The keeper holds one end open (read-write, never blocking, close-on-exec) for the spare's whole life; its
    death closes it. After the go the line is in the pipe and the end is let go; a spare killed unused lets go too."""
    import os

    kernel: FakeOs = world["kernel"]
    keeper: SpareKeeper = world["keeper"]
    _ready_spare(world)
    control = keeper.spare.control
    (fd,) = _held_ends(kernel, control)
    assert kernel.open_fds[fd][1] & os.O_RDWR and kernel.open_fds[fd][1] & os.O_CLOEXEC
    assert acted(keeper, keeper.take(GO)) is not None
    assert _held_ends(kernel, control) == [] and not control.exists()

    acted(keeper, keeper.tick(JobState.RUNNING, PROGRAM, 20.0))  # a new spare behind the new trainer
    control = keeper.spare.control
    assert len(_held_ends(kernel, control)) == 1
    acted(keeper, keeper.dismiss("test"))
    assert _held_ends(kernel, control) == [] and not control.exists()


def test_status_shows_the_memory_the_spare_holds_once_ready_not_what_it_had_while_booting(world):
    """The tick measures the spare's memory at most every 2 s; the tick that sees spare_ready measures again, so a
    ready spare never shows the few MB it had when it was still importing torch."""
    kernel: FakeOs = world["kernel"]
    keeper: SpareKeeper = world["keeper"]
    acted(keeper, keeper.tick(JobState.RUNNING, PROGRAM, 10.0))
    sp = keeper.spare
    kernel.procs[sp.handle.pid].rss_kib = 40 * 1024
    acted(keeper, keeper.tick(JobState.RUNNING, PROGRAM, 10.5))
    assert keeper.status().rss_bytes == 40 * 2**20
    kernel.procs[sp.handle.pid].rss_kib = 900 * 1024  # torch imported, then ready, within the 2 s
    events = world["state"] / "spare" / "p" / f"events-{sp.token}.jsonl"
    events.write_text(json.dumps({"event": "spare_ready", "preload_seconds": 1.0}) + "\n")
    acted(keeper, keeper.tick(JobState.RUNNING, PROGRAM, 11.0))
    st = keeper.status()
    assert st.state == "ready" and st.rss_bytes == 900 * 2**20
