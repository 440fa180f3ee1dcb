"""The systemd runtime's calls to systemd: `systemctl`, and how an invocation of a unit ended, from the journal.

Each call here runs a process (tens of ms to seconds): the systemd runtime makes them on its worker thread, or
synchronously at recovery (`adopt`, `find`), never from the runner's tick (runtimes/base.py's contract).

- `Systemctl`: `systemctl <verb>` with a timeout, and `show`, which keeps each unit's last properties for the
  runtime's reads from local state (`pids`, `describe`);
- `journal_end` / `journal_stop_job`: what PID 1 logged about an invocation, read by systemd's catalogue message
  IDs (sd-messages.h). systemd collects a cleanly ended unit at once, so after that only the journal knows how it
  ended; `UnitEnd` is that end, in the fields `systemctl show` gives while the unit is still loaded.
"""

from __future__ import annotations

import json
import signal as _signal
from dataclasses import dataclass

from .base import RuntimeFailure
from .host import run_cmd

ACTIVE_STATES = ("active", "activating", "deactivating", "reloading", "refreshing")
PROPS = ("LoadState", "ActiveState", "SubState", "Result", "Job", "InvocationID", "MainPID", "ExecMainPID",
         "ExecMainCode", "ExecMainStatus", "ControlGroup", "ActiveExitTimestampMonotonic",
         "ExecMainExitTimestampMonotonic", "ExecMainStartTimestampMonotonic", "InactiveExitTimestampMonotonic")
CLD_EXITED, CLD_KILLED, CLD_DUMPED = 1, 2, 3  # ExecMainCode: how the main process ended (siginfo's si_code)
# systemd's catalogue message IDs (sd-messages.h) for what PID 1 logs about a unit
MSG_STOPPING = "de5b426a63be47a7b6ac3eaac82e2f6f"  # JOB_TYPE=stop: "Stopping <unit>..."
MSG_STOPPED = "9d1aaa27d60140bd96365438aad20286"  # JOB_TYPE=stop, JOB_RESULT=: "Stopped <unit>."
MSG_PROCESS_EXIT = "98e322203f7a4ed290d09fe03c09fe15"  # EXIT_CODE=, EXIT_STATUS=
MSG_SUCCESS = "7ad2d189f7e94e70a38c781354912448"  # "Deactivated successfully."
MSG_FAILED = "d9b373ed55a64feb8242e02dbe79a49c"  # UNIT_RESULT=: "Failed with result '...'"
MSG_OOM = "fe6faa94e7774663a0da52717891d8ef"  # "A process of this unit has been killed by the OOM killer."


class Systemctl:
    """`systemctl` (the binary is ISAACD_SYSTEMCTL's, for the tests' stand-ins), and the units' last `show`."""

    def __init__(self, binary: str):
        self.binary = binary
        self.props: dict[str, dict[str, str]] = {}  # last `systemctl show` per unit (written by the worker)

    def __call__(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        return run_cmd([self.binary, *args], timeout=timeout, check=check).stdout

    def show(self, unit: str, props: tuple[str, ...] = PROPS, keep: bool = True) -> dict[str, str]:
        """The unit's properties ("" for one systemd did not print); kept for `last` unless `keep` is False."""
        out = self("show", unit, "-p", ",".join(props), timeout=30)
        res = {p: "" for p in props}
        for line in out.splitlines():
            k, _, v = line.partition("=")
            res[k] = v
        if keep:
            self.props[unit] = res
        return res

    def last(self, unit: str) -> dict[str, str]:
        """The unit's properties as the last kept `show` saw them ({} before the first): local state only."""
        return self.props.get(unit) or {}

    def system_stopping(self) -> bool:
        """The host is shutting down (`systemctl is-system-running` says "stopping")."""
        try:
            out = self("is-system-running", check=False, timeout=10).strip()
        except RuntimeFailure:
            return False
        return out == "stopping"


@dataclass
class UnitEnd:
    """How an invocation of the unit ended: ExecMainCode (`kind`, a CLD_* or 0) and ExecMainStatus (`status`), the
    unit's Result, whether the OOM killer took a process of it, and whether a stop job ran on it."""

    invocation: str = ""
    kind: int = 0
    status: int = 0
    result: str = ""
    oom: bool = False
    stop_job: bool = False


def _journal(argv_tail: list[str]) -> str | None:
    # this boot only; PID 1's own messages about the unit
    try:
        return run_cmd(["journalctl", "-b", "-o", "json", "--no-pager", "-q", "_PID=1", *argv_tail],
                       check=False, timeout=20).stdout
    except RuntimeFailure:
        return None


def journal_stop_job(unit: str, invocation: str) -> bool:
    """A stop job ran on this invocation: "Stopping ..." when it was active, only "Stopped ..."
    when it was stopped while still activating."""
    out = _journal([f"UNIT={unit}", f"INVOCATION_ID={invocation}",
                    f"MESSAGE_ID={MSG_STOPPING}", f"MESSAGE_ID={MSG_STOPPED}"])
    return out is not None and '"JOB_TYPE":"stop"' in out.replace(" ", "")


def journal_end(unit: str, invocation: str | None = None, since: float = 0,
                exclude: str | None = None) -> UnitEnd | None:
    """How an invocation of the unit ended (`invocation`, or the last one to end since `since` other than
    `exclude`), from systemd's structured journal messages; None when the journal saw none end."""
    out = _journal([f"UNIT={unit}", f"INVOCATION_ID={invocation}" if invocation
                    else f"--since=@{max(int(since) - 1, 0)}"])
    if out is None:
        return None
    return ended_last(out.splitlines(), exclude)


def ended_last(lines: list[str], exclude: str | None = None) -> UnitEnd | None:
    """The last invocation in these `journalctl -o json` lines that ended (Deactivated successfully, or Failed
    with result ...), folded from its messages; pure."""
    by_inv: dict[str, UnitEnd] = {}  # in the order the invocations first show up
    ended: set[str] = set()
    for line in lines:
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            continue
        i = e.get("INVOCATION_ID")
        if not i or i == exclude:
            continue
        d = by_inv.setdefault(i, UnitEnd(invocation=i))
        mid = e.get("MESSAGE_ID")
        if mid in (MSG_STOPPING, MSG_STOPPED) and e.get("JOB_TYPE") == "stop":
            d.stop_job = True
        elif mid == MSG_PROCESS_EXIT and e.get("EXIT_CODE"):
            d.kind = {"exited": CLD_EXITED, "killed": CLD_KILLED, "dumped": CLD_DUMPED}.get(e["EXIT_CODE"], 0)
            try:
                d.status = int(e.get("EXIT_STATUS") or 0)
            except ValueError:
                d.status = getattr(_signal, f"SIG{e.get('EXIT_STATUS')}", 0) or 0
        elif mid == MSG_OOM:
            d.oom = True
        elif mid in (MSG_SUCCESS, MSG_FAILED):
            ended.add(i)
            if mid == MSG_SUCCESS:
                d.result = d.result or "success"
                if not d.kind:
                    d.kind, d.status = CLD_EXITED, 0
            else:
                d.result = e.get("UNIT_RESULT") or "failed"
    last = [d for i, d in by_inv.items() if i in ended]
    return last[-1] if last else None
