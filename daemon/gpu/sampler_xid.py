"""The GPU sampler's XID pass: one wait for XID events, counted per (GPU, code), and whether XIDs are
watched at all on this system (a driver without event sets cannot report them).

Each new reason for not watching, and each XID, is logged once; the counts go to the sampler's
:class:`~isaacd.gpu.sampler_tally.PassTally` under the sampler's lock.
"""

from __future__ import annotations

import threading

import structlog

from .sampler_tally import PassTally
from .source import GpuSource
from .types import GpuError, GpuNotSupportedError, XidEvent, xid_class

log = structlog.get_logger("isaacd.gpu")


class XidPass:
    def __init__(self, lock: threading.Lock, tally: PassTally):
        self._lock, self._tally = lock, tally
        self.watching = False
        self.reason: str | None = "not started"

    def wait(self, source: GpuSource, timeout: float) -> tuple[list[XidEvent], bool]:
        """Wait up to ``timeout`` for XID events and count them; returns the events seen and whether
        the snapshot changed.  A failing wait is counted (``errors[("all", "xid_wait", kind)]``) and
        re-raised; the caller publishes it."""
        try:
            events = source.wait_xid(timeout)
        except GpuNotSupportedError as e:
            with self._lock:
                first = self.reason != str(e)
                self.watching, self.reason = False, str(e)
            if first:
                log.warning("gpu xid events not watched", reason=str(e))
            raise
        except Exception as e:
            kind = e.kind if isinstance(e, GpuError) else "error"
            with self._lock:
                self._tally.count_error("all", "xid_wait", kind)
                first = self.reason != str(e)
                self.reason = str(e)
            if first:
                log.warning("gpu xid wait failed", error=str(e), kind=kind)
            raise
        changed = bool(events) or not self.watching
        with self._lock:
            self.watching, self.reason = True, None
            self._tally.xids_seen(events)
        for ev in events:
            log.warning("gpu xid", gpu=ev.gpu, xid=ev.xid, xid_class=xid_class(ev.xid),
                        gpu_instance=ev.gpu_instance_id, compute_instance=ev.compute_instance_id)
        return events, changed
