"""runtime = "systemd": each job attempt is a container in a systemd unit of its own.

Podman >= 4.4: isaacd writes `/etc/containers/systemd/isaaclab-job-<name>.container` (Quadlet)
and systemd's generator turns it into `isaaclab-job-<name>.service`. Podman < 4.4 (Debian 12's
4.3.1): isaacd writes the equivalent `/etc/systemd/system/isaaclab-job-<name>.service` with
`ExecStart=podman run ...` itself. Either way: `systemctl daemon-reload`, `systemctl start
--no-block`, and from then on the unit's state (ActiveState, Result, ExecMainStatus) says how the
container is doing. The container's output is in the journal (`journalctl -u <unit>`).

The unit is independent of the supervisor: a supervisor restart leaves it running, and the next
supervisor adopts it by unit name (plus a launch token in the unit file, so a unit from another
attempt is never mistaken for this one). The unit has Restart=no: isaacd restarts, from the
checkpoint it chose, and counts.

Nothing here waits in the caller (base.py's contract): writing the unit, `daemon-reload`, `systemctl
start --no-block`, `systemctl show`, the journal and `podman kill` run on this runtime's worker
thread; a unit of the job still running unclaimed is stopped across polls before the new start.
`find(job, token)`: the unit file carries the launch token (`# isaacd-launch: <token>`), and the
attempt is the invocation that began after the file was written.

Warm spares (spare.py, `LaunchSpec.spare`): a unit of its own, `isaaclab-job-<job>-spare-<token12>.service`
(its file next to the job's, its container `spare_container_name`), so it never touches the job's unit, and
the job unit's "never two of a job" stop never sees it. At the go it becomes the attempt as it is (the attempt's
token is the spare's, in its file's header), so `poll`, `signal`, `adopt` and `find` treat it like any launch.
An ended spare unit is stopped and its file removed (`daemon-reload`) by `cleanup` (a spare killed or dead
unused, the attempt it became once ended), and any left over (a supervisor that died first) at the job's next
launch; running ones are left alone (the parked spare, or the attempt one became).

Who stopped it: isaacd stops a trainer with SIGINT to the container's processes (like Ctrl-C),
then `podman kill -s KILL`; it never runs `systemctl stop`. A unit that left "active" before its
main process exited was stopped by a stop job, i.e. by someone else (`systemctl stop` by an
operator, or a shutdown): that is an operator stop, which isaacd records and does not fight.
"""

from __future__ import annotations

import json
import os
import signal as _signal
import time
from pathlib import Path
from typing import Any

from ..config.schema import Config, JobConfig
from ..daemon_log import log
from .base import ExitStatus, Handle, LaunchSpec, RuntimeFailure
from .container_runtime import STALE_STOP_MAX, ContainerRuntime
from .container_spec import (ContainerSpec, container_name, is_spare_container, prepare_log_root,
                             spare_container_name, spare_name_prefix)
from .host import cgroup_pids, podman_binary, podman_version, run_cmd
from .view import RuntimeView
from .quadlet import (
    has_quadlet,
    launch_token_of,
    quadlet_binary,
    render_quadlet,
    render_service,
    spare_unit_base,
    spare_unit_name,
    unit_base,
    unit_name,
)
from .worker import Slot, Worker

__all__ = ["SystemdRuntime"]

ACTIVE_STATES = ("active", "activating", "deactivating", "reloading", "refreshing")
# an ended spare's unit still stopping: looked at again every SPARE_STOP_LOOK_S, SIGKILLed after SPARE_STOP_GRACE_S
SPARE_STOP_LOOK_S = 0.5
SPARE_STOP_GRACE_S = 90.0
PROPS = ("LoadState", "ActiveState", "SubState", "Result", "Job", "InvocationID", "MainPID", "ExecMainPID",
         "ExecMainCode", "ExecMainStatus", "ControlGroup", "ActiveExitTimestampMonotonic",
         "ExecMainExitTimestampMonotonic", "ExecMainStartTimestampMonotonic", "InactiveExitTimestampMonotonic")
START_GRACE = 10.0  # seconds a queued start may take to show up as a new invocation
CLD_EXITED, CLD_KILLED, CLD_DUMPED = 1, 2, 3
# systemd's catalogue message IDs (sd-messages.h) for what PID 1 logs about a unit
MSG_STOPPING = "de5b426a63be47a7b6ac3eaac82e2f6f"  # JOB_TYPE=stop: "Stopping <unit>..."
MSG_STOPPED = "9d1aaa27d60140bd96365438aad20286"  # JOB_TYPE=stop, JOB_RESULT=: "Stopped <unit>."
MSG_PROCESS_EXIT = "98e322203f7a4ed290d09fe03c09fe15"  # EXIT_CODE=, EXIT_STATUS=
MSG_SUCCESS = "7ad2d189f7e94e70a38c781354912448"  # "Deactivated successfully."
MSG_FAILED = "d9b373ed55a64feb8242e02dbe79a49c"  # UNIT_RESULT=: "Failed with result '...'"
MSG_OOM = "fe6faa94e7774663a0da52717891d8ef"  # "A process of this unit has been killed by the OOM killer."


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


class SystemdRuntime(ContainerRuntime):
    name = "systemd"
    poll_failed_event = "systemd_poll_failed"

    def __init__(self, config: Config | None = None):
        self.config = config
        self.podman = podman_binary()
        self.podman_version = podman_version(self.podman)
        self.quadlet = has_quadlet(self.podman_version)
        self.quadlet_dir = Path(os.environ.get("ISAACD_QUADLET_DIR", "/etc/containers/systemd"))
        self.unit_dir = Path(os.environ.get("ISAACD_UNIT_DIR", "/etc/systemd/system"))
        self.systemctl = os.environ.get("ISAACD_SYSTEMCTL", "systemctl")
        self._props: dict[str, dict[str, str]] = {}  # last `systemctl show` per unit (written by the worker)
        self._slots: dict[str, Slot] = {}  # by launch token
        self.worker = Worker("systemd")

    # ---- systemd plumbing ------------------------------------------------------------------
    def _ctl(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        return run_cmd([self.systemctl, *args], timeout=timeout, check=check).stdout

    def show(self, unit: str, props: tuple[str, ...] = PROPS, keep: bool = True) -> dict[str, str]:
        out = self._ctl("show", unit, "-p", ",".join(props), timeout=30)
        res = {p: "" for p in props}
        for line in out.splitlines():
            k, _, v = line.partition("=")
            res[k] = v
        if keep:
            self._props[unit] = res
        return res

    def unit_file(self, job: str, spare_token: str | None = None) -> Path:
        """The job's unit file, or with `spare_token` the file of that warm spare's unit of its own."""
        base = spare_unit_base(job, spare_token) if spare_token else unit_base(job)
        return self.quadlet_dir / f"{base}.container" if self.quadlet else self.unit_dir / f"{base}.service"

    def render(self, spec: ContainerSpec) -> str:
        return render_quadlet(spec) if self.quadlet else render_service(spec, self.podman or "/usr/bin/podman")

    # ---- Runtime (see base.py for the timing contract) -------------------------------------
    def _slot_key(self, handle: Handle) -> str:
        return str(handle.state.get("token") or handle.state["unit"])  # handles from before tokens: the unit

    def start(self, spec: LaunchSpec) -> Handle:
        """Renders the unit and queues the launch: ~5-10 ms here. The worker then writes the unit file,
        runs `systemctl daemon-reload` (0.1-1 s), and `systemctl start --no-block`; `poll` follows the
        unit from there. A unit of the job still running unclaimed is stopped first, across ticks."""
        job = spec.job
        if not self.podman:
            raise RuntimeFailure("podman not found: install it (apt-get install podman) or use runtime = \"process\"")
        if not Path("/run/systemd/system").exists():
            raise RuntimeFailure("systemd is not PID 1 here: runtime = \"systemd\" needs it; "
                                "use runtime = \"podman\" (Podman API) or \"process\"")
        cs = self._container_spec(spec)
        text = self.render(cs)
        # a warm spare: a unit of its own beside the job's (named after its container, spare_container_name)
        unit = spare_unit_name(job.name, cs.token) if spec.spare else unit_name(job.name)
        prepare_log_root(job)
        path = self.unit_file(job.name, cs.token if spec.spare else None)
        h = Handle("systemd", job.name, {"unit": unit, "container": cs.name, "unit_file": str(path),
                                          "token": cs.token, "attempt": cs.attempt, "started_at": time.time()})
        return self._queue_launch(h, unit, (job.name, job.stop_timeout, text))

    def _not_launched(self, st: dict[str, Any]) -> str:
        return f"stopped before {st['unit']} was started"

    def _launch_step(self, slot: Slot, snap: dict[str, Any], st: dict[str, Any]) -> None:
        """Worker: one step of the launch; a unit of the job still running is stopped across steps."""
        job, stop_timeout, text = slot.cache["launch"]
        unit, path = st["unit"], Path(st["unit_file"])
        before = self.show(unit)
        if before["ActiveState"] in ACTIVE_STATES:
            self._stop_stale(job, unit, before["ActiveState"], stop_timeout, slot)
            return
        if not is_spare_container(job, unit):
            other = (self.unit_dir / unit_name(job)) if self.quadlet else \
                (self.quadlet_dir / f"{unit_base(job)}.container")
            if launch_token_of(other) is not None:  # ours, from the other mode (Podman was upgraded)
                other.unlink(missing_ok=True)
        self._remove_ended_spares(job, keep=unit)  # the daemon-reload below unloads them
        _write_atomic(path, text)
        self._ctl("daemon-reload", timeout=120)
        props = self.show(unit)
        if props["LoadState"] != "loaded":
            raise RuntimeFailure(self._why_not_loaded(unit, path, props["LoadState"]))
        self._ctl("reset-failed", unit, check=False)
        st["prev_invocation"] = props["InvocationID"]
        st["started_at"] = time.time()  # START_GRACE and the journal are counted from here
        self._ctl("start", "--no-block", unit)
        log.info("unit_started", job=job, unit=unit, file=str(path), attempt=st.get("attempt"),
                 mode="quadlet" if self.quadlet else "service")
        slot.record(snap, st)
        cancel = self._launch_done(slot, None)
        if cancel is not None:  # a stop that came meanwhile: the next look passes it on to the unit
            slot.cache["cancel_after_start"] = cancel

    def _spare_unit_files(self, job: str) -> list[Path]:
        """The job's spare unit files, in both modes, that isaacd wrote (they carry a launch token)."""
        prefix = spare_name_prefix(job)
        found = []
        for d, suffix in ((self.quadlet_dir, ".container"), (self.unit_dir, ".service")):
            try:
                names = sorted(e.name for e in os.scandir(d))
            except OSError:
                continue
            found += [d / n for n in names if n.startswith(prefix) and n.endswith(suffix)
                      and launch_token_of(d / n) is not None]
        return found

    def _remove_ended_spares(self, job: str, keep: str) -> bool:
        """Worker: the unit files of the job's ended spare units (killed or dead unused, or the attempt one became,
        ended), left by a supervisor that died before their `cleanup`. Running ones, and one with a job queued, are
        left alone: the parked spare, or the attempt one became. True when a file went (a daemon-reload is due)."""
        removed = False
        for path in self._spare_unit_files(job):
            unit = path.name.rsplit(".", 1)[0] + ".service"
            if unit == keep:
                continue
            try:
                p = self.show(unit, ("ActiveState", "Job"), keep=False)
            except RuntimeFailure:
                continue
            if p["ActiveState"] in ACTIVE_STATES or p["Job"]:
                continue
            self._ctl("reset-failed", unit, check=False)
            path.unlink(missing_ok=True)
            removed = True
            log.info("spare_unit_removed", job=job, unit=unit, file=str(path))
        return removed

    def _stop_stale(self, job: str, unit: str, active: str, stop_timeout: float, slot: Slot) -> None:
        """Never two of a job: a unit still running here is not ours to keep (adoption would have taken
        it). One look per step: `systemctl stop --no-block`, SIGKILL after the grace, give up after 10 s more.
        A unit already deactivating (the last attempt's ExecStop) gets stop_timeout + 30 s before SIGKILL."""
        grace = stop_timeout + 30 if active == "deactivating" and not slot.cache.get("stale_stop_sent") \
            else min(stop_timeout + 30, STALE_STOP_MAX)

        def stop() -> None:
            log.warning("stale_unit_stopped", job=job, unit=unit, state=active,
                        detail="a unit of this job was running but not adopted; stopping it first")
            self._ctl("stop", "--no-block", unit)

        self._stop_stale_step(slot, grace, stop, lambda: self._ctl("kill", "-s", "SIGKILL", unit, check=False),
                              lambda s: f"{unit} of an earlier attempt would not stop ({active} for {s:.0f} s)",
                              may_stop=active != "deactivating")

    def _why_not_loaded(self, unit: str, path: Path, load_state: str) -> str:
        msg = f"{unit} is {load_state or 'not loaded'} after daemon-reload (written to {path})"
        q = quadlet_binary()
        if self.quadlet and q:
            r = run_cmd([q, "-dryrun", "-no-kmsg-log"], check=False, timeout=60)
            errs = [ln for ln in r.stderr.splitlines() if unit_base(unit.removesuffix(".service")) in ln
                    or "error" in ln.lower() or "unsupported" in ln.lower()]
            if errs:
                msg += "; quadlet says: " + " | ".join(errs[-5:])
        return msg

    def _look(self, st: dict[str, Any], slot: Slot) -> ExitStatus | None:
        cancel = slot.cache.pop("cancel_after_start", None)
        if cancel is not None:  # stopped while the launch was queued: the unit started anyway
            self._podman_kill(st, cancel)
        return self._status_now(st, slot)

    def _status_now(self, st: dict[str, Any], slot: Slot) -> ExitStatus | None:
        """Worker: one look at the unit (systemctl show, the journal when systemd has collected it)."""
        unit = st["unit"]
        p = self.show(unit)
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
                j = self._journal_end(unit, since=st.get("started_at", 0), exclude=st.get("prev_invocation"))
                if j is not None:
                    st["invocation"] = j["invocation"]
                    return self._status(st, slot, j)
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
                stop_job = self._journal_stop_job(unit, ours)
            return self._status(st, slot, {
                "kind": int(p["ExecMainCode"] or 0), "status": int(p["ExecMainStatus"] or 0),
                "result": p["Result"], "oom": p["Result"] == "oom-kill", "stop_job": stop_job})
        if inv and active in ACTIVE_STATES:
            log.warning("unit_restarted_outside_isaacd", unit=unit,
                        detail="following the new invocation of the unit")
            st["invocation"] = inv
            st.pop("signalled", None)
            slot.signalled = False
            return None
        # Our invocation is over and systemd has unloaded the unit (it collects a cleanly
        # exited unit at once): read the end from the journal.
        j = self._journal_end(unit, invocation=ours)
        if j is None:
            waited = time.time() - st.setdefault("journal_wait_since", time.time())
            if waited < 5:
                return None  # journald may lag a moment behind the state change
            return ExitStatus(detail=f"{unit} ended; its exit status is not in the journal")
        return self._status(st, slot, j)

    def _journal_stop_job(self, unit: str, invocation: str) -> bool:
        """A stop job ran on this invocation: "Stopping ..." when it was active, only "Stopped ..."
        when it was stopped while still activating."""
        try:
            out = run_cmd(["journalctl", "-b", "-o", "json", "--no-pager", "-q", "_PID=1", f"UNIT={unit}",
                           f"INVOCATION_ID={invocation}", f"MESSAGE_ID={MSG_STOPPING}", f"MESSAGE_ID={MSG_STOPPED}"],
                          check=False, timeout=20).stdout
        except RuntimeFailure:
            return False
        return '"JOB_TYPE":"stop"' in out.replace(" ", "")

    def _journal_end(self, unit: str, invocation: str | None = None, since: float = 0,
                     exclude: str | None = None) -> dict[str, Any] | None:
        """How an invocation of the unit ended, from systemd's structured journal messages."""
        argv = ["journalctl", "-b", "-o", "json", "--no-pager", "-q", "_PID=1", f"UNIT={unit}"]  # this boot only
        if invocation:
            argv.append(f"INVOCATION_ID={invocation}")
        else:
            argv.append(f"--since=@{max(int(since) - 1, 0)}")
        try:
            out = run_cmd(argv, check=False, timeout=20).stdout
        except RuntimeFailure:
            return None
        by_inv: dict[str, dict[str, Any]] = {}
        order: list[str] = []
        for line in out.splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue
            i = e.get("INVOCATION_ID")
            if not i or i == exclude:
                continue
            if i not in by_inv:
                by_inv[i] = {"invocation": i, "kind": 0, "status": 0, "result": "", "oom": False,
                             "stop_job": False, "ended": False}
                order.append(i)
            d = by_inv[i]
            mid = e.get("MESSAGE_ID")
            if mid in (MSG_STOPPING, MSG_STOPPED) and e.get("JOB_TYPE") == "stop":
                d["stop_job"] = True
            elif mid == MSG_PROCESS_EXIT and e.get("EXIT_CODE"):
                d["kind"] = {"exited": CLD_EXITED, "killed": CLD_KILLED, "dumped": CLD_DUMPED}.get(e["EXIT_CODE"], 0)
                try:
                    d["status"] = int(e.get("EXIT_STATUS") or 0)
                except ValueError:
                    d["status"] = getattr(_signal, f"SIG{e.get('EXIT_STATUS')}", 0) or 0
            elif mid == MSG_OOM:
                d["oom"] = True
            elif mid == MSG_SUCCESS:
                d["ended"], d["result"] = True, d["result"] or "success"
                if not d["kind"]:
                    d["kind"], d["status"] = CLD_EXITED, 0
            elif mid == MSG_FAILED:
                d["ended"], d["result"] = True, e.get("UNIT_RESULT") or "failed"
        ended = [by_inv[i] for i in order if by_inv[i]["ended"]]
        return ended[-1] if ended else None

    def _status(self, st: dict[str, Any], slot: Slot, d: dict[str, Any]) -> ExitStatus:
        unit = st["unit"]
        kind, status, result = d["kind"], d["status"], d["result"]
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
        oom = bool(d["oom"]) or (sig == 9 and not signalled and self._oom_event(st))
        external = bool(d["stop_job"]) and not signalled and not oom
        detail = f"{unit}: Result={result}, exit status {status}" if kind else f"{unit}: Result={result}"
        if external and self._system_stopping():
            # the host is shutting down: not an operator's decision about this job; resume after boot
            return ExitStatus(detail=f"{unit} stopped by the system shutdown")
        if external:
            detail = f"`systemctl stop {unit}`, container exit status {status}"
        if code == 125 and not external:
            detail += f" (podman could not create the container; see journalctl -u {unit})"
        return ExitStatus(code=code, signal=sig, oom_killed=oom, external_stop=external, detail=detail)

    def _system_stopping(self) -> bool:
        try:
            out = self._ctl("is-system-running", check=False, timeout=10).strip()
        except RuntimeFailure:
            return False
        return out == "stopping"

    def _oom_event(self, st: dict[str, Any]) -> bool:
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

    def _kill_on_worker(self, handle: Handle, sig: int) -> None:
        st = dict(handle.state)
        self.worker.submit(f"kill {handle.job}", lambda: self._podman_kill(st, sig))

    def _podman_kill(self, st: dict[str, Any], sig: int) -> None:
        """Worker: `podman kill`, or `systemctl kill` when there is no container (yet)."""
        name = _signal.Signals(sig).name.removeprefix("SIG")
        try:
            run_cmd([self.podman or "podman", "kill", "--signal", name, st["container"]], timeout=30)
        except RuntimeFailure as exc:
            log.warning("podman_kill_failed", unit=st["unit"], error=str(exc), detail="using systemctl kill")
            self._ctl("kill", "-s", f"SIG{name}", st["unit"], check=False)

    def _trainer_pids(self, handle: Handle) -> list[int]:
        if not handle.state.get("invocation"):
            return []  # not our invocation yet: the cgroup may still hold an earlier attempt's container
        cg = self._props.get(handle.state["unit"], {}).get("ControlGroup")
        if not cg:
            return []
        # --cgroups=split: conmon in <unit>/runtime, the container in <unit>/libpod-payload-<id>;
        # `podman run` itself, while it starts the container, sits in <unit> and is not the trainer
        return cgroup_pids(cg, only_prefix="libpod-payload-")

    def adopt(self, job: JobConfig, state: dict[str, Any]) -> Handle | None:
        """Synchronous (recovery): the unit file's token, then one `systemctl show` (and the journal
        when systemd has already collected the unit)."""
        path = Path(state.get("unit_file") or self.unit_file(job.name))
        if not state.get("token") or launch_token_of(path) != state.get("token"):
            return None  # the unit file belongs to another attempt, or is gone
        return self._locate(job, path, dict(state))

    def find(self, job: JobConfig, token: str) -> Handle | None:
        """The unit of the attempt launched with `token`: its file carries the token (`# isaacd-launch:`),
        and an invocation of the unit began after the file was written. Synchronous (recovery)."""
        if not token:
            return None
        for path in (self.unit_file(job.name), self.quadlet_dir / f"{unit_base(job.name)}.container",
                     self.unit_dir / unit_name(job.name)):
            if launch_token_of(path) == token:
                return self._locate(job, path, {"token": token, "unit_file": str(path)})
        # a warm spare's unit of its own: parked, or the attempt it took over (its token is the attempt's)
        base = spare_unit_base(job.name, token)
        for path in (self.quadlet_dir / f"{base}.container", self.unit_dir / f"{base}.service"):
            if launch_token_of(path) == token:
                return self._locate(job, path, {"token": token, "unit_file": str(path),
                                                "unit": spare_unit_name(job.name, token),
                                                "container": spare_container_name(job.name, token)})
        return None

    def _locate(self, job: JobConfig, path: Path, state: dict[str, Any]) -> Handle | None:
        """The invocation of the unit that this unit file started: the current one if it began after the
        file was written, else one the journal saw end since then; a start job still queued counts too."""
        unit = state.get("unit") or unit_name(job.name)
        try:
            written = path.stat().st_mtime
            p = self.show(unit)
        except (OSError, RuntimeFailure):
            return None
        # the unit's activation on the monotonic clock vs the file's mtime on the wall clock
        mono_written = (written - time.time() + time.monotonic()) * 1e6
        began = int(p.get("InactiveExitTimestampMonotonic") or 0)
        st = dict(state)
        st.update(unit=unit, container=state.get("container") or container_name(job.name), unit_file=str(path))
        st.setdefault("started_at", written)
        st.pop("signalled", None)
        inv = p["InvocationID"]
        if inv and inv != state.get("prev_invocation") and began >= mono_written - 1e6:
            st["invocation"] = inv
        elif p["Job"]:
            st["prev_invocation"] = inv  # the start job is queued: poll takes the next invocation
            st.pop("invocation", None)
        else:
            # collected by systemd after a clean end (or never ran, or a reboot): the journal knows
            j = self._journal_end(unit, since=written, exclude=state.get("prev_invocation") or
                                  (inv if began < mono_written - 1e6 else None))
            if j is None:
                return None
            st["invocation"] = j["invocation"]
        self._slots.pop(st.get("token") or unit, None)
        log.info("unit_adopted", job=job.name, unit=unit, state=p["ActiveState"])
        return Handle("systemd", job.name, st)

    def cleanup(self, handle: Handle) -> bool:
        """`systemctl reset-failed` on the worker (a failed unit keeps the host "degraded"; isaacd has
        recorded the exit already). The job unit's file stays: it documents the last attempt. A spare's unit
        (killed or dead unused, or the attempt it took over, ended) is stopped (a SIGKILLed container's unit
        may still be deactivating: `systemctl stop --no-block`, looked at again every SPARE_STOP_LOOK_S, never
        waited for on the worker) and its file removed."""
        slot = self._slot(handle)
        if slot.cleaned:
            return True
        if not slot.cleanup_queued:
            slot.cleanup_queued = True
            st = dict(handle.state)
            unit = st["unit"]
            spare = is_spare_container(handle.job, unit)

            def release() -> None:
                done = True
                try:
                    if spare:
                        done = self._release_spare_unit(handle.job, st, slot)
                    else:
                        self._ctl("reset-failed", unit, check=False)
                finally:
                    if done:
                        slot.cleaned = True
                    else:  # its unit is still stopping: look again later, the worker serves the other jobs meanwhile
                        self.worker.submit_after(SPARE_STOP_LOOK_S, f"cleanup {unit}", release)

            self.worker.submit(f"cleanup {unit}", release)
        return False

    def _release_spare_unit(self, job: str, st: dict[str, Any], slot: Slot) -> bool:
        """Worker, one look: a spare's unit is over for good: stopped, reset, its file removed, systemd reloaded.
        False while its stop is under way (`systemctl stop --no-block`; SIGKILL after SPARE_STOP_GRACE_S, given up
        STALE_KILL_WAIT later: the file stays for the job's next launch to sweep); True once done."""
        unit, path = st["unit"], Path(st["unit_file"])
        cancel = slot.cache.pop("cancel_after_start", None)
        if cancel is not None:  # killed while its launch ran: the unit started anyway
            self._podman_kill(st, cancel)
        if self.show(unit, ("ActiveState", "Job"), keep=False)["ActiveState"] in ACTIVE_STATES:
            # its container is dead or ends on the stop signal: the stale unit's stepwise stop, one step per look
            try:
                self._stop_stale_step(slot, SPARE_STOP_GRACE_S,
                                      lambda: self._ctl("stop", "--no-block", unit, check=False),
                                      lambda: self._ctl("kill", "-s", "SIGKILL", unit, check=False),
                                      lambda s: f"{unit} would not stop ({s:.0f} s); its file stays until the "
                                                f"job's next launch")
            except RuntimeFailure as exc:
                log.warning("spare_unit_stop_failed", job=job, unit=unit, detail=str(exc))
                return True
            return False
        self._ctl("reset-failed", unit, check=False)
        if path.exists() and launch_token_of(path) == st.get("token"):
            path.unlink(missing_ok=True)
            self._ctl("daemon-reload", timeout=120)
            log.info("spare_unit_removed", job=job, unit=unit, file=str(path))
        return True

    def describe(self, handle: Handle) -> RuntimeView:
        self._slot(handle)
        unit = handle.state["unit"]
        p = self._props.get(unit) or {}
        pids = self.pids(handle)
        cid = None
        try:
            cid = Path(f"/run/{unit.removesuffix('.service')}.cid").read_text().strip() or None
        except OSError:
            pass
        return RuntimeView(
            unit=unit, container_id=cid, container=handle.state.get("container"),
            pid=pids[0] if pids else (int(p["MainPID"]) if p.get("MainPID", "0") not in ("", "0") else None),
            cgroup=p.get("ControlGroup") or None, unit_file=handle.state.get("unit_file"),
            attempt=handle.state.get("attempt"))
