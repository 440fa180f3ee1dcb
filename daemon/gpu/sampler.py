"""Background GPU sampler: the only code that calls a :class:`GpuSource`.

Three daemon threads:

* ``isaacd-gpu-fast`` opens the source (and re-opens it every ``reopen_interval`` while it is
  unavailable), then samples the fast fields of every device every ``sample_interval``;
* ``isaacd-gpu-slow`` samples the expensive fields every ``slow_interval``;
* ``isaacd-gpu-xid`` sits in ``source.wait_xid`` and counts XID events per (GPU, code).

After each pass the sampler publishes a new immutable :class:`GpuSnapshot`; :meth:`GpuSampler.snapshot`
returns the latest one without taking any lock a source call could hold, so a Prometheus scrape
never waits on NVML.  A call that fails on one GPU drops that GPU's series, counts the error and
never stops a loop.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable

import structlog

from .source import GpuSource, make_source
from .types import (
    DriverInfo,
    DurationHistogram,
    GpuError,
    GpuInfo,
    GpuMap,
    GpuNotSupportedError,
    GpuSample,
    GpuSlowSample,
    GpuUnavailableError,
    ProcessMemory,
    XidCount,
    XidEvent,
    xid_class,
)

DEFAULT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LOOPS = ("fast", "slow")  # loops whose pass durations go into the histogram

log = structlog.get_logger("isaacd.gpu")


def _empty_hist(buckets: tuple[float, ...]) -> DurationHistogram:
    return DurationHistogram(buckets=buckets, counts=(0,) * len(buckets))


@dataclass(frozen=True)
class GpuSnapshot:
    """Everything the exporter and the watchdogs read, frozen at ``taken_at`` (unix seconds).

    ``samples``/``slow`` hold the latest *successful* sample per GPU: a GPU whose last pass failed
    (lost, unexpected error) is absent, so its series disappear instead of freezing.
    """

    taken_at: float
    up: bool
    reason: str | None
    source: str
    driver: DriverInfo
    gpus: GpuMap[GpuInfo]
    samples: GpuMap[GpuSample]
    slow: GpuMap[GpuSlowSample]
    xids: Mapping[tuple[str, int], XidCount]
    errors: Mapping[tuple[str, str, str], int]  # (gpu key, field, kind) -> count
    unhealthy: GpuMap[str]  # gpu key -> reason, set through GpuSampler.mark_unhealthy
    durations: Mapping[str, DurationHistogram]  # loop -> histogram of pass durations
    xid_watch: bool = False
    xid_reason: str | None = None
    last_pass: Mapping[str, float] = field(default_factory=dict)  # loop -> unix time of last pass
    failing: Mapping[str, str] = field(default_factory=dict)  # gpu key -> error kind of its failing fast sample

    @property
    def processes(self) -> tuple[ProcessMemory, ...]:
        return tuple(p for s in self.samples.values() for p in (s.processes or ()))

    def resolve(self, ref: Any) -> GpuInfo | None:
        """GPU by int index, key (``"0"``, ``"0:1"``) or UUID; ``None`` if unknown."""
        return self.gpus.get(ref)

    def sample(self, ref: Any) -> GpuSample | None:
        return self.samples.get(ref)

    def is_up(self, ref: Any) -> bool:
        """The last fast pass over this GPU succeeded."""
        return ref in self.samples

    def xid_total(self, ref: Any | None = None, xid: int | None = None) -> int:
        key = None if ref is None else (g.key if (g := self.resolve(ref)) else str(ref))
        return sum(c.count for (k, x), c in self.xids.items()
                   if (key is None or k == key) and (xid is None or x == xid))


def empty_snapshot(reason: str = "GPU sampler not started", source: str = "none") -> GpuSnapshot:
    return GpuSnapshot(
        taken_at=time.time(), up=False, reason=reason, source=source, driver=DriverInfo(),
        gpus=GpuMap(), samples=GpuMap(), slow=GpuMap(), xids=MappingProxyType({}), errors=MappingProxyType({}),
        unhealthy=GpuMap(), durations=MappingProxyType({l: _empty_hist(DEFAULT_BUCKETS) for l in LOOPS}),
    )


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
        self._buckets = tuple(buckets)
        self._lock = threading.Lock()  # guards the mutable state below; never held across a source call
        self._stop = threading.Event()
        self._opened = threading.Event()
        self._ready = threading.Event()
        self._threads: list[threading.Thread] = []
        self._up = False
        self._reason: str | None = "GPU sampler not started" if source is not None else "no GPU source configured"
        self._logged_reason: str | None = None
        self._gpus: list[GpuInfo] = []
        self._aliases: dict[str, str] = {}
        self._driver = DriverInfo()
        self._samples: dict[str, GpuSample] = {}
        self._slow: dict[str, GpuSlowSample] = {}
        self._xids: dict[tuple[str, int], XidCount] = {}
        self._errors: dict[tuple[str, str, str], int] = {}
        self._seen_unsupported: set[tuple[str, str]] = set()
        self._failing: dict[tuple[str, str], str] = {}  # (gpu, loop) -> kind, to log transitions once
        self._unhealthy: dict[str, str] = {}
        self._hist: dict[str, list[Any]] = {l: [[0] * len(self._buckets), 0, 0.0] for l in LOOPS}
        self._last_pass: dict[str, float] = {}
        self._xid_watch = False
        self._xid_reason: str | None = "not started"
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
        if self._threads:
            return self
        self._stop.clear()
        self._ready.clear()
        self._last_open_try = -float("inf")  # a restart opens at once
        for name, target in (("fast", self._fast_loop), ("slow", self._slow_loop), ("xid", self._xid_loop)):
            t = threading.Thread(target=target, name=f"isaacd-gpu-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        limit = timeout if timeout is not None else self.xid_timeout + 5.0
        deadline = time.monotonic() + limit
        stuck = []
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                stuck.append(t.name)
        self._threads = []
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
            self._xid_watch = False
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
        t0 = time.perf_counter()
        for gpu in list(self._gpus):
            try:
                s = self.source.sample_fast(gpu)  # type: ignore[union-attr]
            except Exception as e:  # noqa: BLE001
                self._device_failed(gpu, "fast", e)
                continue
            with self._lock:
                self._samples[gpu.key] = s
                self._count_field_errors(gpu.key, s.errors)
            self._device_ok(gpu, "fast")
        self._observe("fast", time.perf_counter() - t0)
        self._publish()
        self._ready.set()

    def poll_slow(self) -> None:
        if not self._opened.is_set():
            return
        t0 = time.perf_counter()
        for gpu in list(self._gpus):
            try:
                s = self.source.sample_slow(gpu)  # type: ignore[union-attr]
            except Exception as e:  # noqa: BLE001
                self._device_failed(gpu, "slow", e)
                continue
            with self._lock:
                self._slow[gpu.key] = s
                self._count_field_errors(gpu.key, s.errors)
            self._device_ok(gpu, "slow")
        self._observe("slow", time.perf_counter() - t0)
        self._publish()

    def poll_xid(self, timeout: float | None = None) -> list[XidEvent]:
        """Wait up to ``timeout`` for XID events and count them; returns the events seen.
        A failing wait is counted (``errors[("all", "xid_wait", kind)]``) and re-raised."""
        if not self._opened.is_set():
            return []
        try:
            events = self.source.wait_xid(self.xid_timeout if timeout is None else timeout)  # type: ignore[union-attr]
        except GpuNotSupportedError as e:
            with self._lock:
                first = self._xid_reason != str(e)
                self._xid_watch, self._xid_reason = False, str(e)
            if first:
                log.warning("gpu xid events not watched", reason=str(e))
            self._publish()
            raise
        except Exception as e:
            kind = e.kind if isinstance(e, GpuError) else "error"
            with self._lock:
                k = ("all", "xid_wait", kind)
                self._errors[k] = self._errors.get(k, 0) + 1
                first = self._xid_reason != str(e)
                self._xid_reason = str(e)
            if first:
                log.warning("gpu xid wait failed", error=str(e), kind=kind)
            self._publish()
            raise
        changed = bool(events) or not self._xid_watch
        with self._lock:
            self._xid_watch, self._xid_reason = True, None
            for ev in events:
                k2 = (ev.gpu, ev.xid)
                old = self._xids.get(k2)
                self._xids[k2] = XidCount(count=(old.count if old else 0) + 1,
                                          last_seen=max(ev.timestamp, old.last_seen if old else ev.timestamp))
        for ev in events:
            log.warning("gpu xid", gpu=ev.gpu, xid=ev.xid, xid_class=xid_class(ev.xid),
                        gpu_instance=ev.gpu_instance_id, compute_instance=ev.compute_instance_id)
        if changed:
            self._publish()
        return events

    # ------------------------------------------------------------------ bookkeeping
    def _count_field_errors(self, key: str, errors: Any) -> None:
        for fe in errors:
            if fe.kind == "not_supported":
                if (key, fe.field) in self._seen_unsupported:
                    continue  # counted once: it will not start working on its own
                self._seen_unsupported.add((key, fe.field))
            k = (key, fe.field, fe.kind)
            self._errors[k] = self._errors.get(k, 0) + 1

    def _device_failed(self, gpu: GpuInfo, loop: str, e: Exception) -> None:
        kind = e.kind if isinstance(e, GpuError) else "error"
        with self._lock:
            (self._samples if loop == "fast" else self._slow).pop(gpu.key, None)
            k = (gpu.key, "device", kind)
            self._errors[k] = self._errors.get(k, 0) + 1
            first = self._failing.get((gpu.key, loop)) != kind
            self._failing[(gpu.key, loop)] = kind
        if first:
            log.error("gpu sample failed", gpu=gpu.key, uuid=gpu.uuid, loop=loop, kind=kind, error=str(e),
                      **({} if isinstance(e, GpuError) else {"exc_type": type(e).__name__}))

    def _device_ok(self, gpu: GpuInfo, loop: str) -> None:
        if (gpu.key, loop) in self._failing:
            with self._lock:
                kind = self._failing.pop((gpu.key, loop), None)
            if kind is not None:
                log.info("gpu sample ok again", gpu=gpu.key, loop=loop, was=kind)

    def _observe(self, loop: str, seconds: float) -> None:
        with self._lock:
            h = self._hist[loop]
            i = bisect.bisect_left(self._buckets, seconds)
            for j in range(i, len(self._buckets)):
                h[0][j] += 1
            h[1] += 1
            h[2] += seconds
            self._last_pass[loop] = self._clock()

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
                samples=GpuMap(self._samples, aliases),
                slow=GpuMap(self._slow, aliases),
                xids=MappingProxyType(dict(self._xids)),
                errors=MappingProxyType(dict(self._errors)),
                unhealthy=GpuMap(self._unhealthy, aliases),
                durations=MappingProxyType({
                    l: DurationHistogram(self._buckets, tuple(h[0]), h[1], h[2]) for l, h in self._hist.items()
                }),
                xid_watch=self._xid_watch,
                xid_reason=self._xid_reason,
                last_pass=MappingProxyType(dict(self._last_pass)),
                failing=MappingProxyType({g: k for (g, loop), k in self._failing.items() if loop == "fast"}),
            )
            self._snap = snap

    # ------------------------------------------------------------------ threads
    def _guard(self, loop: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the loop must survive anything
            log.exception("gpu sampler pass crashed", loop=loop, error=str(e))

    def _fast_loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            if not self._opened.is_set() and time.monotonic() - self._last_open_try < self.reopen_interval:
                self._stop.wait(min(self.sample_interval, 1.0))
                continue
            self._guard("fast", self.poll_fast)
            next_t += self.sample_interval
            now = time.monotonic()
            if next_t < now:  # fell behind (slow driver): skip missed ticks, don't burst
                next_t = now + self.sample_interval
            self._stop.wait(next_t - now)

    def _slow_loop(self) -> None:
        while not self._stop.is_set():
            if not self._opened.wait(0.5):
                continue
            start = time.monotonic()
            self._guard("slow", self.poll_slow)
            self._stop.wait(max(0.0, self.slow_interval - (time.monotonic() - start)))

    def _xid_loop(self) -> None:
        while not self._stop.is_set():
            if not self._opened.wait(0.5):
                continue
            t0 = time.monotonic()
            try:
                if not self.poll_xid() and time.monotonic() - t0 < min(0.01, self.xid_timeout):
                    # a source that returns at once without events must not make this thread spin
                    self._stop.wait(min(self.xid_timeout, 0.5))
            except GpuNotSupportedError:
                return  # logged once in poll_xid; nothing to watch on this system
            except Exception:  # noqa: BLE001 - counted and logged in poll_xid
                self._stop.wait(1.0)


def build_sampler(source: str = "nvml", script: str | None = None, sample_interval: float = 1.0,
                  slow_interval: float = 10.0, *, clock: Callable[[], float] | None = None) -> GpuSampler:
    """Convenience: ``build_sampler(cfg.gpu.source, cfg.gpu.script, cfg.gpu.sample_interval, cfg.gpu.slow_interval)``."""
    src = make_source(source, script)
    kwargs: dict[str, Any] = {} if clock is None else {"clock": clock}
    return GpuSampler(src, sample_interval=sample_interval, slow_interval=slow_interval, **kwargs)
