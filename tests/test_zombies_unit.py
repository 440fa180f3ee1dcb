"""Issue 37: every child the supervisor starts is reaped, on the fake kernel (os_fakes.FakeOs). A killed warm spare
was dropped by the keeper and never polled again, so it stayed `<defunct>` under the supervisor until it exited:
one zombie per stop, cancel or completion. The real processes are proven by test_zombies_e2e.py."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from isaacd.attempt.spare import SpareKeeper
from isaacd.config.schema import parse_config
from isaacd.jobs.model import JobState
from isaacd.runner import apply_spare
from isaacd.runtimes.base import LaunchSpec
from isaacd.runtimes.process import ProcessRuntime
from isaacd.workflows.launcher import Program

from os_fakes import FakeOs

PROGRAM = Program(prefix=["python3", "shim.py", "train.py"], suffix=[], shim=True,
                  spare_head=["python3", "shim.py"], target=("train.py",))


@pytest.fixture()
def world(tmp_path: Path) -> dict[str, Any]:
    cfg = parse_config(f'[[jobs]]\nname = "p"\nlog_root = "{tmp_path}/logs"\n', "t.toml", tmp_path).jobs[0]
    kernel = FakeOs()
    kernel.add(1, pid=100)
    runtime = ProcessRuntime(kernel)
    keeper = SpareKeeper(cfg, runtime, tmp_path / "state", lambda name, **kw: None, oscalls=kernel)
    return {"kernel": kernel, "keeper": keeper, "runtime": runtime, "cfg": cfg, "tmp": tmp_path}


def ready_spare(keeper: SpareKeeper, state: Path) -> int:
    apply_spare(keeper, keeper.tick(JobState.RUNNING, PROGRAM, 10.0))
    sp = keeper.spare
    assert sp is not None
    (state / "spare" / "p" / f"events-{sp.token}.jsonl").write_text(json.dumps({"event": "spare_ready"}) + "\n")
    apply_spare(keeper, keeper.tick(JobState.RUNNING, PROGRAM, 11.0))
    assert keeper.ready_token() == sp.token
    return sp.handle.pid


def test_a_killed_spare_is_polled_each_tick_until_reaped_then_forgotten(world):
    kernel: FakeOs = world["kernel"]
    keeper: SpareKeeper = world["keeper"]
    pid = ready_spare(keeper, world["tmp"] / "state")
    kernel.procs[pid].slow_to_die = True  # the SIGKILL lands after the keeper's first look, as on a busy host

    apply_spare(keeper, keeper.tick(JobState.STOPPED, PROGRAM, 20.0))  # the job came to rest: its spare goes
    assert (pid, signal.SIGKILL) in kernel.group_signals and keeper.spare is None
    assert pid in kernel.procs and keeper.releasing  # not dead yet: kept, not dropped

    polls = kernel.polled.count(pid)
    apply_spare(keeper, keeper.tick(JobState.STOPPED, PROGRAM, 21.0))
    assert kernel.polled.count(pid) > polls and keeper.releasing  # asked again (waitpid WNOHANG), still running

    kernel.end(pid, -signal.SIGKILL)
    assert kernel.zombies() == [pid]  # dead and not waited for: what `ps` showed as <defunct>
    apply_spare(keeper, keeper.tick(JobState.STOPPED, PROGRAM, 22.0))
    assert kernel.zombies() == [] and kernel.reaped[pid] == -signal.SIGKILL and not keeper.releasing

    polls = kernel.polled.count(pid)
    apply_spare(keeper, keeper.tick(JobState.STOPPED, PROGRAM, 23.0))
    assert kernel.polled.count(pid) == polls  # forgotten: never polled again


def test_a_spare_killed_at_once_is_reaped_by_the_same_tick(world):
    kernel: FakeOs = world["kernel"]
    keeper: SpareKeeper = world["keeper"]
    for n in range(3):  # three stop/start cycles left three zombies
        pid = ready_spare(keeper, world["tmp"] / "state")
        apply_spare(keeper, keeper.tick(JobState.STOPPED, PROGRAM, 30.0 + n))
        assert pid not in kernel.procs and not keeper.releasing
    assert kernel.zombies() == []


def test_a_released_child_is_reaped_by_the_runtimes_next_call_even_if_nobody_asks_again(world):
    """runtimes/base.py: the release completes even if the caller stops asking (a runner dropped meanwhile)."""
    kernel: FakeOs = world["kernel"]
    runtime: ProcessRuntime = world["runtime"]
    tmp: Path = world["tmp"]

    def spec(name: str) -> LaunchSpec:
        return LaunchSpec(job=world["cfg"], argv=["python3", name], trainer_args=[], env={}, cwd=tmp,
                          log_path=tmp / f"{name}.log")

    spare, trainer = runtime.start(spec("spare")), runtime.start(spec("trainer"))
    kernel.procs[spare.pid].slow_to_die = True
    runtime.kill(spare)
    assert runtime.cleanup(spare) is False  # still running: not released yet
    kernel.end(spare.pid, -signal.SIGKILL)
    assert kernel.zombies() == [spare.pid]
    assert runtime.poll(trainer) is None  # another job's poll: the released one is reaped on the way
    assert kernel.zombies() == [] and runtime.cleanup(spare) is True


def test_an_adopted_trainer_is_not_ours_to_reap(world):
    kernel: FakeOs = world["kernel"]
    runtime: ProcessRuntime = world["runtime"]
    stranger = kernel.add(1, env={"ISAACD_LAUNCH_TOKEN": "t"})
    handle = runtime.adopt(world["cfg"], {"pid": stranger.pid, "start_time": stranger.start_time})
    assert handle is not None and runtime.cleanup(handle) is True and kernel.polled == []
