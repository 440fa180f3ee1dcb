"""Background GPU sampler: the only code that calls a :class:`GpuSource`.

Its passes open the source, sample the fast fields, the slow fields and the XID events of every device;
``sampler_threads.py`` runs each on its own daemon thread, ``sampler_tally.py`` counts what they saw,
``sampler_xid.py`` is the XID pass.

After each pass the sampler publishes a new immutable :class:`GpuSnapshot` (``snapshot.py``);
:meth:`GpuSampler.snapshot` returns the latest one without taking any lock a source call could hold, so
a Prometheus scrape never waits on NVML.  A call that fails on one GPU drops that GPU's series, counts
the error and never stops a loop.
"""

from __future__ import annotations

import threading
import time
from types import MappingProxyType
from typing import Any, Callable

import structlog

from .sampler_tally import PassTally
from .sampler_threads import SamplerThreads
from .sampler_xid import XidPass
from .snapshot import DEFAULT_BUCKETS, GpuSnapshot, empty_snapshot
from .source import GpuSource, make_source
from .types import (
    DriverInfo,
    GpuError,
    GpuInfo,
    GpuMap,
    GpuSample,
    GpuSlowSample,
    GpuUnavailableError,
    XidEvent,
)

__all__ = ["DEFAULT_BUCKETS", "GpuSampler", "GpuSnapshot", "build_sampler", "empty_snapshot"]

log = structlog.get_logger("isaacd.gpu")


class GpuSampler:
    def __init__(
        self,
        source: GpuSource | None,
        *,
        sample_interval: float = 1.0,
        slow_interval: float = 10.0,
        xid_timeout: float = 1.0,
        reopen_interval: float = 30.0,
        clock: Callable[[], float] = time.time,
        buckets: tuple[float, ...] = DEFAULT_BUCKETS,
    ):
        if sample_interval <= 0 or slow_interval <= 0:
            raise ValueError("sample_interval and slow_interval must be > 0")
        self.source = source
        self.sample_interval = float(sample_interval)
        self.slow_interval = float(slow_interval)
        self.xid_timeout = float(xid_timeout)
        self.reopen_interval = float(reopen_interval)
        self._clock = clock
        self._lock = threading.Lock()  # guards the mutable state below; never held across a source call
        self._opened = threading.Event()
        self._ready = threading.Event()
        self._threads = SamplerThreads(self, self._opened)
        self._up = False
        self._reason: str | None = "GPU sampler not started" if source is not None else "no GPU source configured"
        self._logged_reason: str | None = None
        self._gpus: list[GpuInfo] = []
        self._aliases: dict[str, str] = {}
        self._driver = DriverInfo()
        self._tally = PassTally(buckets)  # samples, error counts, XIDs, pass durations
        self._unhealthy: dict[str, str] = {}
        self._xid = XidPass(self._lock, self._tally)
        self._last_open_try = -float("inf")
        self._snap = empty_snapshot(self._reason or "", self._source_name())
        # True when no job needs a GPU (a CPU-only host, the quick start): "collector down" is then
        # expected and logged at info, not as a warning an operator should act on.
        self.gpus_optional = False
        self._publish()

    @classmethod
    def from_config(cls, gpu_cfg: Any, *, clock: Callable[[], float] | None = None) -> "GpuSampler":
        """From a ``[gpu]`` config object with ``source``, ``script``, ``sample_interval``, ``slow_interval``."""
        source = make_source(str(gpu_cfg.source), getattr(gpu_cfg, "script", None))
        kwargs: dict[str, Any] = {} if clock is None else {"clock": clock}
        return cls(source, sample_interval=gpu_cfg.sample_interval, slow_interval=gpu_cfg.slow_interval, **kwargs)

    def _source_name(self) -> str:
        return getattr(self.source, "name", "none") if self.source is not None else "none"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "GpuSampler":
        if self._threads.running:
            return self
        self._ready.clear()
        self._last_open_try = -float("inf")  # a restart opens at once
        self._threads.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        stuck = self._threads.stop(timeout if timeout is not None else self.xid_timeout + 5.0)
        if stuck:
            # A thread stuck inside a driver call: closing the library under it is worse than leaking.
            log.warning("gpu sampler threads did not stop; source left open", threads=stuck)
            return
        if self.source is not None and self._opened.is_set():
            try:
                self.source.close()
            except Exception as e:  # noqa: BLE001
                log.warning("gpu source close failed", error=str(e))
        self._opened.clear()
        with self._lock:
            self._up = False
            self._reason = "GPU sampler stopped"
            self._xid.watching = False
        self._publish()

    def __enter__(self) -> "GpuSampler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def wait_ready(self, timeout: float = 10.0) -> bool:
        """Block until the first fast pass (or the first failed open) has been published."""
        return self._ready.wait(timeout)

    # ------------------------------------------------------------------ public reads / writes
    def snapshot(self) -> GpuSnapshot:
        return self._snap  # an immutable object, replaced atomically after every pass

    def mark_unhealthy(self, gpu: Any, reason: str) -> None:
        key = self._key(gpu)
        with self._lock:
            changed = self._unhealthy.get(key) != reason
            self._unhealthy[key] = reason
        if changed:
            log.warning("gpu marked unhealthy", gpu=key, reason=reason)
        self._publish()

    def clear_unhealthy(self, gpu: Any) -> None:
        key = self._key(gpu)
        with self._lock:
            had = self._unhealthy.pop(key, None)
        if had is not None:
            log.info("gpu healthy again", gpu=key)
        self._publish()

    def get_power_limit(self, gpu: Any) -> float:
        src = self._require_source()
        return src.get_power_limit(self._info(gpu))

    def set_power_limit(self, gpu: Any, watts: float) -> None:
        """Raises GpuPermissionError (a PermissionError) when not allowed, ValueError out of range,
        GpuUnavailableError when there is no GPU source, KeyError for an unknown GPU."""
        src = self._require_source()
        info = self._info(gpu)
        src.set_power_limit(info, watts)
        log.info("gpu power limit set", gpu=info.key, watts=watts)

    def _require_source(self) -> GpuSource:
        if self.source is None or not self._opened.is_set():
            raise GpuUnavailableError(self._reason or "GPU source not open")
        return self.source

    def _key(self, gpu: Any) -> str:
        g = GpuMap({k: k for k in self._aliases.values()}, self._aliases).get(gpu)
        return g if g is not None else str(gpu)

    def _info(self, gpu: Any) -> GpuInfo:
        info = self.snapshot().resolve(gpu)
        if info is None:
            raise KeyError(f"unknown GPU {gpu!r}")
        return info

    # ------------------------------------------------------------------ one pass each (also used by tests)
    def open_due(self) -> bool:
        """The last try to open the source is ``reopen_interval`` old (asked while it is closed)."""
        return time.monotonic() - self._last_open_try >= self.reopen_interval

    def open(self) -> bool:
        """Try to open the source; returns whether it is open."""
        if self._opened.is_set():
            return True
        self._last_open_try = time.monotonic()
        if self.source is None:
            self._set_down("no GPU source configured")
            return False
        try:
            gpus = self.source.open()
            driver = self.source.driver_info()
        except GpuUnavailableError as e:
            self._set_down(str(e))
            return False
        except Exception as e:  # noqa: BLE001 - a broken source must not kill the daemon
            self._set_down(f"GPU source failed to open: {type(e).__name__}: {e}")
            return False
        with self._lock:
            self._gpus = list(gpus)
            self._aliases = {g.uuid: g.key for g in gpus}
            self._driver = driver
            self._up = True
            was_down = self._logged_reason is not None
            self._reason = None
            self._logged_reason = None
        log.info("gpu collector up" if not was_down else "gpu collector up again", source=self._source_name(),
                 gpus=[g.key for g in gpus], driver=driver.driver_version)
        self._opened.set()
        self._publish()
        return True

    def _set_down(self, reason: str) -> None:
        with self._lock:
            self._up = False
            self._reason = reason
            first = self._logged_reason != reason
            self._logged_reason = reason
        if first:
            (log.info if self.gpus_optional else log.warning)(
                "gpu collector down", reason=reason, source=self._source_name(),
                **({"detail": "no job uses a GPU"} if self.gpus_optional else {}))
        self._publish()

    def poll_fast(self) -> None:
        """One fast pass over every device (opens the source first if needed)."""
        if not self._opened.is_set():
            if not self.open():
                self._ready.set()
                return
        self._pass("fast", self.source.sample_fast)  # type: ignore[union-attr]
        self._ready.set()

    def poll_slow(self) -> None:
        if not self._opened.is_set():
            return
        self._pass("slow", self.source.sample_slow)  # type: ignore[union-attr]

    def _pass(self, loop: str, sample: Callable[[GpuInfo], GpuSample | GpuSlowSample]) -> None:
        """Sample every device; one that fails loses its series and is counted, the others go on."""
        t0 = time.perf_counter()
        for gpu in list(self._gpus):
            try:
                s = sample(gpu)
            except Exception as e:  # noqa: BLE001
                self._device_failed(gpu, loop, e)
                continue
            with self._lock:
                self._tally.sampled(loop, gpu.key, s)
            self._device_ok(gpu, loop)
        with self._lock:
            self._tally.observe(loop, time.perf_counter() - t0, self._clock())
        self._publish()

    def poll_xid(self, timeout: float | None = None) -> list[XidEvent]:
        """Wait up to ``timeout`` for XID events and count them; returns the events seen.
        A failing wait is counted (``errors[("all", "xid_wait", kind)]``) and re-raised."""
        if not self._opened.is_set():
            return []
        try:
            events, changed = self._xid.wait(self.source,  # type: ignore[arg-type]
                                             self.xid_timeout if timeout is None else timeout)
        except Exception:
            self._publish()  # the failed wait's count, or that XIDs cannot be watched here
            raise
        if changed:
            self._publish()
        return events

    # ------------------------------------------------------------------ bookkeeping
    def _device_failed(self, gpu: GpuInfo, loop: str, e: Exception) -> None:
        kind = e.kind if isinstance(e, GpuError) else "error"
        with self._lock:
            first = self._tally.failed(loop, gpu.key, kind)
        if first:
            log.error("gpu sample failed", gpu=gpu.key, uuid=gpu.uuid, loop=loop, kind=kind, error=str(e),
                      **({} if isinstance(e, GpuError) else {"exc_type": type(e).__name__}))

    def _device_ok(self, gpu: GpuInfo, loop: str) -> None:
        if self._tally.is_failing(gpu.key, loop):
            with self._lock:
                kind = self._tally.recovered(gpu.key, loop)
            if kind is not None:
                log.info("gpu sample ok again", gpu=gpu.key, loop=loop, was=kind)

    def _publish(self) -> None:
        with self._lock:
            aliases = dict(self._aliases)
            snap = GpuSnapshot(
                taken_at=self._clock(),
                up=self._up,
                reason=self._reason,
                source=self._source_name(),
                driver=self._driver,
                gpus=GpuMap({g.key: g for g in self._gpus}, aliases),
                samples=GpuMap(self._tally.samples, aliases),
                slow=GpuMap(self._tally.slow, aliases),
                xids=MappingProxyType(dict(self._tally.xids)),
                errors=MappingProxyType(dict(self._tally.errors)),
                unhealthy=GpuMap(self._unhealthy, aliases),
                durations=self._tally.durations(),
                xid_watch=self._xid.watching,
                xid_reason=self._xid.reason,
                last_pass=MappingProxyType(dict(self._tally.last_pass)),
                failing=self._tally.failing_fast(),
            )
            self._snap = snap


def build_sampler(source: str = "nvml", script: str | None = None, sample_interval: float = 1.0,
                  slow_interval: float = 10.0, *, clock: Callable[[], float] | None = None) -> GpuSampler:
    """Convenience: ``build_sampler(cfg.gpu.source, cfg.gpu.script, cfg.gpu.sample_interval, cfg.gpu.slow_interval)``."""
    src = make_source(source, script)
    kwargs: dict[str, Any] = {} if clock is None else {"clock": clock}
    return GpuSampler(src, sample_interval=sample_interval, slow_interval=slow_interval, **kwargs)
