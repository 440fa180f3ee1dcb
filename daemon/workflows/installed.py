"""Which Isaac Lab a job's Python has installed: the `isaaclab` distribution's version, asked of that Python.

A pip- or uv-installed Isaac Lab 3.x has no checkout and no VERSION file; the truth is the package metadata of the
interpreter the job runs (`launcher`, e.g. ["/opt/isaaclab/.venv/bin/python"] or ["uv", "run", "--project",
"/opt/proj", "python"]). isaacd never imports isaaclab itself (the daemon has no torch), so it runs the launcher once
with a two-line probe that reads only `importlib.metadata` (no isaaclab import: well under a second) and keeps the
answer for the life of the process, per launcher and owner (`forget()` drops them all; a reload keeps those its config
still names and asks them again in the background, `refresh`).

Each probe runs on a thread of its own (`ProbeCache`), never on the supervisor's tick: a launcher may take long to
answer (a `uv run` resolving its project, a venv on a hung NFS mount) and one job's launcher must not hold up every
other job's recovery (issue 38). The tick asks with `wait=False` and gets `ProbePending` until the answer is in: that
job's launch waits (attempt/planner.py `WaitingForLauncher`), no other job does. `check-config` and `doctor`, the
client, ask with `wait=True` and get the answer when it comes.

The supervisor runs it as root on a shared server: a job's launcher is its owner's to name (issue 32), so the probe
runs as the job's owner (uid, gids, HOME) with a bare environment (PATH, HOME, USER, LOGNAME; none of the
supervisor's variables, which may hold the backup's credentials), as the trainer itself does.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from ..config.users import UnknownUser, user_by_name
from .base import WorkflowError

PROBE_TIMEOUT_S = 60.0  # `uv run` may resolve the project first
_PROBE = ("import importlib.metadata as m\n"
          "try:\n    print('isaaclab=' + m.version('isaaclab'))\n"
          "except m.PackageNotFoundError:\n    print('isaaclab=')\n")

Key = tuple[tuple[str, ...], str | None]  # (launcher, owner)


@dataclass(frozen=True)
class Probe:
    version: str | None  # None: the Python runs but has no `isaaclab` distribution
    error: str | None = None  # the launcher could not be run at all


@dataclass(frozen=True)
class Pending:
    """The launcher's probe runs on its thread and has not answered yet; `since`: when it was started (monotonic)."""

    since: float


@dataclass
class _Entry:
    """One key's probe: its last answer (None until the first one), and whether a probe of it runs now."""

    since: float
    answer: Probe | None = None
    running: bool = True
    done: threading.Event = field(default_factory=threading.Event)


class ProbeCache:
    """The launchers' answers, each asked on a thread of its own. The threads hand their answer over under `_lock`;
    the callers only read. A launcher that could not be run is not kept (it may be fixed by next time): its error is
    handed to the next asker once, and the one after asks again."""

    def __init__(self, run: Callable[[tuple[str, ...], "str | None"], Probe],
                 clock: Callable[[], float] = time.monotonic):
        self._run, self._clock = run, clock
        self._lock = threading.Lock()
        self._entries: dict[Key, _Entry] = {}

    def peek(self, launcher: Sequence[str], owner: str | None) -> Probe | Pending:
        """The answer, or `Pending` (the probe started now if none runs): never waits."""
        key = (tuple(launcher), owner)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry(self._clock())
                self._start(key, entry)
            return self._take(key, entry)

    def ask(self, launcher: Sequence[str], owner: str | None) -> Probe:
        """The answer, waiting for it if need be (the client's way: check-config, doctor)."""
        key = (tuple(launcher), owner)
        while True:
            answer = self.peek(launcher, owner)
            if not isinstance(answer, Pending):
                return answer
            with self._lock:
                entry = self._entries.get(key)
            if entry is not None:
                entry.done.wait()

    def refresh(self, keep: Iterable[tuple[Sequence[str], "str | None"]]) -> None:
        """A reload: the answers of launchers the config no longer names go; those it still names are kept and asked
        again in the background (a venv may have been upgraded), the kept answer read until the new one is in."""
        wanted = {(tuple(launcher), owner) for launcher, owner in keep}
        with self._lock:
            for key in [k for k, e in self._entries.items() if k not in wanted
                        or (e.answer is not None and e.answer.error is not None and not e.running)]:
                del self._entries[key]  # not named any more, or an error not yet said: asked afresh when next used
            for key, entry in self._entries.items():
                if not entry.running:
                    entry.running, entry.since = True, self._clock()
                    entry.done.clear()
                    self._start(key, entry)

    def forget(self) -> None:
        """Ask every launcher again on next use."""
        with self._lock:
            self._entries.clear()

    def _take(self, key: Key, entry: _Entry) -> Probe | Pending:
        """Under the lock: what a caller gets of the entry."""
        if entry.answer is None:
            return Pending(entry.since)
        if entry.answer.error is not None and not entry.running and self._entries.get(key) is entry:
            del self._entries[key]  # said once: the next asker runs it again
        return entry.answer

    def _start(self, key: Key, entry: _Entry) -> None:
        threading.Thread(target=self._probe, args=(key, entry), name=f"isaacd-probe-{key[0][0] if key[0] else ''}",
                         daemon=True).start()

    def _probe(self, key: Key, entry: _Entry) -> None:
        """On the probe's thread: run it, then hand the answer over under the lock."""
        try:
            probe = self._run(*key)
        except Exception as exc:  # noqa: BLE001 - a bug here must still end the wait
            probe = Probe(None, f"the probe failed: {exc}")
        with self._lock:
            if probe.error is not None and entry.answer is not None and entry.answer.error is None:
                # a re-ask after a reload that could not run: not kept, so the next launch asks afresh
                if self._entries.get(key) is entry:
                    del self._entries[key]
            entry.answer, entry.running = probe, False
        entry.done.set()


class ProbePending(WorkflowError):
    """The launcher has not answered isaacd's probe yet (it runs on its own thread): the launch waits for it."""

    def __init__(self, launcher: Sequence[str], since: float):
        self.launcher, self.since = list(launcher), since
        super().__init__("launcher", f"{' '.join(launcher)!r} has not yet answered isaacd's Isaac Lab version probe")


def as_owner(owner: str | None) -> dict[str, Any] | str:
    """subprocess.run's arguments that run a job's program as its owner when this process is root ({} otherwise, or
    for a job without an owner or root's), or why it cannot."""
    if owner is None or owner == "root" or os.geteuid() != 0:
        return {}
    try:
        user = user_by_name(owner)
    except UnknownUser as exc:
        return f"its owner: {exc}"
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": user.home, "USER": user.name,
           "LOGNAME": user.name}
    return {"user": user.uid, "group": user.gid, "extra_groups": list(user.gids), "env": env, "cwd": "/"}


def _run_probe(launcher: tuple[str, ...], owner: str | None = None) -> Probe:
    """The probe itself (on a ProbeCache thread): the launcher's Python asked which isaaclab it has."""
    who = as_owner(owner)
    if isinstance(who, str):
        return Probe(None, who)
    try:
        out = subprocess.run([*launcher, "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                             stdin=subprocess.DEVNULL, **who)
    except FileNotFoundError:
        return Probe(None, f"{launcher[0]} does not exist")
    except PermissionError:
        return Probe(None, f"{launcher[0]} is not executable")
    except subprocess.TimeoutExpired:
        return Probe(None, f"it did not answer within {PROBE_TIMEOUT_S:g} s")
    except OSError as exc:
        return Probe(None, str(exc))
    for line in out.stdout.splitlines():
        if line.startswith("isaaclab="):
            return Probe(line.removeprefix("isaaclab=").strip() or None)
    tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
    return Probe(None, f"exit {out.returncode}: {tail[:300]}")


_cache = ProbeCache(_run_probe)


def installed_isaaclab(launcher: list[str], owner: str | None = None, *, wait: bool = True) -> str:
    """The version of `isaaclab` installed in the launcher's Python (run as `owner`, the job's), or a WorkflowError
    naming `launcher`. `wait=False` (the supervisor's tick): `ProbePending` while the probe runs on its thread."""
    shown = " ".join(launcher)
    probe = _cache.ask(launcher, owner) if wait else _cache.peek(launcher, owner)
    if isinstance(probe, Pending):
        raise ProbePending(launcher, probe.since)
    if probe.error is not None:
        raise WorkflowError("launcher", f"cannot run {shown!r} to read its Isaac Lab version: {probe.error}; launcher "
                                        "must start the Python that has isaaclab installed, e.g. "
                                        '["/opt/isaaclab/.venv/bin/python"]')
    if probe.version is None:
        raise WorkflowError("launcher", f"{shown!r} has no isaaclab installed (no `isaaclab` distribution in "
                                        "importlib.metadata); point launcher at the Python of your Isaac Lab venv "
                                        '(pip install isaaclab / uv), or set isaaclab_dir to an Isaac Lab checkout')
    return probe.version


def refresh(keep: Iterable[tuple[Sequence[str], str | None]]) -> None:
    """A reload: keep the answers of the (launcher, owner) pairs the new config names, asked again in the background;
    forget the rest. Nothing is asked on the caller's thread."""
    _cache.refresh(keep)


def forget() -> None:
    """Ask every launcher again on next use."""
    _cache.forget()
