"""Which Isaac Lab a job's Python has installed: the `isaaclab` distribution's version, asked of that Python.

A pip- or uv-installed Isaac Lab 3.x has no checkout and no VERSION file; the truth is the package metadata of the
interpreter the job runs (`launcher`, e.g. ["/opt/isaaclab/.venv/bin/python"] or ["uv", "run", "--project",
"/opt/proj", "python"]). isaacd never imports isaaclab itself (the daemon has no torch), so it runs the launcher once
with a two-line probe that reads only `importlib.metadata` (no isaaclab import: well under a second) and keeps the
answer for the life of the process, per launcher (`forget()` drops it, e.g. on a config reload).

The supervisor runs it while planning a launch, as root on a shared server: a job's launcher is its owner's to name
(issue 32), so the probe runs as the job's owner (uid, gids, HOME) with a bare environment (PATH, HOME, USER,
LOGNAME; none of the supervisor's variables, which may hold the backup's credentials), as the trainer itself does.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any

from ..config.users import UnknownUser, user_by_name
from .base import WorkflowError

PROBE_TIMEOUT_S = 60.0  # `uv run` may resolve the project first
_PROBE = ("import importlib.metadata as m\n"
          "try:\n    print('isaaclab=' + m.version('isaaclab'))\n"
          "except m.PackageNotFoundError:\n    print('isaaclab=')\n")


@dataclass(frozen=True)
class Probe:
    version: str | None  # None: the Python runs but has no `isaaclab` distribution
    error: str | None = None  # the launcher could not be run at all


# (launcher, owner) -> what its Python said; a launcher that could not be run is not kept (it may be fixed by next
# time)
_answers: dict[tuple[tuple[str, ...], str | None], Probe] = {}


def _probe(launcher: tuple[str, ...], owner: str | None = None) -> Probe:
    if (launcher, owner) not in _answers:
        probe = _run_probe(launcher, owner)
        if probe.error is not None:
            return probe
        _answers[(launcher, owner)] = probe
    return _answers[(launcher, owner)]


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


def installed_isaaclab(launcher: list[str], owner: str | None = None) -> str:
    """The version of `isaaclab` installed in the launcher's Python (run as `owner`, the job's), or a WorkflowError
    naming `launcher`."""
    shown = " ".join(launcher)
    probe = _probe(tuple(launcher), owner)
    if probe.error is not None:
        raise WorkflowError("launcher", f"cannot run {shown!r} to read its Isaac Lab version: {probe.error}; launcher "
                                        "must start the Python that has isaaclab installed, e.g. "
                                        '["/opt/isaaclab/.venv/bin/python"]')
    if probe.version is None:
        raise WorkflowError("launcher", f"{shown!r} has no isaaclab installed (no `isaaclab` distribution in "
                                        "importlib.metadata); point launcher at the Python of your Isaac Lab venv "
                                        '(pip install isaaclab / uv), or set isaaclab_dir to an Isaac Lab checkout')
    return probe.version


def forget() -> None:
    """Ask every launcher again on next use (after a reload: a venv may have been upgraded)."""
    _answers.clear()
