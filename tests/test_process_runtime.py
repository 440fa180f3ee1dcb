"""runtime = "process": find(job, token) on real processes, and the Runtime timing contract.

find() is what the runner uses when the supervisor died between start() and saving the handle: the
trainer carries ISAACD_LAUNCH_TOKEN in its environment, and the session leader that has it is the
trainer (its children inherit the variable but lead nothing).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from isaacd.config.schema import parse_config
from isaacd.runtimes.base import LaunchSpec
from isaacd.runtimes.process import TOKEN_ENV, ProcessRuntime

sys.path.insert(0, str(Path(__file__).parent))
from helpers import wait_for  # noqa: E402

# a trainer with a helper child (as torchrun ranks or Isaac Sim helpers are), both long-lived
TRAINER = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"


def _job(tmp_path: Path):
    return parse_config(f'[[jobs]]\nname = "p"\nlog_root = "{tmp_path}/logs"\n', "test", tmp_path).jobs[0]


def _spec(job, tmp_path: Path, token: str) -> LaunchSpec:
    return LaunchSpec(job=job, argv=[sys.executable, "-c", TRAINER], trainer_args=[], env=dict(os.environ),
                      cwd=tmp_path, log_path=tmp_path / "p.log", token=token)


def test_find_by_launch_token_after_a_crash_before_save(tmp_path):
    job = _job(tmp_path)
    rt = ProcessRuntime()
    token = f"tok-{os.getpid()}-{time.monotonic_ns()}"
    h = rt.start(_spec(job, tmp_path, token))
    try:
        assert h.state["token"] == token
        kids = wait_for(lambda: [p for p in rt.pids(h) if p != h.pid], 20, what="the trainer's helper")
        env = Path(f"/proc/{kids[0]}/environ").read_bytes().split(b"\0")
        assert f"{TOKEN_ENV}={token}".encode() in env  # the helper has the token too, and is not found

        rt2 = ProcessRuntime()  # the next supervisor: nothing saved but the token
        assert rt2.find(job, "someone-else") is None
        assert rt2.find(job, "") is None
        h2 = rt2.find(job, token)
        assert h2 is not None and h2.pid == h.pid and h2.state["pgid"] == h.pid
        assert h2.state["start_time"] == h.state["start_time"]  # what adopt checks against PID reuse
        assert rt2.poll(h2) is None and set(rt2.pids(h2)) == set(rt.pids(h))
        assert rt2.adopt(job, dict(h2.state)) is not None  # the found state adopts like a saved one
        assert rt2.adopt(job, {"token": token}) is not None  # a saved token without a pid: found too
        assert rt2.describe(h2).pid == h.pid

        rt2.signal(h2, signal.SIGTERM)  # the whole group: trainer and helper
        st = wait_for(lambda: rt2.poll(h2), 20, what="the found trainer's end")
        assert "exit status unknown" in st.describe()  # not our child: no status to read
        assert rt2.cleanup(h2) is True
        wait_for(lambda: not any(Path(f"/proc/{k}").exists() and b"Z" not in _state(k) for k in kids), 20,
                 what="the helper gone with its group")
        assert rt2.find(job, token) is None  # ended: nothing to adopt, a launch cannot duplicate it
    finally:
        try:
            os.killpg(h.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        rt.poll(h)


def _state(pid: int) -> bytes:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return b"Z"
    return stat[stat.rindex(b")") + 2:][:1]


def test_no_token_no_variable(tmp_path):
    """An old-style launch (no token): nothing set, nothing to find."""
    job = _job(tmp_path)
    rt = ProcessRuntime()
    spec = _spec(job, tmp_path, "")
    h = rt.start(spec)
    try:
        assert "token" not in h.state
        assert TOKEN_ENV.encode() not in Path(f"/proc/{h.pid}/environ").read_bytes()
    finally:
        rt.kill(h)
        wait_for(lambda: rt.poll(h), 20, what="exit")
        assert rt.cleanup(h) is True


def test_calls_return_promptly(tmp_path):
    job = _job(tmp_path)
    rt = ProcessRuntime()
    times: dict[str, float] = {}

    def timed(name, fn, *a):
        t0 = time.perf_counter()
        r = fn(*a)
        times[name] = max(times.get(name, 0.0), (time.perf_counter() - t0) * 1000)
        return r

    h = timed("start", rt.start, _spec(job, tmp_path, "tok-fast"))
    for _ in range(20):
        timed("poll", rt.poll, h)
        timed("pids", rt.pids, h)
        timed("describe", rt.describe, h)
    timed("find", rt.find, job, "tok-fast")
    timed("signal", rt.signal, h, signal.SIGINT)
    timed("kill", rt.kill, h)
    wait_for(lambda: timed("poll", rt.poll, h), 20, what="exit")
    timed("cleanup", rt.cleanup, h)
    assert max(times.values()) < 100, times  # a fork+exec and /proc walks: ~1-10 ms
