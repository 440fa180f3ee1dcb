"""A fake kernel for the OS seam (isaacd/os_seam/oscalls.py): a process table, a /proc rendered from it, process groups
that signals reach, children that are reaped by poll. It plays supervisord's DummyOptions part
(supervisor/tests/base.py): it records what was asked (spawns, group signals) and answers what a test set up,
so the process runtime's decisions are proven without a single process. The thin real calls are proven by the
e2e tests (test_process_runtime.py).
"""

from __future__ import annotations

import errno
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Mapping, Sequence

from isaacd.os_seam.owned_dirs import OwnershipRefused

OUR_UID = 1000


@dataclass
class FakeProcess:
    pid: int
    ppid: int
    pgid: int
    sid: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    uid: int = OUR_UID
    start_time: int = 0
    comm: str = "python3"
    rss_kib: int = 2048  # /proc/<pid>/status VmRSS
    state: str = "S"  # Z once it ended and its parent has not reaped it
    returncode: int | None = None  # Popen's convention: exit code, or -N for a death by signal N
    signals: list[int] = field(default_factory=list)
    ignores: set[int] = field(default_factory=set)  # signals it survives (SIGKILL never)
    parent_is_us: bool = False  # spawned by the runtime under test: a zombie until poll reaps it
    # a signal's death lands later, when the test calls end(): on a busy host a SIGKILLed child is still running
    # when the supervisor first looks (the kernel kills it once it is scheduled)
    slow_to_die: bool = False


@dataclass
class SpawnCall:
    argv: list[str]
    cwd: Path
    env: dict[str, str]
    new_session: bool
    stdout: BinaryIO
    run_as: object = None  # oscalls.RunAs: whom the child was to run as (None: us)


class FakeChild:
    """What spawn returns: Popen's pid and poll, over the fake process table."""

    def __init__(self, kernel: FakeOs, pid: int):
        self.kernel, self.pid = kernel, pid

    def poll(self) -> int | None:
        self.kernel.polled.append(self.pid)
        p = self.kernel.procs.get(self.pid)
        if p is None or p.state != "Z":
            return None if p is not None else self.kernel.reaped[self.pid]
        del self.kernel.procs[self.pid]  # reaped
        self.kernel.reaped[self.pid] = p.returncode  # type: ignore[assignment]
        return p.returncode


class FakeOs:
    """Implements oscalls.OsCalls over a dict of FakeProcess."""

    def __init__(self, first_pid: int = 4000, our_pid: int = 100) -> None:
        self.procs: dict[int, FakeProcess] = {}
        self.reaped: dict[int, int] = {}
        self.polled: list[int] = []  # every waitpid(WNOHANG) a child's poll made, by pid, in order
        self.spawns: list[SpawnCall] = []
        self.group_signals: list[tuple[int, int]] = []  # (pgid, sig), in order
        self.spawn_error: OSError | None = None
        self._next_pid = first_pid
        self._clock_ticks = 50_000
        self.our_pid = our_pid
        self.fifo_writes: dict[int, bytes] = {}  # by fd, what was written (fds never written to are absent)
        self.open_fds: dict[int, tuple[str, int]] = {}  # fd -> (path, flags), until closed
        self._next_fd = 100
        self.meminfo_text = ""  # /proc/meminfo as the test sets it
        self.handed: list[tuple[str, int, int]] = []  # (path, uid, gid) given to a job's owner, in order
        self.opened_state_dirs: list[str] = []  # each state dir opened for an owner's trainer (open_state_dir)
        self.chowned: list[tuple[str, int, int]] = []  # (path, uid, gid) lchowned (a numeric container.user's dirs)
        self.ownership_refusals: dict[str, str] = {}  # path -> why the real seam would refuse to hand it over

    # ---- setting the scene ----------------------------------------------------------------------
    def add(self, ppid: int, *, pgid: int | None = None, sid: int | None = None, env: Mapping[str, str] = {},
            uid: int = OUR_UID, argv: Sequence[str] = ("python3",), pid: int | None = None,
            state: str = "S") -> FakeProcess:
        """A process someone else started (a previous supervisor's trainer, its helpers, strangers)."""
        if pid is None:
            self._next_pid += 1
            pid = self._next_pid
        parent = self.procs.get(ppid)
        self._clock_ticks += 7
        p = FakeProcess(pid=pid, ppid=ppid, pgid=pgid if pgid is not None else (parent.pgid if parent else pid),
                        sid=sid if sid is not None else (parent.sid if parent else pid), argv=list(argv),
                        env=dict(env), uid=uid, start_time=self._clock_ticks, state=state)
        self.procs[pid] = p
        return p

    def end(self, pid: int, returncode: int) -> None:
        """The process ends (exit code, or -N for signal N): on its own, or a slow_to_die one's signal landing."""
        p = self.procs[pid]
        p.returncode = returncode
        if p.parent_is_us:
            p.state = "Z"
        else:
            del self.procs[pid]  # init reaps what is not ours
        for orphan in self.procs.values():
            if orphan.ppid == pid:
                orphan.ppid = 1

    def zombies(self) -> list[int]:
        """Our children that have ended and are not reaped yet (`<defunct>` under us in ps)."""
        return [p.pid for p in self.procs.values() if p.parent_is_us and p.state == "Z"]

    # ---- ProcFs ---------------------------------------------------------------------------------
    def list_pids(self) -> list[int]:
        return sorted(self.procs)

    def _get(self, pid: int) -> FakeProcess:
        p = self.procs.get(pid)
        if p is None:
            raise ProcessLookupError(errno.ESRCH, f"no process {pid}")
        return p

    def read_proc(self, pid: int, name: str) -> bytes:
        p = self.procs.get(pid)
        if p is None:
            raise FileNotFoundError(errno.ENOENT, f"/proc/{pid}/{name}")
        if name == "stat":
            # pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
            # cutime cstime priority nice num_threads itrealvalue starttime ...
            rest = [p.state, p.ppid, p.pgid, p.sid] + [0] * 15 + [p.start_time, 1234, 56]
            return f"{p.pid} ({p.comm}) {' '.join(map(str, rest))}\n".encode()
        if name == "environ":
            return b"".join(f"{k}={v}".encode() + b"\0" for k, v in p.env.items())
        if name == "status":
            return f"Name:\t{p.comm}\nVmRSS:\t  {p.rss_kib} kB\n".encode()
        raise FileNotFoundError(errno.ENOENT, f"/proc/{pid}/{name}")

    def proc_exists(self, pid: int) -> bool:
        return pid in self.procs

    def proc_owner(self, pid: int) -> int:
        return self._get(pid).uid

    # ---- processes ------------------------------------------------------------------------------
    def spawn(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], stdout: BinaryIO,
              new_session: bool, run_as: object = None) -> FakeChild:
        self.spawns.append(SpawnCall(list(argv), cwd, dict(env), new_session, stdout, run_as))
        if self.spawn_error is not None:
            raise self.spawn_error
        self._next_pid += 1
        pid = self._next_pid
        # a new session leads its own group; otherwise the child stays in ours (add() inherits the parent's)
        p = self.add(self.our_pid, pid=pid, env=env, argv=argv, pgid=pid if new_session else None,
                     sid=pid if new_session else None, uid=getattr(run_as, "uid", OUR_UID))
        p.cwd, p.parent_is_us = cwd, True
        return FakeChild(self, p.pid)

    def killpg(self, pgid: int, sig: int) -> None:
        self.group_signals.append((pgid, sig))
        members = [p for p in self.procs.values() if p.pgid == pgid and p.state != "Z"]
        if not members and not any(p.pgid == pgid for p in self.procs.values()):
            raise ProcessLookupError(errno.ESRCH, f"no process group {pgid}")
        for p in members:
            p.signals.append(sig)
            if (sig == signal.SIGKILL or sig not in p.ignores) and not p.slow_to_die:
                self.end(p.pid, -sig)

    def getuid(self) -> int:
        return OUR_UID

    def getsid(self, pid: int) -> int:
        return self._get(pid).sid

    def getpgid(self, pid: int) -> int:
        return self._get(pid).pgid

    # ---- files (the spare's FIFO, a launch's owned directories) ----------------------------------
    def mkfifo(self, path: Path, mode: int) -> None:
        Path(path).touch(mode)

    def hand_over(self, path: Path, run_as: object) -> None:
        """Recorded, never chowned; a path the test set in `ownership_refusals` is refused as owned_dirs would."""
        if str(path) in self.ownership_refusals:
            raise OwnershipRefused(f"{path}: {self.ownership_refusals[str(path)]}")
        self.handed.append((str(path), run_as.uid, run_as.gid))  # type: ignore[attr-defined]

    def create_owned_file(self, path: Path, run_as: object) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).touch()
        self.hand_over(path, run_as)

    def make_owned_dir(self, path: Path, run_as: object) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        self.hand_over(path, run_as)

    def open_state_dir(self, state_dir: Path, reached: tuple[str, ...], private: tuple[str, ...]) -> None:
        """Recorded, the `reached` folders made (the spare's FIFO and the workdir go there); no mode changed."""
        self.opened_state_dirs.append(str(state_dir))
        for name in reached:
            (Path(state_dir) / name).mkdir(parents=True, exist_ok=True)

    def chown(self, path: Path, uid: int, gid: int) -> None:
        if not Path(path).exists() and not Path(path).is_symlink():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        self.chowned.append((str(path), uid, gid))

    def open_fd(self, path: Path, flags: int) -> int:
        fd, self._next_fd = self._next_fd, self._next_fd + 1
        self.open_fds[fd] = (str(path), flags)
        return fd

    def write_fd(self, fd: int, data: bytes) -> int:
        self.fifo_writes[fd] = self.fifo_writes.get(fd, b"") + data
        return len(data)

    def close_fd(self, fd: int) -> None:
        self.open_fds.pop(fd, None)

    def meminfo(self) -> str:
        return self.meminfo_text

    def file_size(self, path: str | Path) -> int:
        return Path(path).stat().st_size
