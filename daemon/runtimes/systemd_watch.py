"""How a job's unit is doing, for the systemd runtime: one look at it, and its end as an `ExitStatus`.

From `systemctl show` while systemd holds the unit (ActiveState, Result, ExecMainCode/ExecMainStatus of the
invocation the launch started), from the journal once systemd has collected it (systemd_ctl.journal_end). Who
stopped it: isaacd stops a trainer with signals to the container's processes and `podman kill`, never with
`systemctl stop`; a unit that left "active" before its main process exited was stopped by a stop job, i.e. by
someone else (an operator, or the host's shutdown), which the runner records and does not fight. Worker only.
"""

from __future__ import annotations

import time
from typing import Any

from ..daemon_log import log
from .base import ExitStatus, RuntimeFailure
from .host import cgroup_pids, run_cmd
from .systemd_ctl import (ACTIVE_STATES, CLD_DUMPED, CLD_EXITED, CLD_KILLED, Systemctl, UnitEnd, journal_end,
                          journal_stop_job)
from .worker import Slot

START_GRACE = 10.0  # seconds a queued start may take to show up as a new invocation


class UnitWatch:
    """Looks at the unit of an attempt (its Handle.state copy `st`) and reads its end."""

    def __init__(self, ctl: Systemctl, podman: str | None):
        self.ctl = ctl
        self.podman = podman

    def look(self, st: dict[str, Any], slot: Slot) -> ExitStatus | None:
        """One look at the unit (systemctl show, the journal when systemd has collected it): None while the
        attempt starts or runs; updates `st` (the invocation, the container's first pid)."""
        unit = st["unit"]
        p = self.ctl.show(unit)
        inv, active = p["InvocationID"], p["ActiveState"]
        ours = st.get("invocation")
        if not ours:
            if inv and inv != st.get("prev_invocation"):
                st["invocation"] = ours = inv
            elif p["Job"]:
                return None  # our start job is queued
            else:
                # no new invocation to see: not started yet, or started, ended cleanly and
                # already garbage-collected by systemd (the journal remembers)
                j = journal_end(unit, since=st.get("started_at", 0), exclude=st.get("prev_invocation"))
                if j is not None:
                    st["invocation"] = j.invocation
                    return self.exit_status(st, slot, j)
                if time.time() - st.get("started_at", 0) < START_GRACE:
                    return None
                return ExitStatus(detail=f"{unit} never started (LoadState={p['LoadState']}, "
                                         f"ActiveState={active}, Result={p['Result']}); see journalctl -u {unit}")
        if inv == ours and "pid" not in st and active == "active" and p["ControlGroup"]:
            # the container's first process (its PID 1), as the podman runtime's Handle.pid: events, a spare's RSS
            payload = cgroup_pids(p["ControlGroup"], only_prefix="libpod-payload-")
            if payload:
                st["pid"] = min(payload)
        if inv == ours:
            main_exited = int(p["ExecMainExitTimestampMonotonic"] or 0) > 0 and p["MainPID"] in ("", "0")
            was_active = int(p["ActiveExitTimestampMonotonic"] or 0) > 0
            # "deactivating" with the main process (conmon) gone: the exit status is final; the
            # rest is ExecStop's `podman rm` of the dead container (~0.3 s), no need to wait for it
            if active in ACTIVE_STATES and not (active == "deactivating" and main_exited and was_active):
                return None
            a_exit = int(p["ActiveExitTimestampMonotonic"] or 0)
            m_exit = int(p["ExecMainExitTimestampMonotonic"] or 0)
            # the unit left "active" before its main process exited: a stop job did that; a unit
            # stopped while still activating never was active, and the journal says it instead
            stop_job = bool(a_exit and m_exit and a_exit < m_exit)
            if not stop_job and not (st.get("signalled") or slot.signalled):
                stop_job = journal_stop_job(unit, ours)
            return self.exit_status(st, slot, UnitEnd(
                invocation=ours, kind=int(p["ExecMainCode"] or 0), status=int(p["ExecMainStatus"] or 0),
                result=p["Result"], oom=p["Result"] == "oom-kill", stop_job=stop_job))
        if inv and active in ACTIVE_STATES:
            log.warning("unit_restarted_outside_isaacd", unit=unit,
                        detail="following the new invocation of the unit")
            st["invocation"] = inv
            st.pop("signalled", None)
            slot.signalled = False
            return None
        # Our invocation is over and systemd has unloaded the unit (it collects a cleanly
        # exited unit at once): read the end from the journal.
        j = journal_end(unit, invocation=ours)
        if j is None:
            waited = time.time() - st.setdefault("journal_wait_since", time.time())
            if waited < 5:
                return None  # journald may lag a moment behind the state change
            return ExitStatus(detail=f"{unit} ended; its exit status is not in the journal")
        return self.exit_status(st, slot, j)

    def exit_status(self, st: dict[str, Any], slot: Slot, d: UnitEnd) -> ExitStatus:
        """The invocation's end as the runner reads it: code or signal, OOM, stopped outside isaacd."""
        unit = st["unit"]
        kind, status, result = d.kind, d.status, d.result
        code = sig = None
        if kind == CLD_EXITED:
            # conmon exits with the container's status; 128+N is "killed by signal N" inside
            if 128 < status <= 128 + 64:
                sig = status - 128
            else:
                code = status
        elif kind in (CLD_KILLED, CLD_DUMPED):
            sig = status
        signalled = bool(st.get("signalled") or slot.signalled)
        oom = bool(d.oom) or (sig == 9 and not signalled and self.oom_event(st))
        external = bool(d.stop_job) and not signalled and not oom
        detail = f"{unit}: Result={result}, exit status {status}" if kind else f"{unit}: Result={result}"
        if external and self.ctl.system_stopping():
            # the host is shutting down: not an operator's decision about this job; resume after boot
            return ExitStatus(detail=f"{unit} stopped by the system shutdown")
        if external:
            detail = f"`systemctl stop {unit}`, container exit status {status}"
        if code == 125 and not external:
            detail += f" (podman could not create the container; see journalctl -u {unit})"
        return ExitStatus(code=code, signal=sig, oom_killed=oom, external_stop=external, detail=detail)

    def oom_event(self, st: dict[str, Any]) -> bool:
        """Podman saw the kernel's OOM killer in the container (a SIGKILL nobody here sent)."""
        if not self.podman:
            return False
        since = int(st.get("started_at", time.time() - 3600)) - 1
        try:
            r = run_cmd([self.podman, "events", "--stream=false", "--since", str(since), "--until", "0s",
                         "--filter", f"container={st['container']}", "--filter", "event=oom",
                         "--format", "{{.Status}}"], check=False, timeout=10)
        except RuntimeFailure:
            return False
        return "oom" in r.stdout
