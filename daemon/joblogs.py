"""The trainer's output: `isaacd logs JOB` wherever the job's runtime put it, and the tail of it that
explains an exit (quoted in the `exited` event and the status reason)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from .config.schema import Config
from .configfault import ConfigFault, Named, find_config_fault
from .gpu.oom_message import CudaOomLine, find_cuda_oom
from .wording import no_such_job
from .jobs.messages import ReasonClass
from .runtimes.base import ExitStatus, Handle
from .runtimes.container_spec import container_name
from .runtimes.quadlet import unit_name
from .history.store import StateStore


def show_logs(cfg: Config, job: str, follow: bool = False, lines: int = 50, attempt: int | None = None) -> int:
    job_cfg = cfg.job(job)
    if job_cfg is None:
        print(f"isaacd: {no_such_job(job, [j.name for j in cfg.jobs])}", file=sys.stderr)
        return 1
    if attempt is not None:
        return show_attempt_logs(cfg, job, attempt, follow, lines)
    if job_cfg.runtime == "systemd":
        unit = _attempt_handle(cfg, job).get("unit") or unit_name(job)  # a warm spare's unit that took it over
        cmd = ["journalctl", "--no-pager", "-n", str(lines), "-u", str(unit)] + (["-f"] if follow else [])
        return subprocess.call(cmd)
    if job_cfg.runtime == "podman":
        container = _attempt_handle(cfg, job).get("container") or container_name(job)  # or a spare's, took over
        cmd = ["podman", "logs", "--tail", str(lines)] + (["-f"] if follow else []) + [str(container)]
        return subprocess.call(cmd)
    path = cfg.supervisor.state_dir / "logs" / f"{job}.log"
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        print(f"isaacd: no log yet at {path}", file=sys.stderr)
        return 1
    return _print_log(fh, path, lines, follow)


def _print_log(fh: BinaryIO, path: Path, lines: int, follow: bool, end: int | None = None) -> int:
    """The last `lines` lines from fh's position up to `end` (None: the end of the file), then, with `follow`, what
    is written after them until Ctrl-C."""
    with fh:
        tail: deque[bytes] = deque(maxlen=lines)
        pos = fh.tell()
        for line in fh:  # streamed: a job's log holds every attempt's output
            if end is not None and pos + len(line) > end:
                if pos < end:
                    tail.append(line[:end - pos])
                break
            pos += len(line)
            tail.append(line)
        for line in tail:
            sys.stdout.buffer.write(line)
        sys.stdout.flush()
        while follow:
            chunk = fh.read()
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
            else:
                time.sleep(0.5)
                if os.stat(path).st_size < fh.tell():
                    fh.seek(0)  # truncated/rotated
    return 0


def show_attempt_logs(cfg: Config, job: str, number: int, follow: bool, lines: int) -> int:
    """`isaacd logs --attempt N JOB`: attempt N's output. The process and ray runtimes append every attempt to one
    file and save where each began (its handle's log_offset, runtimes/process.py): N's output runs from its offset to
    the next attempt's. A systemd unit's journal is read from N's start to the next's; podman keeps only the newest
    attempt's container (the next start replaces it), so an earlier one's output is gone there."""
    try:
        attempts = StateStore(cfg.supervisor.state_dir).load(job).attempts
    except Exception as exc:  # noqa: BLE001 - a damaged history: the running supervisor rebuilds it, we only read
        print(f"isaacd: cannot read {job}'s history: {exc}", file=sys.stderr)
        return 1
    found = next((i for i, a in enumerate(attempts) if a.number == number), None)
    if found is None:
        have = f"attempts {attempts[0].number}-{attempts[-1].number}" if attempts else "no attempts yet"
        print(f"isaacd: {job} has no attempt {number} ({have}; `isaacd events {job}` shows each start)",
              file=sys.stderr)
        return 1
    a, newest = attempts[found], found == len(attempts) - 1
    if follow and not newest:
        print(f"isaacd: attempt {number} of {job} has ended; -f follows only its newest attempt "
              f"({attempts[-1].number})", file=sys.stderr)
        return 2
    st = a.handle or {}
    if a.runtime == "systemd" and st.get("unit"):
        # from N's start to the next attempt's (whose output cannot come before it): journald stamps a line when it
        # receives it, which may be after the supervisor saw the trainer end, so N's end would cut its last words
        until = attempts[found + 1].started_at if not newest else None
        window = ["--since", f"@{a.started_at:.6f}"] + ([] if until is None else ["--until", f"@{until:.6f}"])
        return subprocess.call(["journalctl", "--no-pager", "-n", str(lines), "-u", str(st["unit"]), *window]
                               + (["-f"] if follow else []))
    if a.runtime == "podman":
        if not newest:
            print(f"isaacd: attempt {number} of {job} ran in a Podman container that the next start replaced, with "
                  f"its output; only the newest attempt's is kept (`isaacd logs {job}`)", file=sys.stderr)
            return 1
        return show_logs(cfg, job, follow, lines)
    path, start = st.get("log_path"), st.get("log_offset")
    if not path or not isinstance(start, int):
        print(f"isaacd: attempt {number} of {job} has no output on record (it never started a trainer)",
              file=sys.stderr)
        return 1
    later = [b.handle.get("log_offset") for b in attempts[found + 1:] if (b.handle or {}).get("log_path") == path]
    end = next((o for o in later if isinstance(o, int) and o >= start), None)
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        print(f"isaacd: {path} is gone, with attempt {number}'s output", file=sys.stderr)
        return 1
    if os.fstat(fh.fileno()).st_size < start:
        fh.close()
        print(f"isaacd: {path} was truncated since attempt {number} ran: its output is gone", file=sys.stderr)
        return 1
    fh.seek(start)
    return _print_log(fh, Path(path), lines, follow, end)


def _attempt_handle(cfg: Config, job: str) -> dict[str, Any]:
    """The saved Handle.state of the job's newest attempt (its container or unit: the job's own, or a warm spare's
    that took the attempt over); {} when there is none (or no history we can read)."""
    try:
        attempt = StateStore(cfg.supervisor.state_dir).load(job).current
    except Exception:  # noqa: BLE001 - no history yet, or one we cannot read: the name a cold launch gives
        attempt = None
    return dict(attempt.handle or {}) if attempt is not None else {}


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
    """The line that most likely says why: the last exception/error-looking line, else the last line."""
    pick = next((ln for ln in reversed(lines) if _KEY.match(ln)), lines[-1] if lines else "")
    return _shorten(pick)


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
    name, configfault.named_in_config)."""
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
    fault = find_config_fault(scanned, status.code, named) if named is not None and oom is None else None
    said = oom.line if oom else fault.line if fault else None
    return ExitWithOutput(code=status.code, signal=status.signal, oom_killed=status.oom_killed,
                          external_stop=status.external_stop, detail=status.detail, output_tail=tuple(lines),
                          key_line=_shorten(said) if said else key_line(lines), cuda_oom=oom, config_fault=fault)


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
