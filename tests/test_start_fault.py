"""Which failures of a runtime's start no retry fixes (daemon/attempt/start_fault.py), on the exceptions the process
runtime really raises: `subprocess.Popen`'s OSError of the exec's errno, and runtimes/process.py's RuntimeFailure for
a job run as its owner."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest

from isaacd.attempt.start_fault import start_fault
from isaacd.runtimes.base import RuntimeFailure


def popen_error(argv: list[str]) -> OSError:
    with pytest.raises(OSError) as info:
        subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return info.value


def test_a_program_that_is_not_executable_is_a_fault_naming_it(tmp_path: Path):
    prog = tmp_path / "train.sh"
    prog.write_text("#!/bin/sh\necho hi\n")  # mode 0644: no x bit, for root too
    f = start_fault(popen_error([str(prog)]), str(prog), "process")
    assert f is not None and (f.kind, f.key, f.subject) == ("not_executable", "launcher", str(prog))
    assert "Permission denied" in f.line and "executable for the job's user" in f.fix("j")


def test_a_script_whose_interpreter_is_not_there_is_a_missing_program(tmp_path: Path):
    prog = tmp_path / "train"
    prog.write_text("#!/nonexistent/python3\n")
    prog.chmod(0o755)
    f = start_fault(popen_error([str(prog)]), str(prog), "process")
    assert f is not None and (f.kind, f.subject) == ("missing_program", str(prog))
    assert "#! interpreter" in f.fix("j") and "point `launcher` in the [[jobs]] table of j at a Python" in f.fix("j")
    f = start_fault(popen_error([str(prog)]), str(prog), "process", key="command")  # a raw command names it
    assert f is not None and f.key == "command" and "point `command`" in f.fix("j")


def test_the_owners_permission_denied_worded_by_the_process_runtime_is_a_fault():
    try:
        try:
            raise PermissionError(errno.EACCES, "Permission denied", "/root/.pyenv/bin/python")
        except PermissionError:
            raise RuntimeFailure("/root/.pyenv/bin/python: permission denied for alice, who runs the job") from None
    except RuntimeFailure as exc:
        f = start_fault(exc, "/opt/venv/bin/python", "process")
    assert f is not None and f.kind == "not_executable" and f.subject == "/root/.pyenv/bin/python"
    assert f.line.startswith("/root/.pyenv/bin/python: permission denied for alice")


def test_a_fork_that_fails_for_want_of_resources_is_retried():
    assert start_fault(BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable"), "p", "process") is None
    assert start_fault(OSError(errno.ENOMEM, "Cannot allocate memory"), "p", "process") is None


def test_a_container_runtimes_failure_is_retried_even_with_an_errno_inside():
    try:
        try:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/run/podman/podman.sock")
        except FileNotFoundError as exc:
            raise RuntimeFailure("podman API not reachable") from exc
    except RuntimeFailure as exc:
        assert start_fault(exc, "python", "podman") is None
    assert start_fault(RuntimeFailure("systemd unit did not start"), "python", "process") is None
