"""Is a runtime's failure to start a trainer one that no retry fixes? The exception classified, never acted on.

The process runtime's start is a fork and an exec (os_seam/oscalls.py): when the kernel refuses the exec, Python
raises the OSError of its errno (`subprocess.Popen`), and the process runtime words a PermissionError of a job run as
its owner as a `RuntimeFailure` raised from inside its handler (runtimes/process.py), so the errno is the failure's
context. What the kernel says there does not change by waiting:
  * EACCES, EPERM: the program, the #! interpreter it names, or a directory above either is not executable by the
    job's user (a venv under a 0700 home: issue 37);
  * ENOENT, ENOTDIR: the program, or the interpreter its #! line names, is not there;
  * ENOEXEC: the file is no program the kernel can run (a script without a #! line).
Anything else is retried as a crash, as before: EAGAIN or ENOMEM (fork on a busy host), and every `RuntimeFailure` of
its own (Podman's API down, a systemd unit that did not start), whose words say what to do.

Pure: an exception in, a verdict out (tests/test_start_fault.py).
"""

from __future__ import annotations

import errno

from .config_fault import ConfigFault

_NOT_EXECUTABLE = {errno.EACCES, errno.EPERM, errno.ENOEXEC}
_MISSING = {errno.ENOENT, errno.ENOTDIR}


def start_fault(exc: BaseException, program: str, runtime: str, key: str = "launcher") -> ConfigFault | None:
    """The fault no retry fixes in a failed start (`program`: the argv[0] the runtime was asked to exec; `key`: the
    config key that names it, `launcher` or a raw `command`), or None when another try may work. Only the process runtime's exec is read: a container runtime's OSError is its own
    plumbing (Podman's socket not there yet is an ENOENT that the next try may not meet)."""
    cause = _os_error(exc) if runtime == "process" else None
    if cause is None or cause.errno is None:
        return None
    subject = str(cause.filename) if cause.filename else program
    if cause.errno in _NOT_EXECUTABLE:
        return ConfigFault("not_executable", str(exc), key, subject)
    if cause.errno in _MISSING:
        return ConfigFault("missing_program", str(exc), key, subject)
    return None


def _os_error(exc: BaseException) -> OSError | None:
    """The OSError of a failed exec: the exception itself, or the one a runtime's own failure was raised from (its
    cause, or the context of a `raise ... from None` inside the handler)."""
    seen: BaseException | None = exc
    for _ in range(3):  # the runtime's wording wraps the kernel's once; never loop on a cycle
        if seen is None:
            return None
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ if seen.__cause__ is not None else seen.__context__
    return None
