"""Run a real `isaacd run` in a subprocess and talk to it through its real control socket."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from isaacd.control import request
from isaacd.watchdogs.gpufeed import FeedTick

BIN = Path(sys.executable).parent


def write_config(tmp: Path, jobs: str, extra: str = "") -> Path:
    cfg = tmp / "isaacd.toml"
    cfg.write_text(textwrap.dedent("""
        [supervisor]
        state_dir = "state"
        control_socket = "isaacd.sock"
        log_format = "json"
        tick_interval = 0.1
        [metrics]
        enabled = false
        [gpu]
        source = "none"
        """) + textwrap.dedent(extra) + textwrap.dedent(jobs))
    return cfg


def builtin_job(name: str = "cp", **over: Any) -> str:
    fields = {"num_envs": 64, "max_iterations": 400, "save_interval": 2, "log_root": "logs",
              "stop_timeout": 10.0, **over}
    body = "\n".join(f"{k} = {json.dumps(v)}" for k, v in fields.items() if not isinstance(v, dict))
    tables = "".join(f"\n[jobs.{k}]\n" + "\n".join(f"{kk} = {json.dumps(vv)}" for kk, vv in v.items())
                     for k, v in fields.items() if isinstance(v, dict))
    return f'\n[[jobs]]\nname = "{name}"\n{body}\n{tables}\n'


def wait_for(pred: Callable[[], Any], timeout: float, interval: float = 0.1, what: str = "condition") -> Any:
    deadline = time.time() + timeout
    last_exc: Exception | None = None
    while time.time() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as exc:  # noqa: BLE001 - supervisor may still be starting
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_exc})" if last_exc else ""))


class SupervisorProc:
    def __init__(self, config: Path, env: dict[str, str] | None = None):
        self.config = config
        self.extra_env = env or {}
        self.socket = config.parent / "isaacd.sock"
        self.log_path = config.parent / "supervisor.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wait: bool = True) -> "SupervisorProc":
        self._log = open(self.log_path, "ab")
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"} | self.extra_env
        self.proc = subprocess.Popen([str(BIN / "isaacd"), "run", "--config", str(self.config)],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        if wait:
            wait_for(lambda: self.status(), 30, what="supervisor control socket")
        return self

    def status(self) -> dict[str, Any]:
        return request(self.socket, {"cmd": "status"}, timeout=5)

    def job(self, name: str) -> dict[str, Any]:
        return next(j for j in self.status()["jobs"] if j["name"] == name)

    def events(self, name: str) -> list[dict[str, Any]]:
        return request(self.socket, {"cmd": "events", "job": name}, timeout=5)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        res = subprocess.run([str(BIN / "isaacd"), "--config", str(self.config), *args],
                             capture_output=True, text=True, timeout=60)
        if check and res.returncode != 0:
            raise AssertionError(f"isaacd {' '.join(args)} -> {res.returncode}: {res.stderr}")
        return res

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait()
        self._log.close()
        return rc

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def wait_spare_ready(sp: SupervisorProc, job: str, timeout: float, interval: float = 0.1) -> dict[str, Any]:
    """Wait until `job`'s warm spare is ready (status's `spare.state`) and return the job's status then.

    A test that kill -9s a trainer while its job keeps a spare calls this first, so the kill takes the path the
    test means: a kill that lands while the new spare still boots starts the next attempt cold, one that lands a
    moment later hands it to the spare. That race once made one real Isaac Lab test swing by a whole cold start
    (~8 s), 0.2 s either side of the spare's `spare_ready`. A spare that is `off` never comes: that fails at once,
    with status's reason, instead of at the timeout."""
    deadline = time.time() + timeout
    last: dict[str, Any] = {}
    while time.time() < deadline:
        try:
            j = sp.job(job)
        except Exception:  # noqa: BLE001 - the control socket may be busy for a moment
            j = None
        if j is not None:
            spare = j.get("spare") or {}
            last = spare
            # the spare beside this trainer, not one that just became the trainer (its pid is the job's then)
            if spare.get("state") == "ready" and spare.get("pid") not in (None, j["pid"]):
                return j
            if spare.get("state") == "off":
                raise AssertionError(f"{job} keeps no spare: {spare.get('reason')}")
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {job}'s spare to be ready (last: {last})")


def alive(pid: int | None) -> bool:
    """A process that runs (or is stopped): it exists and is neither a zombie (ended, not yet reaped by its parent)
    nor dead."""
    if not pid or pid < 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def children_of(pid: int) -> dict[int, str]:
    """The processes whose parent is `pid`, with their state letter from /proc/<pid>/stat ("Z": a zombie, ended and
    not reaped by its parent; `ps` shows it `<defunct>`)."""
    out: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        state, ppid = stat[stat.rindex(")") + 2:].split()[:2]  # after "(comm)", which may hold spaces
        if int(ppid) == pid:
            out[int(entry.name)] = state
    return out


def zombies_of(pid: int) -> list[int]:
    return sorted(child for child, state in children_of(pid).items() if state == "Z")


def kill_tree_by_job(status_job: dict[str, Any]) -> None:
    for pid in status_job.get("pids") or [status_job["pid"]]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def steps(run_dir: Path) -> list[int]:
    """Every iteration step a run logged to TensorBoard (rsl_rl's `.../time` tags are stepped by seconds)."""
    return sorted(step_walls(run_dir))


def step_walls(root: Path, skip_dir: str | None = None) -> dict[int, float]:
    """{iteration step: the wall time of its first point} in the TensorBoard files under `root` (rsl_rl's `.../time`
    tags, stepped by seconds, left out), leaving out those under a directory named `skip_dir` (an evaluation's)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    out: dict[int, float] = {}
    for f in sorted(root.rglob("events.out.tfevents.*")):
        if skip_dir is not None and skip_dir in f.relative_to(root).parts[:-1]:
            continue
        for ev in EventFileLoader(str(f)).Load():
            if any(not v.tag.endswith("/time") for v in ev.summary.value):
                out[ev.step] = min(out.get(ev.step, ev.wall_time), ev.wall_time)
    return out


@contextlib.contextmanager
def unix_users(groups: dict[str, str], names: dict[str, str],
               member: dict[str, list[str]]) -> Iterator[dict[str, Any]]:
    """Real Unix groups and users (groupadd, useradd -m, nologin shell), removed afterwards: `groups` maps a role to a
    group name, `names` a person to a user name, `member` a person to the group names they join. Yields each person's
    pwd entry and each role's group name. Callers make the names unique (parallel workers never collide)."""
    made_groups: list[str] = []
    made: list[str] = []
    try:
        for g in groups.values():
            subprocess.run(["groupadd", g], check=True, capture_output=True)
            made_groups.append(g)
        for who, n in names.items():
            extra = ["-G", ",".join(member[who])] if member.get(who) else []
            subprocess.run(["useradd", "-m", "-s", "/usr/sbin/nologin", *extra, n], check=True, capture_output=True)
            made.append(n)
        yield {**{k: pwd.getpwnam(v) for k, v in names.items()}, **groups}
    finally:
        for n in made:
            subprocess.run(["userdel", "-r", n], capture_output=True)
        for g in made_groups:
            subprocess.run(["groupdel", g], capture_output=True)


class NoGpus:
    """A GPU feed for a WatchdogEngine on a host with no GPUs: empty ticks, no power cap, nothing to mark."""

    def poll(self) -> FeedTick:
        return FeedTick()

    def set_power_limit(self, gpu: int, watts: float) -> None:
        raise PermissionError

    def mark_unhealthy(self, gpu: int, reason: str) -> None:
        pass
