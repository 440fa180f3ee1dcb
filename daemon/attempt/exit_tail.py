"""The tail of a trainer's output that explains its exit: quoted in the `exited` event and the status reason, and
searched for a CUDA out-of-memory (gpu/oom_message.py) or an error no restart can fix (config_fault.py).
`isaacd logs` itself is cli/job_logs.py."""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..gpu.oom_message import CudaOomLine, find_cuda_oom
from ..jobs.messages import ReasonClass
from ..runtimes.base import ExitStatus, Handle
from .config_fault import ConfigFault, Named, find_config_fault
from .torchrun_report import find_report


# ---- why a trainer exited, in its own words -----------------------------------------------------
TAIL_BYTES = 8192  # read this much of the end of the attempt's output
TAIL_LINES = 8  # quoted in the exit event
# searched for a CUDA out-of-memory: Hydra's "Set the environment variable HYDRA_FULL_ERROR=1 ..." and Kit's
# shutdown lines can follow the exception by more than TAIL_LINES
OOM_SCAN_BYTES = 65536
OOM_SCAN_LINES = 400
KEY_LINE_CHARS = 240  # quoted in the status reason

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# what a crash's last words look like: a Python exception line, an errno text, a CUDA/NCCL error
_KEY = re.compile(r"^\s*[\w.]*(Error|Exception|Interrupt|Exit)\b.*|.*(No space left|out of memory|Errno \d+|"
                  r"\bFATAL\b|\bfatal\b|error:).*")
# lines that frame or label a report and say nothing of the error: a frame of `====`/`----`, torchrun's "Failures:"
# and "<NO_OTHER_FAILURES>" (torchrun_report.py), Hydra's pointer to its full stack trace
_DECORATION = re.compile(r"^\s*(?:[=\-*~_#+]{3,}|Failures:|<NO_OTHER_FAILURES>|Root Cause \(first observed failure\):|"
                         r"\[\d+\]:|Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace\.)\s*$")


@dataclass(frozen=True)
class ExitWithOutput(ExitStatus):
    """An exit status that also quotes the end of the trainer's output: "exited with code 1: OSError: [Errno
    28] No space left on device" says what "exited with code 1" alone does not."""

    output_tail: tuple[str, ...] = ()
    key_line: str = ""
    cuda_oom: CudaOomLine | None = None  # the output says the GPU ran out of memory
    config_fault: ConfigFault | None = None  # the output says it cannot run as configured: no restart helps

    def describe(self) -> str:
        base = super().describe()
        return f"{base}: {self.key_line}" if self.key_line else base

    @property
    def reason_class(self) -> ReasonClass:
        if self.config_fault is not None:
            return ReasonClass.CONFIG_ERROR
        return ReasonClass.CUDA_OOM if self.cuda_oom is not None else super().reason_class

    def as_json(self) -> dict[str, Any]:
        out = {**super().as_json(), "output_tail": list(self.output_tail)}
        if self.cuda_oom is not None:
            out["cuda_oom"] = {"kind": self.cuda_oom.kind, "line": self.cuda_oom.line}
        if self.config_fault is not None:
            out["config_error"] = {"kind": self.config_fault.kind, "line": self.config_fault.line,
                                   "key": self.config_fault.key}
        return out


def read_output_tail(path: Path, offset: int = 0, max_bytes: int = TAIL_BYTES,
                     max_lines: int = TAIL_LINES) -> list[str]:
    """The last lines the trainer wrote at or after `offset` (its attempt's start), oldest first."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            start = max(offset, size - max_bytes, 0)
            fh.seek(start)
            data = fh.read(max_bytes)
    except OSError:
        return []
    lines = [_ANSI.sub("", ln).rstrip() for ln in data.decode("utf-8", errors="replace").replace("\r", "\n")
             .split("\n")]
    if start > offset and lines:
        lines = lines[1:]  # the first line was cut by the window
    return [ln for ln in lines if ln.strip()][-max_lines:]


def key_line(lines: list[str]) -> str:
    """The line that most likely says why, among the last TAIL_LINES that say anything: the last exception/error-
    looking line, else the last line that is no decoration (a frame of `====`, a report's label)."""
    said = [ln for ln in lines if ln.strip() and not _DECORATION.match(ln)][-TAIL_LINES:]
    pick = next((ln for ln in reversed(said) if _KEY.match(ln)), said[-1] if said else "")
    return _shorten(pick)


def _error_line(lines: list[str]) -> str | None:
    """The last exception/error-looking line, or None (a torchrun rank's own output: torchrun_report.py)."""
    said = [ln for ln in lines if ln.strip() and not _DECORATION.match(ln)][-TAIL_LINES:]
    pick = next((ln for ln in reversed(said) if _KEY.match(ln)), None)
    return _shorten(pick) if pick is not None else None


def explaining_line(scanned: list[str]) -> str:
    """The line that explains an exit: under torchrun, the root cause its report gives (a rank's exception, else
    the ranks' own last error line, else the rank and its exit code); otherwise `key_line`."""
    report = find_report(scanned)
    return _shorten(report.cause(_error_line)) if report is not None else key_line(scanned)


def _shorten(line: str) -> str:
    line = line.strip()
    return line if len(line) <= KEY_LINE_CHARS else line[:KEY_LINE_CHARS - 1] + "…"


def _failed_by_itself(status: ExitStatus) -> bool:
    """A non-zero exit code, or abort(): a C++ exception nobody caught ("terminate called after throwing an instance
    of 'c10::OutOfMemoryError'") ends in SIGABRT. Other signals, OOM kills and stops come from outside: their cause
    is not in the trainer's output."""
    if status.oom_killed or status.external_stop:
        return False
    if status.signal is not None:
        return status.signal == signal.SIGABRT
    return status.code not in (None, 0)


def exit_with_log_tail(status: ExitStatus, handle: Handle | None, named: Named | None = None) -> ExitStatus:
    """For a trainer that failed on its own, the same status quoting its last output (and recognising a CUDA
    out-of-memory in it, or an error no restart can fix: `named` are the job's config values such an error may
    name, config_fault.named_in_config)."""
    if handle is None or not _failed_by_itself(status):
        return status
    log_path = handle.state.get("log_path")
    if not log_path:
        return status  # container runtimes keep output in the journal / podman logs
    offset = handle.state.get("log_offset")
    scanned = read_output_tail(Path(log_path), offset if isinstance(offset, int) else 0, OOM_SCAN_BYTES,
                               OOM_SCAN_LINES)
    lines = scanned[-TAIL_LINES:]
    if not lines:
        return status
    oom = find_cuda_oom(scanned)
    report = find_report(scanned)  # torchrun's traceback and report are not the trainer's error: look past them
    decisive = report.decisive_lines() if report is not None else scanned
    code = report.exitcode if report is not None and report.exitcode is not None else status.code  # the rank's
    fault = find_config_fault(decisive, code, named) if named is not None and oom is None else None
    said = oom.line if oom else fault.line if fault else None
    return ExitWithOutput(code=status.code, signal=status.signal, oom_killed=status.oom_killed,
                          external_stop=status.external_stop, detail=status.detail, output_tail=tuple(lines),
                          key_line=_shorten(said) if said else explaining_line(scanned), cuda_oom=oom,
                          config_fault=fault)


BOOT_LINE_BYTES = 4096  # the end of the output a booting trainer's last line is read from (a tick's read, not more)


def last_output_line(handle: Handle | None) -> str | None:
    """The trainer's last line of output since its attempt began (ANSI colours and progress-bar carriage returns
    resolved), for `isaacd status` while it boots. None where the output is not a file here: the container runtimes
    keep it in the journal or `podman logs` (`isaacd logs JOB` shows it)."""
    log_path = handle.state.get("log_path") if handle is not None else None
    if not log_path:
        return None
    offset = handle.state.get("log_offset") if handle is not None else None
    lines = read_output_tail(Path(log_path), offset if isinstance(offset, int) else 0, BOOT_LINE_BYTES, 1)
    return _shorten(lines[-1]) if lines else None
