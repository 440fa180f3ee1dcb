"""A :class:`~isaacd.gpu.source.GpuSource` that replays a scripted timeline.

Used by tests (heat, throttling, XIDs, a GPU falling off the bus cannot be caused on purpose) and by
a supervisor started with ``[gpu] source = "scripted"`` / ``script = "/path/timeline.json"``.

Script format (JSON, TOML, or the same structure as a Python dict; a bare list is ``events``)::

    {
      "gpus": 2,                         # or a list of {"index", "uuid", "model", "pci_bus_id",
                                         #   "mig": bool, "parent": int, "unsupported": [field, ...],
                                         #   "mig_mode": bool (a GPU in MIG mode; implied by its MIG devices)}
      "defaults": {"temperature_celsius": 35},   # start values for every GPU (override built-ins)
      "unavailable": "reason",           # open() fails like NVML without a driver
      "xid_unsupported": "reason",       # wait_xid() raises GpuNotSupportedError
      "power_limit_settable": true,      # false: set_power_limit raises GpuPermissionError
      "events": [
        {"t": 0,  "gpu": 0, "utilization_gpu_ratio": 0.97, "power_watts": 610},
        {"t": 60, "gpu": 0, "temperature_celsius": 91, "ramp": true},     # linear from the previous value
        {"t": 61, "gpu": 0, "clock_event_reasons": ["hw_thermal_slowdown"]},
        {"t": 62, "gpu": 0, "xid": 79},                                    # or a list of codes
        {"t": 63, "gpu": 1, "lost": true},                                 # every call raises GpuLostError
        {"t": 70, "gpu": 1, "lost": false},                                # back on the bus
        {"t": 5,  "gpu": "all", "processes": [{"pid": "children", "used_bytes": 2e9}]},
        {"t": 9,  "gpu": 0, "fail": {"power_watts": "error"}},             # that field's call fails
        {"t": 12, "gpu": 0, "fail": {}}
      ]
    }

A MIG device (``"mig": true, "parent": N``) reads as NVML reads one through its MIG device handle
(``nvmlDeviceGetMigDeviceHandleByIndex``): its key is ``"N:index"``, its UUID ``MIG-...``, its memory
the instance's own (``nvmlDeviceGetMemoryInfo`` on the MIG handle: unless an event scripts it, its
profile's share of the GPUs' memory (``defaults``), read from the model name, ``"... MIG 3g.71gb"`` being 4 of 8 memory slices), no
utilization, temperature, power, clocks or slow fields (NVML has those on the parent only), and the
processes on it.  Its parent then reports no processes (NVML reports them per MIG device) and, unless
scripted, the memory used on all its instances (the aggregate NVML gives on a MIG-mode GPU's handle).
``t`` is seconds since :meth:`ScriptedSource.open` on the injected ``clock`` (default ``time.time``).
Field names are those of :class:`~isaacd.gpu.types.GpuSample` / :class:`~isaacd.gpu.types.GpuSlowSample`.
Values hold from their ``t`` until changed (step), or ramp linearly up to an event marked
``"ramp": true``.  ``gpu`` may be an index, a key (``"0:1"``), a list, or ``"all"`` (the default).
Process ``pid`` may be a number, ``"self"`` (this process) or ``"children"`` (each direct child of
this process, e.g. the jobs of a supervisor running this script).  When not scripted,
``thermal_margin_celsius`` follows ``gpu_max - temperature``, ``energy_joules`` integrates
``power_watts``, and power draw is capped by the (settable) power limit.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
import threading
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from .types import (
    FAST_FIELDS,
    SLOW_FIELDS,
    TEMPERATURE_THRESHOLDS,
    DriverInfo,
    FieldError,
    GpuError,
    GpuInfo,
    GpuLostError,
    GpuNotSupportedError,
    GpuPermissionError,
    GpuSample,
    GpuSlowSample,
    GpuUnavailableError,
    ProcessMemory,
    XidEvent,
    clock_event_mask,
)

_BOOL = {"remapped_rows_pending", "remapped_rows_failure"}
_INT = {
    "clock_event_reasons", "memory_used_bytes", "memory_total_bytes", "ecc_corrected_volatile",
    "ecc_uncorrected_volatile", "ecc_corrected_aggregate", "ecc_uncorrected_aggregate",
    "remapped_rows_correctable", "remapped_rows_uncorrectable", "pcie_link_generation", "pcie_link_width",
}
_NUMERIC = (set(FAST_FIELDS) | set(SLOW_FIELDS)) - {"temperature_thresholds_celsius"}
_EVENT_KEYS = {"t", "gpu", "ramp", "xid", "lost", "fail", "processes", "temperature_thresholds_celsius"}
_TOP_KEYS = {"gpus", "defaults", "events", "unavailable", "xid_unsupported", "power_limit_settable", "driver"}
_GPU_KEYS = {"index", "uuid", "model", "pci_bus_id", "mig", "parent", "unsupported", "mig_mode"}
_MIG_FIELDS = {"memory_used_bytes", "memory_total_bytes"}

#: Built-in start values: an idle H200 (thresholds as the driver reports them on one).
BUILTIN_DEFAULTS: dict[str, Any] = {
    "utilization_gpu_ratio": 0.0,
    "utilization_memory_ratio": 0.0,
    "temperature_celsius": 35.0,
    "memory_temperature_celsius": 40.0,
    "power_watts": 90.0,
    "power_limit_watts": 700.0,
    "sm_clock_hertz": 345e6,
    "memory_clock_hertz": 3201e6,
    "clock_event_reasons": 0x1,
    "memory_used_bytes": 512 * 2**20,
    "memory_total_bytes": 143771 * 2**20,
    "ecc_corrected_volatile": 0,
    "ecc_uncorrected_volatile": 0,
    "ecc_corrected_aggregate": 0,
    "ecc_uncorrected_aggregate": 0,
    "remapped_rows_correctable": 0,
    "remapped_rows_uncorrectable": 0,
    "remapped_rows_pending": False,
    "remapped_rows_failure": False,
    "pcie_tx_bytes_per_second": 0.0,
    "pcie_rx_bytes_per_second": 0.0,
    "pcie_link_generation": 5,
    "pcie_link_width": 16,
    "sm_clock_max_hertz": 1980e6,
    "memory_clock_max_hertz": 3201e6,
    "power_limit_default_watts": 700.0,
    "power_limit_min_watts": 200.0,
    "power_limit_max_watts": 700.0,
}
BUILTIN_THRESHOLDS = {"slowdown": 89.0, "shutdown": 95.0, "gpu_max": 87.0, "memory_max": 95.0}


class ScriptError(ValueError):
    """The script is malformed (message names the event and key)."""


@dataclass(frozen=True)
class _Key:
    t: float
    value: Any
    ramp: bool


def load_script(script: str | Path | Mapping[str, Any] | list[Any]) -> dict[str, Any]:
    """Read a script from a ``.json``/``.toml`` file or take a dict/list; validate; return a dict."""
    if isinstance(script, (str, Path)):
        path = Path(script)
        try:
            text = path.read_text()
        except OSError as e:
            raise ScriptError(f"cannot read GPU script {path}: {e}") from e
        try:
            if path.suffix == ".toml":
                data: Any = tomllib.loads(text)
            else:
                data = json.loads(text)
        except ValueError as e:
            raise ScriptError(f"GPU script {path}: {e}") from e
    else:
        data = script
    if isinstance(data, list):
        data = {"events": data}
    if not isinstance(data, Mapping):
        raise ScriptError("GPU script must be an object with 'gpus' and 'events' (or a list of events)")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ScriptError(f"GPU script: unknown keys {sorted(unknown)}; allowed: {sorted(_TOP_KEYS)}")
    return dict(data)


def _coerce(field: str, v: Any, where: str) -> Any:
    if field == "clock_event_reasons":
        try:
            return clock_event_mask(v)
        except (ValueError, TypeError) as e:
            raise ScriptError(f"{where}: {e}") from e
    if field in _BOOL:
        if not isinstance(v, bool):
            raise ScriptError(f"{where}: {field} must be true/false, got {v!r}")
        return v
    if v is None:
        return None  # explicit "not reported"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ScriptError(f"{where}: {field} must be a number, got {v!r}")
    return int(v) if field in _INT else float(v)


def _children_of(pid: int) -> list[int]:
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        rest = stat.rsplit(")", 1)[-1].split()
        if len(rest) > 1 and rest[1] == str(pid):
            out.append(int(name))
    return sorted(out)


def script_gpus(gpus_spec: Any) -> tuple[list[GpuInfo], dict[str, set[str]]]:
    """The script's `gpus` as NVML would list them, and each one's unsupported fields."""
    gpus: list[GpuInfo] = []
    unsupported: dict[str, set[str]] = {}
    if isinstance(gpus_spec, bool) or not isinstance(gpus_spec, (int, list)):
        raise ScriptError("'gpus' must be a count or a list of GPU objects")
    if isinstance(gpus_spec, int):
        gpus_spec = [{"index": i} for i in range(gpus_spec)]
    for n, g in enumerate(gpus_spec):
        if not isinstance(g, Mapping):
            raise ScriptError(f"gpus[{n}] must be an object")
        bad = set(g) - _GPU_KEYS
        if bad:
            raise ScriptError(f"gpus[{n}]: unknown keys {sorted(bad)}; allowed: {sorted(_GPU_KEYS)}")
        idx = int(g.get("index", n))
        mig = bool(g.get("mig", False))
        parent = g.get("parent")
        if mig and parent is None:
            raise ScriptError(f"gpus[{n}]: a MIG device needs 'parent' (the physical GPU index)")
        pidx = parent if mig else idx
        info = GpuInfo(
            index=idx,
            uuid=str(g.get("uuid") or (f"MIG-{pidx:08x}-{idx:04x}-4000-8000-5c0000000000" if mig
                                         else f"GPU-{idx:08x}-0000-4000-8000-5c0000000000")),
            model=str(g.get("model") or ("NVIDIA H200 MIG 1g.18gb" if mig else "NVIDIA H200")),
            pci_bus_id=str(g.get("pci_bus_id") or f"00000000:{0x18 + 0x10 * int(pidx):02X}:00.0"),
            is_mig=mig,
            parent_index=int(parent) if mig else None,
            mig_mode=bool(g.get("mig_mode", False)) and not mig,
        )
        gpus.append(info)
        uns = set(g.get("unsupported", []))
        bad = uns - _NUMERIC
        if bad:
            raise ScriptError(f"gpus[{n}].unsupported: unknown fields {sorted(bad)}")
        unsupported[info.key] = uns
    parents = {g.parent_index for g in gpus if g.is_mig}  # NVML: MIG mode on where MIG devices are
    gpus = [replace(g, mig_mode=True) if not g.is_mig and g.index in parents else g for g in gpus]
    return gpus, unsupported


_MIG_PROFILE = re.compile(r"(\d+)g\.(\d+)gb")


def mig_memory(model: str, gpu_total: int) -> int:
    """A MIG instance's memory as NVML reports it on its handle, from its profile in the model name ("1g.18gb",
    "3g.71gb"): its memory slices (eighths of the GPU's memory, as NVIDIA's profiles on A100/H100/H200 cut it) of
    `gpu_total`; a name without a profile: one slice."""
    m = _MIG_PROFILE.search(model)
    # the nominal GB is rounded up from the slices' share ("7g.141gb" is all 8 of an H200's 150.8 GB)
    slices = 1 if m is None else max(1, min(8, math.ceil(8 * int(m.group(2)) * 10**9 / gpu_total - 0.1)))
    return gpu_total * slices // 8


class ScriptedSource:
    name = "scripted"

    def __init__(self, script: str | Path | Mapping[str, Any] | list[Any], *,
                 clock: Callable[[], float] = time.time, poll: float = 0.1):
        self._spec = load_script(script)
        self.script_path = str(script) if isinstance(script, (str, Path)) else None
        self._clock = clock
        self._poll = poll
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._t0: float | None = None
        self._gpus: list[GpuInfo] = []
        self._unsupported: dict[str, set[str]] = {}
        self._keys: dict[str, dict[str, list[_Key]]] = {}
        self._steps: dict[str, dict[str, list[tuple[float, Any]]]] = {}
        self._xids: list[tuple[float, str, int]] = []
        self._xid_pos = 0
        self._power_override: dict[str, float] = {}
        self._energy: dict[str, tuple[float, float]] = {}
        self._explicit_fields: set[tuple[str, str]] = set()
        self.power_limit_calls: list[tuple[str, float]] = []
        self._build()

    # ------------------------------------------------------------------ script -> timeline
    def _build(self) -> None:
        spec = self._spec
        self._gpus, self._unsupported = script_gpus(spec.get("gpus", 1))
        keys = [g.key for g in self._gpus]
        if len(set(keys)) != len(keys):
            raise ScriptError(f"duplicate GPUs in script: {keys}")
        defaults = dict(BUILTIN_DEFAULTS)
        user_defaults = spec.get("defaults", {})
        if not isinstance(user_defaults, Mapping):
            raise ScriptError("'defaults' must be an object")
        for f, v in user_defaults.items():
            if f not in _NUMERIC and f != "temperature_thresholds_celsius":
                raise ScriptError(f"defaults: unknown field {f!r}")
            defaults[f] = v
        parent_total = int(defaults["memory_total_bytes"])
        for g in self._gpus:
            self._keys[g.key] = {}
            self._steps[g.key] = {"lost": [(0.0, False)], "fail": [(0.0, {})], "processes": [(0.0, [])],
                                  "temperature_thresholds_celsius":
                                  [(0.0, dict(defaults.get("temperature_thresholds_celsius", BUILTIN_THRESHOLDS)))]}
            for f, v in defaults.items():
                if f == "temperature_thresholds_celsius":
                    continue
                self._keys[g.key][f] = [_Key(0.0, _coerce(f, v, "defaults"), False)]
            if g.is_mig:  # "defaults" are the GPUs'; an event may still script an instance's own
                self._keys[g.key]["memory_total_bytes"] = [_Key(0.0, mig_memory(g.model, parent_total), False)]

        events = spec.get("events", [])
        if not isinstance(events, list):
            raise ScriptError("'events' must be a list")
        timed = []
        for n, ev in enumerate(events):
            where = f"events[{n}]"
            if not isinstance(ev, Mapping):
                raise ScriptError(f"{where} must be an object")
            bad = set(ev) - _EVENT_KEYS - _NUMERIC
            if bad:
                raise ScriptError(f"{where}: unknown keys {sorted(bad)} (fields: {sorted(_NUMERIC)})")
            t = ev.get("t", 0)
            if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
                raise ScriptError(f"{where}: 't' must be a number >= 0")
            timed.append((float(t), n, ev))
        timed.sort(key=lambda x: (x[0], x[1]))
        for t, n, ev in timed:
            where = f"events[{n}] (t={t:g})"
            for key in self._targets(ev.get("gpu", "all"), where):
                self._apply(key, t, ev, where)
        self._xids.sort(key=lambda x: x[0])

    def _targets(self, sel: Any, where: str) -> list[str]:
        if sel in ("all", "*"):
            return [g.key for g in self._gpus]
        sels = sel if isinstance(sel, list) else [sel]
        out = []
        for s in sels:
            k = str(s)
            match = [g.key for g in self._gpus if g.key == k or g.uuid == k]
            if not match:
                raise ScriptError(f"{where}: no GPU {s!r} in script (have {[g.key for g in self._gpus]})")
            out.extend(match)
        return out

    def _apply(self, key: str, t: float, ev: Mapping[str, Any], where: str) -> None:
        ramp = bool(ev.get("ramp", False))
        for f, v in ev.items():
            if f in _NUMERIC:
                self._keys[key].setdefault(f, []).append(_Key(t, _coerce(f, v, where), ramp and f not in _BOOL))
                self._explicit_fields.add((key, f))
        if "lost" in ev:
            self._steps[key]["lost"].append((t, bool(ev["lost"])))
        if "fail" in ev:
            fail = ev["fail"]
            if isinstance(fail, list):
                fail = {f: "error" for f in fail}
            if not isinstance(fail, Mapping) or set(fail) - _NUMERIC - {"processes"}:
                raise ScriptError(f"{where}: 'fail' must map field names to error kinds")
            self._steps[key]["fail"].append((t, dict(fail)))
        if "processes" in ev:
            procs = []
            for p in ev["processes"]:
                if isinstance(p, Mapping):
                    pid, used = p.get("pid"), p.get("used_bytes")
                elif isinstance(p, (list, tuple)) and len(p) == 2:
                    pid, used = p
                else:
                    raise ScriptError(f"{where}: a process is {{'pid': ..., 'used_bytes': ...}}")
                if not (isinstance(pid, int) or pid in ("self", "children")):
                    raise ScriptError(f"{where}: pid must be a number, 'self' or 'children'")
                procs.append((pid, None if used is None else int(used)))
            self._steps[key]["processes"].append((t, procs))
        if "temperature_thresholds_celsius" in ev:
            th = ev["temperature_thresholds_celsius"]
            if not isinstance(th, Mapping) or set(th) - set(TEMPERATURE_THRESHOLDS):
                raise ScriptError(f"{where}: thresholds are {list(TEMPERATURE_THRESHOLDS)}")
            self._steps[key]["temperature_thresholds_celsius"].append((t, {k: float(v) for k, v in th.items()}))
        if "xid" in ev:
            codes = ev["xid"] if isinstance(ev["xid"], list) else [ev["xid"]]
            gpu = next(g for g in self._gpus if g.key == key)
            phys = str(gpu.parent_index) if gpu.is_mig else key
            for c in codes:
                if isinstance(c, bool) or not isinstance(c, int):
                    raise ScriptError(f"{where}: xid must be an integer code")
                self._xids.append((t, phys, c))

    # ------------------------------------------------------------------ evaluation
    def now(self) -> float:
        """Script time: seconds since open (0 before open)."""
        return 0.0 if self._t0 is None else self._clock() - self._t0

    def _value(self, key: str, field: str, T: float) -> Any:
        kfs = self._keys[key].get(field)
        if not kfs:
            return None
        i = bisect.bisect_right([k.t for k in kfs], T) - 1
        if i < 0:
            return None
        cur = kfs[i]
        if i + 1 < len(kfs) and kfs[i + 1].ramp and cur.value is not None and kfs[i + 1].value is not None:
            nxt = kfs[i + 1]
            span = nxt.t - cur.t
            frac = 0.0 if span <= 0 else (T - cur.t) / span
            v = cur.value + (nxt.value - cur.value) * frac
            return int(round(v)) if field in _INT else v
        return cur.value

    def _step(self, key: str, name: str, T: float) -> Any:
        steps = self._steps[key][name]
        i = bisect.bisect_right([s[0] for s in steps], T) - 1
        return steps[max(i, 0)][1]

    def _explicit(self, key: str, field: str) -> bool:
        return (key, field) in self._explicit_fields or field in self._spec.get("defaults", {})

    # ------------------------------------------------------------------ GpuSource
    def open(self) -> list[GpuInfo]:
        if self._spec.get("unavailable"):
            raise GpuUnavailableError(str(self._spec["unavailable"]))
        with self._lock:
            if self._t0 is None:
                self._t0 = self._clock()
            self._wake.clear()  # re-opened after close()
            return list(self._gpus)

    def devices(self) -> list[GpuInfo]:
        return list(self._gpus)

    def driver_info(self) -> DriverInfo:
        d = self._spec.get("driver", {})
        return DriverInfo(driver_version=d.get("driver_version", "scripted"),
                          nvml_version=d.get("nvml_version", "scripted"),
                          cuda_driver_version=d.get("cuda_driver_version"))

    def _check(self, gpu: GpuInfo, T: float) -> None:
        if self._t0 is None:
            raise GpuError("scripted source is not open")
        if gpu.key not in self._keys:
            raise GpuError(f"unknown GPU {gpu.key}")
        if self._step(gpu.key, "lost", T):
            raise GpuLostError(f"GPU {gpu.key}: GPU is lost (scripted at t<={T:.3f})")

    def _read(self, gpu: GpuInfo, fields: list[str], T: float) -> tuple[dict[str, Any], list[FieldError]]:
        fail = self._step(gpu.key, "fail", T)
        vals: dict[str, Any] = {}
        errors: list[FieldError] = []
        for f in fields:
            if gpu.is_mig and f not in _MIG_FIELDS:
                continue  # like NVML: no utilization/temperature/power/clocks on a MIG device
            if f in self._unsupported[gpu.key]:
                errors.append(FieldError(f, "not_supported", "Not Supported (scripted)"))
                continue
            if f in fail:
                errors.append(FieldError(f, str(fail[f]), "scripted failure"))
                continue
            vals[f] = self._value(gpu.key, f, T)
        return vals, errors

    def sample_fast(self, gpu: GpuInfo) -> GpuSample:
        with self._lock:
            T = self.now()
            self._check(gpu, T)
            fields = [f for f in FAST_FIELDS]
            vals, errors = self._read(gpu, fields, T)
            if "power_limit_watts" in vals and gpu.key in self._power_override:
                vals["power_limit_watts"] = self._power_override[gpu.key]
            if vals.get("power_watts") is not None and vals.get("power_limit_watts") is not None:
                vals["power_watts"] = min(vals["power_watts"], vals["power_limit_watts"])
            if (not gpu.is_mig and "thermal_margin_celsius" not in self._unsupported[gpu.key]
                    and not self._explicit(gpu.key, "thermal_margin_celsius")
                    and vals.get("temperature_celsius") is not None):
                gmax = self._step(gpu.key, "temperature_thresholds_celsius", T).get("gpu_max")
                if gmax is not None and "thermal_margin_celsius" not in self._step(gpu.key, "fail", T):
                    vals["thermal_margin_celsius"] = gmax - vals["temperature_celsius"]
            procs, migs = None, [g.key for g in self._gpus if g.parent_index == gpu.index and not gpu.is_mig]
            if migs and vals.get("memory_used_bytes") is not None and not self._explicit(gpu.key, "memory_used_bytes"):
                vals["memory_used_bytes"] = sum(self._value(k, "memory_used_bytes", T) or 0 for k in migs)  # NVML's
            if "processes" in self._step(gpu.key, "fail", T):  # aggregate of its instances on a MIG-mode GPU
                errors.append(FieldError("processes", "error", "scripted failure"))
            elif not migs:  # with MIG on, processes are reported per MIG device (as NVML does)
                procs = self._processes(gpu, T)
            return GpuSample(gpu=gpu.key, timestamp=self._t0 + T if self._t0 is not None else T,  # type: ignore[operator]
                             processes=procs, errors=tuple(errors), **vals)

    def _processes(self, gpu: GpuInfo, T: float) -> tuple[ProcessMemory, ...]:
        out: dict[int, int | None] = {}
        for pid, used in self._step(gpu.key, "processes", T):
            pids = [os.getpid()] if pid == "self" else _children_of(os.getpid()) if pid == "children" else [pid]
            for p in pids:
                out[p] = used
        return tuple(ProcessMemory(gpu.key, p, u) for p, u in sorted(out.items()))

    def sample_slow(self, gpu: GpuInfo) -> GpuSlowSample:
        with self._lock:
            T = self.now()
            self._check(gpu, T)
            if gpu.is_mig:
                return GpuSlowSample(gpu=gpu.key, timestamp=self._t0 + T)  # type: ignore[operator]
            fields = [f for f in SLOW_FIELDS if f != "temperature_thresholds_celsius"]
            vals, errors = self._read(gpu, fields, T)
            if "energy_joules" in vals and not self._explicit(gpu.key, "energy_joules"):
                vals["energy_joules"] = self._integrate_energy(gpu, T)
            thresholds = dict(self._step(gpu.key, "temperature_thresholds_celsius", T))
            return GpuSlowSample(gpu=gpu.key, timestamp=self._t0 + T,  # type: ignore[operator]
                                 temperature_thresholds_celsius=thresholds, errors=tuple(errors), **vals)

    def _integrate_energy(self, gpu: GpuInfo, T: float) -> float:
        last_t, acc = self._energy.get(gpu.key, (0.0, 0.0))
        if T > last_t:
            # trapezoids at <= 1 s steps over the scripted power curve
            steps = max(1, int(T - last_t))
            dt = (T - last_t) / steps
            for i in range(steps):
                a, b = last_t + i * dt, last_t + (i + 1) * dt
                pa = self._power_at(gpu, a)
                pb = self._power_at(gpu, b)
                acc += (pa + pb) / 2 * dt
            self._energy[gpu.key] = (T, acc)
        return acc

    def _power_at(self, gpu: GpuInfo, T: float) -> float:
        p = self._value(gpu.key, "power_watts", T) or 0.0
        lim = self._power_override.get(gpu.key, self._value(gpu.key, "power_limit_watts", T))
        return min(p, lim) if lim is not None else p

    def wait_xid(self, timeout: float) -> list[XidEvent]:
        if self._spec.get("xid_unsupported"):
            raise GpuNotSupportedError(str(self._spec["xid_unsupported"]))
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            with self._lock:
                if self._t0 is None:
                    raise GpuError("scripted source is not open")
                T = self.now()
                out = []
                while self._xid_pos < len(self._xids) and self._xids[self._xid_pos][0] <= T:
                    t, gpu, code = self._xids[self._xid_pos]
                    out.append(XidEvent(gpu=gpu, xid=code, timestamp=self._t0 + t))
                    self._xid_pos += 1
            if out:
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            if self._wake.wait(min(self._poll, left)):
                return []

    def get_power_limit(self, gpu: GpuInfo) -> float:
        with self._lock:
            T = self.now()
            self._check(gpu, T)
            if gpu.is_mig:
                raise GpuNotSupportedError(f"GPU {gpu.key} is a MIG device")
            if gpu.key in self._power_override:
                return self._power_override[gpu.key]
            return float(self._value(gpu.key, "power_limit_watts", T))

    def set_power_limit(self, gpu: GpuInfo, watts: float) -> None:
        with self._lock:
            T = self.now()
            self._check(gpu, T)
            if gpu.is_mig:
                raise GpuNotSupportedError(f"GPU {gpu.key} is a MIG device: set the power limit on its parent")
            if not self._spec.get("power_limit_settable", True):
                raise GpuPermissionError(f"GPU {gpu.key}: cannot set the power limit: Insufficient Permissions "
                                         "(setting power limits needs root)")
            lo = self._value(gpu.key, "power_limit_min_watts", T)
            hi = self._value(gpu.key, "power_limit_max_watts", T)
            if lo is not None and hi is not None and not lo <= watts <= hi:
                raise ValueError(f"GPU {gpu.key}: power limit {watts:g} W outside the device's range {lo:g}..{hi:g} W")
            self._power_override[gpu.key] = float(watts)
            self.power_limit_calls.append((gpu.key, float(watts)))

    def close(self) -> None:
        self._wake.set()


class ManualClock:
    """A clock for deterministic tests: ``clock()`` returns the time, ``clock.advance(dt)`` moves it."""

    def __init__(self, start: float = 1_700_000_000.0):
        self._t = float(start)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._t

    def advance(self, dt: float) -> float:
        with self._lock:
            self._t += dt
            return self._t

    def set(self, t: float) -> None:
        with self._lock:
            self._t = float(t)
