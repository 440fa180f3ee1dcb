"""runtime = "process" on a fake kernel (os_fakes.FakeOs): what it starts, what it signals, how it reads an exit,
what it adopts after a supervisor restart. No process is spawned; the thin real calls underneath are proven by
test_process_runtime.py on real processes.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from isaacd.config.schema import parse_config
from isaacd.jobs.messages import Stop
from isaacd.jobs.model import Origin
from isaacd.runner import JobRunner
from isaacd.runtimes.base import LaunchSpec
from isaacd.runtimes.process import TOKEN_ENV, ProcessRuntime
from isaacd.os_seam.proctree import parse_stat, process_tree
from isaacd.history.store import StateStore

from job_fakes import FakeClock
from os_fakes import OUR_UID, FakeOs

TOKEN = "tok-1"


@pytest.fixture()
def job(tmp_path: Path):  # noqa: ANN201
    return parse_config(f'[[jobs]]\nname = "p"\nlog_root = "{tmp_path}/logs"\n', "test", tmp_path).jobs[0]


@pytest.fixture()
def kernel() -> FakeOs:
    k = FakeOs()
    k.add(1, pid=100)  # the supervisor itself, in its own session
    return k


def _spec(job, tmp_path: Path, token: str = TOKEN) -> LaunchSpec:  # noqa: ANN001
    return LaunchSpec(job=job, argv=["python3", "train.py", "--headless"], trainer_args=[],
                      env={"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0"}, cwd=tmp_path / "work",
                      log_path=tmp_path / "logs" / "p.log", token=token)


# ---- start ---------------------------------------------------------------------------------------
def test_a_trainer_starts_with_the_jobs_command_dir_and_env_in_a_process_group_of_its_own(job, kernel, tmp_path):
    rt = ProcessRuntime(kernel)
    h = rt.start(_spec(job, tmp_path))
    (call,) = kernel.spawns
    assert call.argv == ["python3", "train.py", "--headless"] and call.cwd == tmp_path / "work"
    assert call.env == {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0", TOKEN_ENV: TOKEN}
    assert call.new_session  # a Ctrl-C on the supervisor's terminal does not reach the trainer
    trainer = kernel.procs[h.pid]
    assert trainer.pgid == trainer.sid == h.pid != kernel.procs[100].pgid
    assert h.state == {"pid": h.pid, "pgid": h.pid, "start_time": trainer.start_time, "token": TOKEN,
                       "log_path": str(tmp_path / "logs" / "p.log"), "log_offset": 0}
    assert call.stdout.name == str(tmp_path / "logs" / "p.log")  # output and errors go to the job's log


def test_an_attempts_output_starts_where_the_previous_attempts_log_ended(job, kernel, tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "p.log").write_bytes(b"attempt 1 said this\n")
    h = ProcessRuntime(kernel).start(_spec(job, tmp_path))
    assert h.state["log_offset"] == len(b"attempt 1 said this\n")  # exit reasons quote only this attempt


def test_a_launch_without_a_token_puts_no_token_in_the_trainers_environment(job, kernel, tmp_path):
    h = ProcessRuntime(kernel).start(_spec(job, tmp_path, token=""))
    assert TOKEN_ENV not in kernel.spawns[0].env and "token" not in h.state


def test_a_program_that_cannot_be_executed_fails_the_start(job, kernel, tmp_path):
    kernel.spawn_error = FileNotFoundError(2, "No such file or directory: 'python3'")
    rt = ProcessRuntime(kernel)
    with pytest.raises(FileNotFoundError):
        rt.start(_spec(job, tmp_path))
    assert rt._children == {}


# ---- poll: how an end reads --------------------------------------------------------------------
@pytest.mark.parametrize(("returncode", "code", "sig", "described"), [
    (0, 0, None, "exited with code 0"),
    (3, 3, None, "exited with code 3"),
    (-signal.SIGKILL, None, 9, "killed by signal 9 (SIGKILL)"),
    (-signal.SIGSEGV, None, 11, "killed by signal 11 (SIGSEGV)"),
])
def test_a_trainers_end_is_reported_as_its_exit_code_or_the_signal_that_killed_it(
        job, kernel, tmp_path, returncode, code, sig, described):  # noqa: ANN001
    rt = ProcessRuntime(kernel)
    h = rt.start(_spec(job, tmp_path))
    assert rt.poll(h) is None
    kernel.end(h.pid, returncode)
    st = rt.poll(h)
    assert st is not None and (st.code, st.signal) == (code, sig) and st.describe() == described
    assert st.success == (returncode == 0)
    # no cgroup here: the kernel's OOM killer and a `kill -9` read the same (the container runtimes tell them apart)
    assert not st.oom_killed
    assert h.pid not in kernel.procs  # reaped: no zombie left behind


def test_helpers_the_trainer_left_behind_are_killed_with_its_group_when_it_ends(job, kernel, tmp_path):
    rt = ProcessRuntime(kernel)
    h = rt.start(_spec(job, tmp_path))
    helper = kernel.add(h.pid)  # an Isaac Sim helper, in the trainer's group
    kernel.end(h.pid, 1)
    assert rt.poll(h).code == 1
    assert (h.pid, signal.SIGKILL) in kernel.group_signals and helper.pid not in kernel.procs


def test_a_stranger_outside_the_trainers_group_is_never_signalled(job, kernel, tmp_path):
    rt = ProcessRuntime(kernel)
    h = rt.start(_spec(job, tmp_path))
    stranger = kernel.add(h.pid, pgid=777, sid=777)  # the trainer started it in a session of its own
    rt.signal(h, signal.SIGINT)  # the trainer ends on it
    assert rt.poll(h).signal == signal.SIGINT  # and the group is reaped
    assert stranger.signals == [] and stranger.pid in kernel.procs


# ---- signal / kill -----------------------------------------------------------------------------
def test_a_stop_signals_the_trainer_and_everything_it_spawned(job, kernel, tmp_path):
    rt = ProcessRuntime(kernel)
    h = rt.start(_spec(job, tmp_path))
    kernel.procs[h.pid].ignores.add(signal.SIGINT)  # saves a checkpoint first, say
    rank = kernel.add(h.pid)
    rank.ignores.add(signal.SIGINT)
    rt.signal(h, signal.SIGINT)
    assert kernel.group_signals == [(h.pid, signal.SIGINT)] and rank.signals == [signal.SIGINT]
    rt.kill(h)
    assert kernel.group_signals[-1] == (h.pid, signal.SIGKILL) and rank.pid not in kernel.procs
    assert rt.poll(h).signal == signal.SIGKILL


def test_signalling_a_trainer_that_is_already_gone_is_no_error(job, kernel, tmp_path):
    rt = ProcessRuntime(kernel)
    h = rt.start(_spec(job, tmp_path))
    kernel.end(h.pid, 0)
    rt.poll(h)
    rt.signal(h, signal.SIGINT)
    rt.kill(h)
    assert rt.cleanup(h) is True


def test_a_trainer_that_ignores_the_stop_is_killed_when_the_stop_timeout_passes(tmp_path, kernel):
    """The whole path on the fake kernel: the runner's stop (SIGINT to the group), its deadline, SIGKILL."""
    cfg = parse_config('[[jobs]]\nname = "p"\ncommand = ["sleep", "600"]\nstop_timeout = 10.0\n',
                       "t.toml", tmp_path).jobs[0]
    clock, rt = FakeClock(), ProcessRuntime(kernel)
    r = JobRunner(cfg, rt, StateStore(tmp_path / "state"), tmp_path / "state", clock)
    r.recover()
    clock.advance(0.1)
    r.tick(clock.monotonic())
    (call,) = kernel.spawns
    assert call.argv[:2] == ["sleep", "600"] and call.new_session
    pid = r.handle.pid
    kernel.procs[pid].ignores.add(signal.SIGINT)

    r.handle_message(Stop(Origin.OPERATOR, "operator stop (isaacd stop)"))
    assert kernel.group_signals == [(pid, signal.SIGINT)] and r.state.value == "stopping"
    clock.advance(9.9)
    r.tick(clock.monotonic())
    assert kernel.group_signals == [(pid, signal.SIGINT)] and kernel.procs[pid].state != "Z"
    clock.advance(0.2)
    r.tick(clock.monotonic())  # past the deadline: SIGKILL to the group
    assert kernel.group_signals[1] == (pid, signal.SIGKILL)
    clock.advance(0.1)
    r.tick(clock.monotonic())
    assert r.state.value == "stopped" and pid not in kernel.procs


# ---- adopt / find after a supervisor restart ---------------------------------------------------
def _left_running(kernel: FakeOs, token: str = TOKEN):  # noqa: ANN202
    """A trainer a previous supervisor started: its own session, the token in its environment."""
    trainer = kernel.add(1, env={TOKEN_ENV: token, "PATH": "/usr/bin"})
    return trainer, {"pid": trainer.pid, "pgid": trainer.pid, "start_time": trainer.start_time, "token": token}


def test_a_trainer_left_running_by_the_previous_supervisor_is_adopted_and_watched(job, kernel):
    trainer, saved = _left_running(kernel)
    rt = ProcessRuntime(kernel)
    h = rt.adopt(job, saved)
    assert h is not None and h.state == saved and rt.poll(h) is None
    kernel.end(trainer.pid, -signal.SIGKILL)  # not our child: its exit status goes to init
    st = rt.poll(h)
    assert st is not None and "exit status unknown" in st.describe()


def test_a_pid_reused_by_another_program_is_not_adopted(job, kernel):
    trainer, saved = _left_running(kernel)
    kernel.end(trainer.pid, 0)
    kernel.add(1, pid=trainer.pid, argv=["bash"])  # the same pid, a later start time
    assert ProcessRuntime(kernel).adopt(job, saved) is None


def test_a_pid_reused_while_an_adopted_trainer_was_watched_reads_as_its_end(job, kernel):
    trainer, saved = _left_running(kernel)
    rt = ProcessRuntime(kernel)
    h = rt.adopt(job, saved)
    kernel.end(trainer.pid, 0)
    kernel.add(1, pid=trainer.pid, argv=["bash"])
    assert rt.poll(h) is not None


def test_a_trainer_that_ended_as_a_zombie_is_not_adopted(job, kernel):
    trainer, saved = _left_running(kernel)
    trainer.state = "Z"
    assert ProcessRuntime(kernel).adopt(job, saved) is None


def test_a_saved_token_without_a_pid_finds_the_trainer(job, kernel):
    """The previous supervisor died between the spawn and saving the pid."""
    trainer, _ = _left_running(kernel)
    h = ProcessRuntime(kernel).adopt(job, {"token": TOKEN})
    assert h is not None and h.pid == trainer.pid
    assert h.state == {"pid": trainer.pid, "pgid": trainer.pid, "start_time": trainer.start_time, "token": TOKEN}


def test_find_by_token_picks_the_trainer_not_its_helpers_another_users_process_or_a_zombie(job, kernel):
    other_users = kernel.add(1, env={TOKEN_ENV: TOKEN}, uid=OUR_UID + 1)
    zombie = kernel.add(1, env={TOKEN_ENV: TOKEN}, state="Z")
    other_token, _ = _left_running(kernel, token="tok-other")
    trainer, _ = _left_running(kernel)
    # low pids (pids wrap around), so /proc lists them before the trainer: each must be passed over for a reason
    helper = kernel.add(trainer.pid, pid=40, env={TOKEN_ENV: TOKEN})  # inherits the variable, leads nothing
    # a rank that made a process group of its own (setpgid), still in the trainer's session
    group_leader = kernel.add(trainer.pid, pid=50, pgid=50, env={TOKEN_ENV: TOKEN})
    rt = ProcessRuntime(kernel)
    h = rt.find(job, TOKEN)
    assert h is not None and h.pid == trainer.pid
    assert {other_users.pid, zombie.pid, other_token.pid, helper.pid, group_leader.pid}.isdisjoint({h.pid})
    assert rt.find(job, "tok-nobody") is None and rt.find(job, "") is None


def test_find_finds_nothing_once_the_trainer_has_ended(job, kernel):
    trainer, _ = _left_running(kernel)
    kernel.add(trainer.pid, env={TOKEN_ENV: TOKEN})  # a helper that outlived it is no trainer
    kernel.end(trainer.pid, 0)
    assert ProcessRuntime(kernel).find(job, TOKEN) is None  # so launching again makes no duplicate


# ---- pids: what GPU attribution sees ------------------------------------------------------------
def test_the_jobs_pids_are_the_trainer_and_all_its_descendants_and_nothing_else(job, kernel, tmp_path):
    rt = ProcessRuntime(kernel)
    h = rt.start(_spec(job, tmp_path))
    rank0, rank1 = kernel.add(h.pid), kernel.add(h.pid)
    grandchild = kernel.add(rank1.pid)
    kernel.add(1)  # a stranger
    kernel.add(100)  # the supervisor's own helper
    assert sorted(rt.pids(h)) == sorted([h.pid, rank0.pid, rank1.pid, grandchild.pid])


def test_a_trainer_that_is_gone_has_no_pids(job, kernel):
    trainer, saved = _left_running(kernel)
    rt = ProcessRuntime(kernel)
    h = rt.adopt(job, saved)
    kernel.end(trainer.pid, 0)
    assert rt.pids(h) == []


def test_process_names_with_spaces_and_parentheses_do_not_confuse_the_stat_reader(kernel):
    p = kernel.add(1)
    p.comm = "evil) 1 2 (name"
    st = parse_stat(kernel.read_proc(p.pid, "stat"))
    assert (st.state, st.ppid, st.start_time) == ("S", 1, p.start_time)
    child = kernel.add(p.pid)
    assert sorted(process_tree(p.pid, kernel)) == [p.pid, child.pid]
