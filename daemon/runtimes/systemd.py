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

This module is the runtime itself: the launch, the signal path, adoption and release. Its parts, each one job
(as Nomad keeps task_runner.go beside its hooks and getters): `systemd_units.py` where the unit files live and
writing them; `systemd_ctl.py` `systemctl` and the journal; `systemd_watch.py` one look at the unit and its end as
an `ExitStatus`; `systemd_spare.py` a warm spare's unit of its own, released and swept.

Warm spares (attempt/spare.py, `LaunchSpec.spare`): a unit of its own, `isaaclab-job-<job>-spare-<token12>.service`
(its file next to the job's, its container `spare_container_name`), so it never touches the job's unit, and
the job unit's "never two of a job" stop never sees it. At the go it becomes the attempt as it is (the attempt's
token is the spare's, in its file's header), so `poll`, `signal`, `adopt` and `find` treat it like any launch.
An ended spare unit is stopped and its file removed (`daemon-reload`) by `cleanup` (a spare killed or dead
unused, the attempt it became once ended), and any left over (a supervisor that died first) at the job's next
launch; running ones are left alone (the parked spare, or the attempt one became).

Who stopped it: isaacd stops a trainer with SIGINT to the container's processes (like Ctrl-C),
then `podman kill -s KILL`; it never runs `systemctl stop` on an attempt's unit. A unit that left "active" before
its main process exited was stopped by someone else (systemd_watch.py): an operator stop, recorded, not fought.
"""

from __future__ import annotations

import os
import signal as _signal
import time
from pathlib import Path
from typing import Any

from ..config.schema import Config, JobConfig
from ..daemon_log import log
from .base import ExitStatus, Handle, LaunchSpec, RuntimeFailure
from .container_runtime import STALE_STOP_MAX, ContainerRuntime
from .container_spec import container_name, is_spare_container, prepare_log_root, spare_container_name
from .host import cgroup_pids, podman_binary, podman_version, run_cmd
from .quadlet import has_quadlet, launch_token_of, spare_unit_name, unit_name
from .systemd_ctl import ACTIVE_STATES, PROPS, Systemctl, journal_end
from .systemd_spare import SPARE_STOP_LOOK_S, SpareUnits
from .systemd_units import UnitFiles, write_atomic
from .systemd_watch import UnitWatch
from .view import RuntimeView
from .worker import Slot, Worker

__all__ = ["SystemdRuntime"]


class SystemdRuntime(ContainerRuntime):
    """The launch, the signal path, adoption and release of a job's unit; its parts do the rest: `files` (where
    the unit files live, systemd_units.py), `ctl` (systemctl and its last `show`, systemd_ctl.py), `watch` (how the
    unit is doing, systemd_watch.py), `spares` (a warm spare's unit of its own, systemd_spare.py)."""

    name = "systemd"
    poll_failed_event = "systemd_poll_failed"

    def __init__(self, config: Config | None = None):
        self.config = config
        self.podman = podman_binary()
        self.podman_version = podman_version(self.podman)
        self.files = UnitFiles(has_quadlet(self.podman_version), self.podman)
        self.ctl = Systemctl(os.environ.get("ISAACD_SYSTEMCTL", "systemctl"))
        self.watch = UnitWatch(self.ctl, self.podman)
        self.spares = SpareUnits(self.ctl, self.files, self._podman_kill, self._stop_stale_step)
        self._slots: dict[str, Slot] = {}  # by launch token
        self.worker = Worker("systemd")

    @property
    def quadlet(self) -> bool:
        """Podman has Quadlet here: the units are `.container` files (else the `.service` Quadlet would make)."""
        return self.files.quadlet

    def show(self, unit: str, props: tuple[str, ...] = PROPS, keep: bool = True) -> dict[str, str]:
        """`systemctl show` of the unit (synchronous: the worker's, recovery's and the testbed probe's)."""
        return self.ctl.show(unit, props, keep)

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
        text = self.files.render(cs)
        # a warm spare: a unit of its own beside the job's (named after its container, spare_container_name)
        unit = spare_unit_name(job.name, cs.token) if spec.spare else unit_name(job.name)
        prepare_log_root(job, spec.run_as)
        path = self.files.path(job.name, cs.token if spec.spare else None)
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
            self.files.drop_other_mode(job)  # ours, from the other mode (Podman was upgraded)
        self.spares.sweep(job, keep=unit)  # the daemon-reload below unloads them
        write_atomic(path, text)
        self.ctl("daemon-reload", timeout=120)
        props = self.show(unit)
        if props["LoadState"] != "loaded":
            raise RuntimeFailure(self.files.why_not_loaded(unit, path, props["LoadState"]))
        self.ctl("reset-failed", unit, check=False)
        st["prev_invocation"] = props["InvocationID"]
        st["started_at"] = time.time()  # START_GRACE and the journal are counted from here
        self.ctl("start", "--no-block", unit)
        log.info("unit_started", job=job, unit=unit, file=str(path), attempt=st.get("attempt"),
                 mode=self.files.mode)
        slot.record(snap, st)
        cancel = self._launch_done(slot, None)
        if cancel is not None:  # a stop that came meanwhile: the next look passes it on to the unit
            slot.cache["cancel_after_start"] = cancel

    def _stop_stale(self, job: str, unit: str, active: str, stop_timeout: float, slot: Slot) -> None:
        """Never two of a job: a unit still running here is not ours to keep (adoption would have taken
        it). One look per step: `systemctl stop --no-block`, SIGKILL after the grace, give up after 10 s more.
        A unit already deactivating (the last attempt's ExecStop) gets stop_timeout + 30 s before SIGKILL."""
        grace = stop_timeout + 30 if active == "deactivating" and not slot.cache.get("stale_stop_sent") \
            else min(stop_timeout + 30, STALE_STOP_MAX)

        def stop() -> None:
            log.warning("stale_unit_stopped", job=job, unit=unit, state=active,
                        detail="a unit of this job was running but not adopted; stopping it first")
            self.ctl("stop", "--no-block", unit)

        self._stop_stale_step(slot, grace, stop, lambda: self.ctl("kill", "-s", "SIGKILL", unit, check=False),
                              lambda s: f"{unit} of an earlier attempt would not stop ({active} for {s:.0f} s)",
                              may_stop=active != "deactivating")

    def _look(self, st: dict[str, Any], slot: Slot) -> ExitStatus | None:
        cancel = slot.cache.pop("cancel_after_start", None)
        if cancel is not None:  # stopped while the launch was queued: the unit started anyway
            self._podman_kill(st, cancel)
        return self.watch.look(st, slot)

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
            self.ctl("kill", "-s", f"SIG{name}", st["unit"], check=False)

    def _trainer_pids(self, handle: Handle) -> list[int]:
        if not handle.state.get("invocation"):
            return []  # not our invocation yet: the cgroup may still hold an earlier attempt's container
        cg = self.ctl.last(handle.state["unit"]).get("ControlGroup")
        if not cg:
            return []
        # --cgroups=split: conmon in <unit>/runtime, the container in <unit>/libpod-payload-<id>;
        # `podman run` itself, while it starts the container, sits in <unit> and is not the trainer
        return cgroup_pids(cg, only_prefix="libpod-payload-")

    def adopt(self, job: JobConfig, state: dict[str, Any]) -> Handle | None:
        """Synchronous (recovery): the unit file's token, then one `systemctl show` (and the journal
        when systemd has already collected the unit)."""
        path = Path(state.get("unit_file") or self.files.path(job.name))
        if not state.get("token") or launch_token_of(path) != state.get("token"):
            return None  # the unit file belongs to another attempt, or is gone
        return self._locate(job, path, dict(state))

    def find(self, job: JobConfig, token: str) -> Handle | None:
        """The unit of the attempt launched with `token`: its file carries the token (`# isaacd-launch:`),
        and an invocation of the unit began after the file was written. Synchronous (recovery)."""
        if not token:
            return None
        for path in self.files.job_files(job.name):
            if launch_token_of(path) == token:
                return self._locate(job, path, {"token": token, "unit_file": str(path)})
        # a warm spare's unit of its own: parked, or the attempt it took over (its token is the attempt's)
        for path in self.files.spare_files_of(job.name, token):
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
            j = journal_end(unit, since=written, exclude=state.get("prev_invocation") or
                            (inv if began < mono_written - 1e6 else None))
            if j is None:
                return None
            st["invocation"] = j.invocation
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
                        done = self.spares.release(handle.job, st, slot)
                    else:
                        self.ctl("reset-failed", unit, check=False)
                finally:
                    if done:
                        slot.cleaned = True
                    else:  # its unit is still stopping: look again later, the worker serves the other jobs meanwhile
                        self.worker.submit_after(SPARE_STOP_LOOK_S, f"cleanup {unit}", release)

            self.worker.submit(f"cleanup {unit}", release)
        return False

    def describe(self, handle: Handle) -> RuntimeView:
        self._slot(handle)
        unit = handle.state["unit"]
        p = self.ctl.last(unit)
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
