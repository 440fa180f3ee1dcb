"""The OS seam: every call the process runtime, the process-tree walk, the spare keeper and a launch's preparation
(owner_dirs.py, container_spec.hand_dirs_to_container_user) make to the kernel.

Modelled on supervisord's `options` object (supervisor/options.py `ServerOptions.fork`, `.kill`, `.setpgrp`,
`.execve`, `.waitpid`), which its process code calls as `self.config.options.kill(pid, sig)` and its unit tests
replace with a recording `DummyOptions` (supervisor/tests/base.py). Here the same split: each method below is
one thin call with no decision in it; what to spawn, which group to signal, how to read a wait status and
whether a pid is still ours is decided by the callers, so their unit tests run against a fake
(tests/os_fakes.py) without a single process, and the e2e tests prove this thin layer on the real kernel.

Stdlib only: the Ray actor imports proctree.py (and so this module) on the node.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Mapping, Protocol, Sequence

from . import owned_dirs


@dataclass(frozen=True)
class RunAs:
    """Whom a spawned child runs as (issue 32: a job runs as its owner, never as root): set in the child between
    fork and exec in initgroups order, the supplementary groups, then the gid, then the uid. subprocess's
    extra_groups=, group= and user= do exactly that (CPython Modules/_posixsubprocess.c child_exec: setgroups,
    setregid, setreuid, in that order, before the exec; with any of them set it forks, never vforks)."""

    uid: int
    gid: int
    gids: tuple[int, ...]  # every group of the user (os.getgrouplist), the primary one included
    name: str = ""  # for messages, and USER / LOGNAME
    home: str = ""


class Child(Protocol):
    """A process we spawned (subprocess.Popen is one): its pid, and its exit once it has ended. Whoever holds one polls
    it until it answers (issue 37): until then the ended child is a zombie under the supervisor (runtimes/process.py
    polls trainers at each tick and killed spares at each cleanup)."""

    pid: int

    def poll(self) -> int | None:
        """None while it runs; then its return code, reaped: the exit code, or -N for a death by signal N."""


class ProcFs(Protocol):
    """Reading /proc: what the process-tree walk needs (proctree.py)."""

    def list_pids(self) -> list[int]:
        """Every pid /proc shows now."""

    def read_proc(self, pid: int, name: str) -> bytes:
        """/proc/<pid>/<name> (stat, environ, status, ...). Raises OSError once the pid is gone."""

    def proc_exists(self, pid: int) -> bool:
        """/proc/<pid> is there (a zombie is there too)."""

    def proc_owner(self, pid: int) -> int:
        """The uid owning /proc/<pid>. Raises OSError once the pid is gone."""


class OsCalls(ProcFs, Protocol):
    """Everything else the process runtime, the spare keeper and a launch's preparation ask the kernel for."""

    def spawn(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], stdout: BinaryIO,
              new_session: bool, run_as: RunAs | None = None) -> Child:
        """fork+exec: stdin from /dev/null, stdout and stderr both to `stdout`, no other descriptor inherited;
        `new_session` makes the child a session and process-group leader (setsid); `run_as` its user and groups
        (None: ours). Raises OSError when the program cannot be executed (PermissionError when that user may not)."""

    def killpg(self, pgid: int, sig: int) -> None:
        """Signal a whole process group. Raises ProcessLookupError when the group is empty."""

    def getuid(self) -> int: ...

    def getsid(self, pid: int) -> int: ...

    def getpgid(self, pid: int) -> int: ...

    def mkfifo(self, path: Path, mode: int) -> None: ...

    def hand_over(self, path: Path, run_as: RunAs) -> None:
        """chown an existing file or directory to the user, never through a symlink (owned_dirs.hand_over)."""

    def create_owned_file(self, path: Path, run_as: RunAs) -> None:
        """An empty file for the user to write (owned_dirs.create_owned_file)."""

    def make_owned_dir(self, path: Path, run_as: RunAs) -> None:
        """`mkdir -p` handed to the user, no symlink of theirs followed (owned_dirs.make_owned_dir)."""

    def open_state_dir(self, state_dir: Path, reached: tuple[str, ...], private: tuple[str, ...]) -> None:
        """The state dir opened for an owner's trainer: `reached` folders made and traversable (0711), `private` ones
        0700, no file readable by others (owned_dirs.open_state_dir; which folders: owner_dirs.py)."""

    def chown(self, path: Path, uid: int, gid: int) -> None:
        """lchown(2): a symlink itself, never its target (a numeric container.user's dirs: container_spec.py).
        Raises FileNotFoundError when the path is not there."""

    def open_fd(self, path: Path, flags: int) -> int: ...

    def write_fd(self, fd: int, data: bytes) -> int:
        """Write what the kernel takes now; returns how many bytes that was."""

    def close_fd(self, fd: int) -> None: ...

    def file_size(self, path: str | Path) -> int: ...

    def meminfo(self) -> str:
        """/proc/meminfo ("" when it cannot be read)."""


class HostOs:
    """The real kernel. One call per method, no logic: the logic is in the callers, under unit test."""

    def list_pids(self) -> list[int]:
        return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]

    def read_proc(self, pid: int, name: str) -> bytes:
        with open(f"/proc/{pid}/{name}", "rb") as fh:
            return fh.read()

    def proc_exists(self, pid: int) -> bool:
        return Path(f"/proc/{pid}").exists()

    def proc_owner(self, pid: int) -> int:
        return os.stat(f"/proc/{pid}").st_uid

    def spawn(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], stdout: BinaryIO,
              new_session: bool, run_as: RunAs | None = None) -> Child:
        # an empty extra_groups would skip setgroups (child_exec calls it only for a non-empty list) and leave the
        # child root's groups: the primary gid at least
        who = {} if run_as is None else {"user": run_as.uid, "group": run_as.gid,
                                         "extra_groups": list(run_as.gids) or [run_as.gid]}
        return subprocess.Popen(list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=stdout,
                                stderr=subprocess.STDOUT, start_new_session=new_session, close_fds=True, **who)

    def killpg(self, pgid: int, sig: int) -> None:
        os.killpg(pgid, sig)

    def getuid(self) -> int:
        return os.getuid()

    def getsid(self, pid: int) -> int:
        return os.getsid(pid)

    def getpgid(self, pid: int) -> int:
        return os.getpgid(pid)

    def mkfifo(self, path: Path, mode: int) -> None:
        os.mkfifo(path, mode)

    def hand_over(self, path: Path, run_as: RunAs) -> None:
        owned_dirs.hand_over(path, run_as.uid, run_as.gid, run_as.name)

    def create_owned_file(self, path: Path, run_as: RunAs) -> None:
        owned_dirs.create_owned_file(path, run_as.uid, run_as.gid, run_as.name)

    def make_owned_dir(self, path: Path, run_as: RunAs) -> None:
        owned_dirs.make_owned_dir(path, run_as.uid, run_as.gid, run_as.name)

    def open_state_dir(self, state_dir: Path, reached: tuple[str, ...], private: tuple[str, ...]) -> None:
        owned_dirs.open_state_dir(state_dir, reached, private)

    def chown(self, path: Path, uid: int, gid: int) -> None:
        os.chown(path, uid, gid, follow_symlinks=False)

    def open_fd(self, path: Path, flags: int) -> int:
        return os.open(path, flags)

    def write_fd(self, fd: int, data: bytes) -> int:
        return os.write(fd, data)

    def close_fd(self, fd: int) -> None:
        os.close(fd)

    def file_size(self, path: str | Path) -> int:
        return os.path.getsize(path)

    def meminfo(self) -> str:
        try:
            with open("/proc/meminfo", encoding="ascii", errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""


HOST_OS: OsCalls = HostOs()  # the default everywhere; tests pass a fake at construction instead


def signal_pid(pid: int, sig: int) -> None:
    """kill(2) on one pid, for the few who signal a pid rather than a trainer: the container runtimes' and the Ray
    actor's per-pid signal path (proctree.signal_each), the socket locator's liveness probe (signal 0) and the
    crash test's seam (SIGKILL to ourselves). Raises ProcessLookupError / PermissionError as kill(2) does."""
    os.kill(pid, sig)
