"""torchrun's error report at the end of a multi-rank trainer's output, read for what really ended the job.

When a rank fails, torchrun (torch.distributed.run, the elastic agent) ends the output with its own traceback, a
`ChildFailedError`, and a report framed by `====` and `----` lines (torch 2.x
torch/distributed/elastic/multiprocessing/errors/__init__.py, `ChildFailedError.format_msg`):

    torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
    ============================================================
    isaacd_trainer FAILED
    ------------------------------------------------------------
    Failures:
      <NO_OTHER_FAILURES>            (or one block per other failed rank)
    ------------------------------------------------------------
    Root Cause (first observed failure):
    [0]:
      time      : 2026-12-06_02:03:08
      host      : localhost
      rank      : 1 (local_rank: 1)
      exitcode  : 1 (pid: 6864)
      error_file: <N/A>              (a path when the script's main is wrapped in @record)
      traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
    ============================================================

Its last line is a frame of `=`, and nothing in it is the error: the root cause is the traceback's last exception
line when the rank wrote an error_file (`@record`), else the ranks' own output before torchrun's traceback (Isaac
Lab's train scripts do not use @record), else the rank and its exit code. The texts above were captured here from
torch 2.13 (`torchrun --nproc_per_node 2` of the built-in trainer and of a script that raises); tests/test_exit_tail.py
holds them.

Pure: lines in, a value out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_FAILED = re.compile(r"^\s*(?:[\w.]+\.)?ChildFailedError:")
_TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\):")
_ROOT = re.compile(r"^\s*Root Cause \(first observed failure\):")
_FIELD = re.compile(r"^\s*(?P<k>time|host|rank|exitcode|error_file|traceback)\s*:\s?(?P<v>.*)$")
_EXITCODE = re.compile(r"^(?P<code>-?\d+)(?: \(pid: \d+\))?\s*(?:\((?P<sig>SIG\w+)\))?")
_RANK = re.compile(r"^(?P<rank>\d+)")
# torch's own log lines ("E1206 02:03:08.673000 6840 torch/distributed/elastic/multiprocessing/api.py:1002] ...")
_TORCH_LOG = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+ \d+ \S+:\d+\]")
# a Python exception's last line ("ValueError: ...", "torch.OutOfMemoryError: ...")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")


@dataclass(frozen=True)
class TorchrunReport:
    """What torchrun's report says of the failure it ended the job for."""

    before: tuple[str, ...]  # the ranks' own output, before torchrun's traceback (its log lines left out)
    rank: str | None = None  # the root cause's rank ("1")
    exitcode: int | None = None
    signal: str | None = None  # "SIGKILL" when torchrun names the signal that ended the rank
    traceback: tuple[str, ...] = ()  # the root cause's traceback (from its error_file), dedented

    @property
    def exception(self) -> str | None:
        """The last exception line of the root cause's traceback (only a rank that wrote an error_file has one)."""
        return next((ln for ln in reversed(self.traceback) if _EXCEPTION.match(ln)), None)

    def decisive_lines(self) -> list[str]:
        """The lines that say why, without torchrun's own traceback and report: what an error no restart can fix
        is looked for in (config_fault.py), as the output of a trainer without torchrun would be."""
        return [*self.before, *self.traceback]

    def cause(self, key_line: Callable[[list[str]], str | None]) -> str:
        """The line that explains the exit: the root cause's exception, else the ranks' own last error line
        (`key_line` picks it), else the rank and how it ended."""
        who = f"rank {self.rank}" if self.rank is not None else "a rank"
        if (exc := self.exception) is not None:
            return f"{who}: {exc}"
        said = key_line(list(self.before))
        if said:
            return said
        if self.signal is not None:
            return f"{who} was killed by {self.signal} (torchrun's root cause; the rank's output says no more)"
        if self.exitcode is not None:
            return f"{who} exited with code {self.exitcode} (torchrun's root cause; the rank's output says no more)"
        return "a rank failed (torchrun's report names no root cause)"


def find_report(lines: Sequence[str]) -> TorchrunReport | None:
    """torchrun's report at the end of `lines` (oldest first), or None when the output has none."""
    failed = next((i for i in range(len(lines) - 1, -1, -1) if _FAILED.match(lines[i])), None)
    if failed is None:
        return None
    start = next((i for i in range(failed, -1, -1) if _TRACEBACK.match(lines[i])), failed)
    before = tuple(ln for ln in lines[:start] if not _TORCH_LOG.match(ln))
    root = next((i for i in range(failed, len(lines)) if _ROOT.match(lines[i])), None)
    if root is None:
        return TorchrunReport(before)
    fields: dict[str, str] = {}
    traceback: list[str] = []
    in_traceback = False
    for line in lines[root + 1:]:
        stripped = line.strip()
        if set(stripped) <= set("=-"):  # the report's frame: its end
            break
        m = _FIELD.match(line)
        if m is not None and not in_traceback:
            fields[m.group("k")] = m.group("v").strip()
            if m.group("k") == "traceback":
                in_traceback = True
                traceback.append(m.group("v").strip())
            continue
        if in_traceback:
            traceback.append(stripped)
    code = _EXITCODE.match(fields.get("exitcode", ""))
    rank = _RANK.match(fields.get("rank", ""))
    return TorchrunReport(before, rank.group("rank") if rank else None,
                          int(code.group("code")) if code else None, code.group("sig") if code else None,
                          tuple(ln for ln in traceback if ln))
