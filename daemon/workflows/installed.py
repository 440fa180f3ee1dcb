"""Which Isaac Lab a job's Python has installed: the `isaaclab` distribution's version, asked of that Python.

A pip- or uv-installed Isaac Lab 3.x has no checkout and no VERSION file; the truth is the package metadata of the
interpreter the job runs (`launcher`, e.g. ["/opt/isaaclab/.venv/bin/python"] or ["uv", "run", "--project",
"/opt/proj", "python"]). isaacd never imports isaaclab itself (the daemon has no torch), so it runs the launcher once
with a two-line probe that reads only `importlib.metadata` (no isaaclab import: well under a second) and keeps the
answer for the life of the process, per launcher (`forget()` drops it, e.g. on a config reload).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from .base import WorkflowError

PROBE_TIMEOUT_S = 60.0  # `uv run` may resolve the project first
_PROBE = ("import importlib.metadata as m\n"
          "try:\n    print('isaaclab=' + m.version('isaaclab'))\n"
          "except m.PackageNotFoundError:\n    print('isaaclab=')\n")


@dataclass(frozen=True)
class Probe:
    version: str | None  # None: the Python runs but has no `isaaclab` distribution
    error: str | None = None  # the launcher could not be run at all


# launcher -> what its Python said; a launcher that could not be run is not kept (it may be fixed by next time)
_answers: dict[tuple[str, ...], Probe] = {}


def _probe(launcher: tuple[str, ...]) -> Probe:
    if launcher not in _answers:
        probe = _run_probe(launcher)
        if probe.error is not None:
            return probe
        _answers[launcher] = probe
    return _answers[launcher]


def _run_probe(launcher: tuple[str, ...]) -> Probe:
    try:
        out = subprocess.run([*launcher, "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
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


def installed_isaaclab(launcher: list[str]) -> str:
    """The version of `isaaclab` installed in the launcher's Python, or a WorkflowError naming `launcher`."""
    shown = " ".join(launcher)
    probe = _probe(tuple(launcher))
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
