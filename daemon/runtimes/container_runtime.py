"""What the podman and systemd runtimes share: the attempt's container spec, the signal path, the launch's end.

Both run the job's container (`container_spec.ContainerSpec`) with their slow calls on a Worker
(`worker.SlottedRuntime`). They differ in how they start it (the Podman API, a systemd unit), in how they see
its processes (the container's PID 1 and its descendants, the unit's cgroup) and in how they kill it when they
cannot see them (the API, `podman kill`). A subclass writes those (`_launch_step`, `_trainer_pids`,
`_kill_on_worker`) and its `_look`; the frame of a launch (`_queue_launch`, `_launch`, `_launch_done`) and
`signal`, `kill` and `pids` are written here, once.
"""

from __future__ import annotations

import signal as _signal
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from ..config.schema import Config
from .base import ExitStatus, Handle, LaunchSpec, RuntimeFailure
from .container_spec import ContainerSpec, attempt_number
from ..os_seam.proctree import signal_each
from .worker import Slot, SlottedRuntime

DEFAULT_STATE_DIR = Path("/var/lib/isaacd")  # a runtime made without a config (tests, doctor)
STALE_STOP_MAX = 15.0  # a container of the job left running unclaimed gets this long after the stop, then SIGKILL
STALE_KILL_WAIT = 10.0  # and this long after SIGKILL before the launch gives up


class ContainerRuntime(SlottedRuntime):
    config: Config | None

    @property
    def state_dir(self) -> Path:
        return self.config.supervisor.state_dir if self.config else DEFAULT_STATE_DIR

    def _container_spec(self, spec: LaunchSpec) -> ContainerSpec:
        """The attempt's container, labelled with its launch token (the runner's, or a fresh one) and number."""
        token = spec.token or uuid.uuid4().hex[:16]
        return ContainerSpec.from_launch(spec, token, attempt_number(spec, self.state_dir))

    def _queue_launch(self, handle: Handle, what: str, launch: tuple[Any, ...]) -> Handle:
        """start()'s end: the attempt's slot with the launch's inputs in it, and the first launch step queued."""
        slot = self._slots[handle.state["token"]] = Slot(busy=True)
        slot.cache["launch"] = launch
        snap = dict(handle.state)
        self.worker.submit(f"launch {what}", lambda: self._launch(slot, snap))
        return handle

    def _launch(self, slot: Slot, snap: dict[str, Any]) -> None:
        """Worker: one step of the launch (`_launch_step`) unless a stop came first. Any failure is a failed
        attempt, which poll reports."""
        st = dict(snap)
        try:
            with slot.lock:
                cancelled = slot.cancel is not None
            if cancelled:
                self._launch_done(slot, ExitStatus(detail=self._not_launched(st)))
                return
            self._launch_step(slot, snap, st)
        except Exception as exc:  # noqa: BLE001 - any launch failure is a failed attempt, reported by poll
            self._launch_done(slot, ExitStatus(detail=str(exc), start_failed=True))
        finally:
            slot.busy = False

    @staticmethod
    def _launch_done(slot: Slot, exit_status: ExitStatus | None) -> int | None:
        """Worker: the launch task is over (`exit_status` when it failed); returns a signal that arrived
        while it ran, for the caller to pass on to the container it may just have started."""
        with slot.lock:
            slot.launched = True
            if exit_status is not None:
                slot.exit = exit_status
            return slot.cancel

    @staticmethod
    def _stop_stale_step(slot: Slot, grace: float, stop: Callable[[], None], kill: Callable[[], None],
                         stuck: Callable[[float], str], may_stop: bool = True) -> None:
        """Worker: never two of a job. One step of stopping a container of the job that is still running unclaimed
        (adoption would have taken it), one per launch step and never waiting: `stop` once (unless `may_stop` is
        False: it is stopping already), `kill` once `grace` seconds have passed, and a failed launch, which `stuck`
        (the seconds since the first step) explains, STALE_KILL_WAIT seconds after that. The systemd runtime
        releases an ended spare's unit with the same steps, one per look."""
        now = time.monotonic()
        since = slot.cache.setdefault("stale_since", now)
        if may_stop and not slot.cache.get("stale_stop_sent"):
            slot.cache["stale_stop_sent"] = True
            stop()
        elif now - since > grace + STALE_KILL_WAIT:
            raise RuntimeFailure(stuck(now - since))
        elif now - since > grace and not slot.cache.get("stale_killed"):
            slot.cache["stale_killed"] = True
            kill()

    # ---- Runtime (see base.py for the timing contract) -------------------------------------
    def signal(self, handle: Handle, sig: int) -> None:
        slot = self._slot(handle)
        handle.state["signalled"] = True
        with slot.lock:
            slot.signalled = True
            if not slot.launched:
                slot.cancel = sig  # the launch step sees it: not started, or stopped right after
                return
        pids = self._trainer_pids(handle) if sig != _signal.SIGKILL else []
        if pids:
            # Ctrl-C semantics, like the process runtime's killpg: every process of the trainer gets it.
            # (A kill through Podman would reach only the container's PID 1, which ignores signals it has
            # no handler for, e.g. a shell such as isaaclab.sh.)
            signal_each(pids, sig)
            return
        self._kill_on_worker(handle, sig)

    def kill(self, handle: Handle) -> None:
        self.signal(handle, _signal.SIGKILL)

    def pids(self, handle: Handle) -> list[int]:
        self._slot(handle)
        return self._trainer_pids(handle)

    # ---- what a subclass writes -------------------------------------------------------------
    def _launch_step(self, slot: Slot, snap: dict[str, Any], st: dict[str, Any]) -> None:
        """Worker: one step of the launch from `slot.cache["launch"]`, updating `st` (the Handle.state copy
        taken as `snap`); calls `_launch_done` when the launch is over, or leaves it for the next step."""
        raise NotImplementedError

    def _not_launched(self, st: dict[str, Any]) -> str:
        """The exit detail of an attempt stopped before its launch ran."""
        raise NotImplementedError

    def _trainer_pids(self, handle: Handle) -> list[int]:
        """The container's processes as this host sees them (local state only), [] when it cannot see them."""
        raise NotImplementedError

    def _kill_on_worker(self, handle: Handle, sig: int) -> None:
        """Queue `sig` for the container on the worker, through Podman (SIGKILL, or no process visible here)."""
        raise NotImplementedError
