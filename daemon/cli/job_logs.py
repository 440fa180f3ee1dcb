"""`isaacd logs JOB`: the trainer's output wherever the job's runtime put it (a log file, a Podman container's log,
a systemd unit's journal), the whole job's or one attempt's.

Where that is comes from the supervisor the command found (config/locate.py, as every command finds it): its
`log-source` answer (history/log_source.py) names the files with absolute paths, so the command reads the same
supervisor's files from any directory. Every file is opened read-only; nothing is created."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, BinaryIO, Callable

from ..history.log_source import LogSource

Ask = Callable[[dict[str, Any]], Any]  # one request to the supervisor (cli/main.py Client)
FOLLOW_POLL = 1.0  # seconds between reads of the supervisor's answer for `logs -f` through the socket


def show_logs(src: LogSource, follow: bool = False, lines: int = 50, attempt: int | None = None,
              ask: Ask | None = None) -> int:
    """`ask`: the supervisor, which reads the job's log file for a user who cannot (root's state dir, issue 32)."""
    if attempt is not None:
        return show_attempt_logs(src, attempt, follow, lines, ask)
    handle = src.newest.handle if src.newest is not None else {}
    # the container runtimes' names are imported here: they bring the config's models (pydantic), which a process
    # job's `isaacd logs` has no use for (it starts in a tenth of the time)
    if src.runtime == "systemd":
        from ..runtimes.quadlet import unit_name

        unit = handle.get("unit") or unit_name(src.job)  # a warm spare's unit that took it over
        cmd = ["journalctl", "--no-pager", "-n", str(lines), "-u", str(unit)] + (["-f"] if follow else [])
        return subprocess.call(cmd)
    if src.runtime == "podman":
        from ..runtimes.container_spec import container_name

        container = handle.get("container") or container_name(src.job)  # or a spare's, that took over
        cmd = ["podman", "logs", "--tail", str(lines)] + (["-f"] if follow else []) + [str(container)]
        return subprocess.call(cmd)
    path = Path(src.log_path)
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        print(f"isaacd: no log yet at {path}", file=sys.stderr)
        return 1
    except PermissionError as exc:
        if ask is None or os.geteuid() == 0:  # no supervisor answers that could read it for us
            print(f"isaacd: cannot read {path}: {exc.strerror}", file=sys.stderr)
            return 1
        return logs_through_supervisor(ask, src.job, lines, follow)
    return _print_log(fh, path, lines, follow)


def logs_through_supervisor(ask: Ask, job: str, lines: int, follow: bool) -> int:
    """The job's output read for us by the supervisor (its `logs` request): another user's supervisor (root's),
    whose state dir is not ours to read; it reads the output of the caller's own jobs (access/policy.py)."""
    answer = ask({"cmd": "logs", "job": job, "lines": lines})
    while True:  # with -f until Ctrl-C (exit 130)
        sys.stdout.write(answer["text"])
        sys.stdout.flush()
        if not follow:
            return 0
        time.sleep(FOLLOW_POLL)
        answer = ask({"cmd": "logs", "job": job, "lines": lines, "offset": answer["offset"]})


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


def show_attempt_logs(src: LogSource, number: int, follow: bool, lines: int, ask: Ask | None = None) -> int:
    """`isaacd logs --attempt N JOB`: attempt N's output. The process and ray runtimes append every attempt to one
    file and save where each began (its handle's log_offset, runtimes/process.py): N's output runs from its offset to
    the next attempt's. A systemd unit's journal is read from N's start to the next's; podman keeps only the newest
    attempt's container (the next start replaces it), so an earlier one's output is gone there."""
    job, attempts = src.job, src.attempts
    if src.problem is not None:  # a damaged history: the running supervisor rebuilds it, we only read
        print(f"isaacd: {job}'s history: {src.problem}", file=sys.stderr)
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
        return show_logs(src, follow, lines)
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
    except PermissionError:
        if ask is not None and os.geteuid() != 0 and os.path.abspath(path) == os.path.abspath(src.log_path):
            # another user's supervisor (root's, issue 32): it reads the job's log for us, from N's offset
            return attempt_through_supervisor(ask, job, number, start, end, lines, follow)
        print(f"isaacd: {job}: attempt {number}'s output is read from {path}, which is not yours to read",
              file=sys.stderr)
        return 1
    if os.fstat(fh.fileno()).st_size < start:
        fh.close()
        print(f"isaacd: {path} was truncated since attempt {number} ran: its output is gone", file=sys.stderr)
        return 1
    fh.seek(start)
    return _print_log(fh, Path(path), lines, follow, end)


def attempt_through_supervisor(ask: Ask, job: str, number: int, start: int, end: int | None, lines: int,
                               follow: bool) -> int:
    """`isaacd logs --attempt N` of a job whose log is not ours to read (root's state dir): the supervisor the command
    found reads N's range of it for us, a `logs` answer at a time from N's offset (its `offset` says where each ended),
    and we keep the last `lines` lines before the next attempt's offset (`end`; None: the newest attempt, followed
    with -f). The cut at `end` counts bytes of the UTF-8 text the supervisor sends."""
    tail: deque[str] = deque(maxlen=lines)
    offset, partial = start, ""
    while end is None or offset < end:
        answer = ask({"cmd": "logs", "job": job, "lines": lines, "offset": offset})
        text, reached = str(answer.get("text") or ""), answer.get("offset")
        if not isinstance(reached, int) or reached < offset:  # the file is shorter than N's offset now
            print(f"isaacd: {job}'s log was truncated since attempt {number} ran: its output is gone", file=sys.stderr)
            return 1
        if reached == offset:
            break  # nothing more written yet
        if end is not None and reached > end:
            text = text.encode("utf-8")[:end - offset].decode("utf-8", "replace")
        chunk = (partial + text).splitlines(keepends=True)
        partial = chunk.pop() if chunk and not chunk[-1].endswith("\n") else ""
        tail.extend(chunk)
        offset = min(reached, end) if end is not None else reached
    if partial:
        tail.append(partial)
    sys.stdout.write("".join(tail))
    sys.stdout.flush()
    while follow:  # the newest attempt only (show_attempt_logs says so for an earlier one), until Ctrl-C
        time.sleep(FOLLOW_POLL)
        answer = ask({"cmd": "logs", "job": job, "lines": lines, "offset": offset})
        sys.stdout.write(answer["text"])
        sys.stdout.flush()
        offset = answer["offset"]
    return 0
