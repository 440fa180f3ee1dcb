#!/usr/bin/env python3
"""Telemetry benchmark: prints figures.

    python bench/metrics.py                 # scrape latency (8 GPUs x all series), sampler CPU cost (scripted)
    python bench/metrics.py --nvml          # + NVML smoke, per-sample NVML cost on GPU 0 vs an
                                            #   `nvidia-smi --query-gpu=...` loop of the same fields, ratio
    python bench/metrics.py --json out.json # also write the figures as JSON

Scrape latency is measured twice: rendering the registry in-process (generate_latest) and a full
HTTP GET against `isaacd.metrics.serve` on loopback. Sampler CPU cost is the process's CPU time
(user+sys, getrusage) per wall second while only the sampler threads run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable


from prometheus_client import generate_latest  # noqa: E402

from isaacd.gpu import GpuSampler, ScriptedSource  # noqa: E402
from isaacd.metrics import build_registry, serve  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the test fakes are not shipped
from metrics_fakes import fake_job, fake_status  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(q / 100 * (len(xs) - 1)))))
    return xs[k]


def timeit(fn: Callable[[], Any], n: int, warmup: int = 5) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def summary(xs: list[float], unit: float = 1e3) -> dict[str, float]:
    return {"median": statistics.median(xs) * unit, "p99": pct(xs, 99) * unit, "min": min(xs) * unit, "n": len(xs)}


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def synthetic_script(gpus: int = 8) -> dict[str, Any]:
    events: list[dict[str, Any]] = [{
        "t": 0, "gpu": "all", "utilization_gpu_ratio": 0.97, "utilization_memory_ratio": 0.4, "power_watts": 640,
        "temperature_celsius": 71, "memory_temperature_celsius": 79, "sm_clock_hertz": 1.98e9,
        "memory_clock_hertz": 3.2e9, "clock_event_reasons": ["sw_power_cap"], "memory_used_bytes": 90 * 2**30,
        "ecc_corrected_volatile": 2, "ecc_corrected_aggregate": 40, "remapped_rows_correctable": 1,
        "pcie_tx_bytes_per_second": 3e9, "pcie_rx_bytes_per_second": 1e9,
    }]
    for g in range(gpus):
        events.append({"t": 0, "gpu": g, "processes": [{"pid": 10_000 + g, "used_bytes": 80 * 2**30},
                                                       {"pid": 20_000 + g, "used_bytes": 2 * 2**30}]})
        events.append({"t": 0, "gpu": g, "xid": [13, 31, 48]})
    return {"gpus": gpus, "events": events}


def synthetic_status(gpus: int = 8) -> dict[str, Any]:
    jobs = []
    for j in range(4):
        job = fake_job(f"job{j}", pids=[10_000 + g for g in range(j * 2, j * 2 + 2)], gpus=[j * 2, j * 2 + 1])
        job["scalars"].update({f"Episode_Reward/term_{k}": 0.1 * k for k in range(20)})
        jobs.append(job)
    return fake_status(jobs)


def bench_scrape(n: int) -> dict[str, Any]:
    src = ScriptedSource(synthetic_script(8))
    sampler = GpuSampler(src)
    sampler.poll_fast()
    sampler.poll_slow()
    sampler.poll_xid(0.05)
    for g in range(8):
        if g % 4 == 3:
            sampler.mark_unhealthy(g, "bench")
    status = synthetic_status()
    reg = build_registry(lambda: status, sampler)
    body = generate_latest(reg)
    series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    render = summary(timeit(lambda: generate_latest(reg), n))
    srv = serve("127.0.0.1:0", "/metrics", reg)
    try:
        def get() -> None:
            with urllib.request.urlopen(srv.url, timeout=5) as r:
                r.read()

        http = summary(timeit(get, n))
    finally:
        srv.close()
    return {"gpus": 8, "jobs": 4, "series": series, "bytes": len(body), "render_ms": render, "http_ms": http}


def bench_sampler_cpu(make: Callable[[], GpuSampler], seconds: float) -> dict[str, Any]:
    sampler = make()
    sampler.start()
    sampler.wait_ready(10)
    time.sleep(min(1.0, seconds / 5))  # let the first slow pass happen
    c0, t0 = cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    c1, t1 = cpu_seconds(), time.monotonic()
    snap = sampler.snapshot()
    sampler.stop()
    fast = snap.durations["fast"]
    slow = snap.durations["slow"]
    return {
        "cpu_ms_per_s": (c1 - c0) / (t1 - t0) * 1e3,
        "fast_passes": fast.count, "fast_pass_mean_ms": fast.sum / max(fast.count, 1) * 1e3,
        "slow_passes": slow.count, "slow_pass_mean_ms": slow.sum / max(slow.count, 1) * 1e3,
        "gpus": len(snap.gpus),
    }


# ------------------------------------------------------------------ NVML (real GPU)

SMI_FIELDS = [  # the fields of one fast sample, as nvidia-smi names them
    "utilization.gpu", "utilization.memory", "temperature.gpu", "temperature.memory", "temperature.gpu.tlimit",
    "power.draw", "enforced.power.limit", "clocks.sm", "clocks.mem", "clocks_event_reasons.active",
    "memory.used", "memory.total", "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.aggregate.total", "ecc.errors.uncorrected.aggregate.total",
    "remapped_rows.correctable", "remapped_rows.uncorrectable", "remapped_rows.pending", "remapped_rows.failure",
]


def smi_valid_fields(smi: str) -> list[str]:
    ok = []
    for f in SMI_FIELDS:
        r = subprocess.run([smi, "--id=0", f"--query-gpu={f}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode == 0 and "not a valid field" not in (r.stdout + r.stderr):
            ok.append(f)
        else:
            print(f"  nvidia-smi: dropping field {f}: {(r.stdout + r.stderr).strip()[:100]}")
    return ok


def nvml_smoke() -> dict[str, Any]:
    from isaacd.gpu.nvml import NvmlSource

    src = NvmlSource()
    t = time.perf_counter()
    gpus = src.open()
    open_ms = (time.perf_counter() - t) * 1e3
    print(f"NVML open: {open_ms:.1f} ms; driver {src.driver_info()}")
    out: dict[str, Any] = {"open_ms": open_ms, "driver": asdict(src.driver_info()), "devices": []}
    for g in gpus:
        print(f"  device {g}")
        fast = src.sample_fast(g)
        slow = src.sample_slow(g)
        print(f"  fast sample: {fast}")
        print(f"  active clock event reasons: {sorted(fast.clock_event_reason_names)}")
        print(f"  slow sample: {slow}")
        try:
            limit = src.get_power_limit(g)
        except Exception as e:  # noqa: BLE001
            limit = f"{type(e).__name__}: {e}"
        print(f"  power limit (get only; isaacd never changes settings in this bench): {limit}")
        out["devices"].append({"info": asdict(g), "fast": asdict(fast), "slow": asdict(slow), "power_limit": limit})
    t = time.perf_counter()
    try:
        evs = src.wait_xid(1.0)
        out["xid_wait"] = {"seconds": time.perf_counter() - t, "events": [asdict(e) for e in evs]}
    except Exception as e:  # noqa: BLE001
        out["xid_wait"] = {"seconds": time.perf_counter() - t, "error": f"{type(e).__name__}: {e}"}
    print(f"  XID wait (timeout 1 s): {out['xid_wait']}")
    src.close()
    return out


def bench_nvml_calls(n: int) -> dict[str, dict[str, float]]:
    """Median/p99 of each NVML call one fast sample makes (GPU 0), to see where the time goes."""
    import pynvml as nv

    from isaacd.gpu.nvml_fields import _FIELD_IDS

    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    calls: dict[str, Callable[[], Any]] = {
        "GetMemoryInfo": lambda: nv.nvmlDeviceGetMemoryInfo(h),
        "GetUtilizationRates": lambda: nv.nvmlDeviceGetUtilizationRates(h),
        "GetTemperatureV": lambda: nv.nvmlDeviceGetTemperatureV(h, nv.NVML_TEMPERATURE_GPU),
        "GetMarginTemperature": lambda: nv.nvmlDeviceGetMarginTemperature(h),
        "GetPowerUsage": lambda: nv.nvmlDeviceGetPowerUsage(h),
        "GetEnforcedPowerLimit": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h),
        "GetClockInfo(SM)": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
        "GetClockInfo(MEM)": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
        "GetCurrentClocksEventReasons": lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
        f"GetFieldValues({len(_FIELD_IDS)} fields)": lambda: nv.nvmlDeviceGetFieldValues(h, list(_FIELD_IDS.values())),
        "GetComputeRunningProcesses": lambda: nv.nvmlDeviceGetComputeRunningProcesses(h),
        "GetGraphicsRunningProcesses": lambda: nv.nvmlDeviceGetGraphicsRunningProcesses(h),
        "GetTotalEnergyConsumption (slow)": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h),
        "GetPcieThroughput TX (slow)": lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES),
    }
    out = {}
    for name, fn in calls.items():
        k = n if "slow" not in name else max(5, n // 40)
        out[name] = {kk: v for kk, v in summary(timeit(fn, k, warmup=3), 1e6).items()}  # microseconds
        print(f"  {name:<36} median {out[name]['median']:9.1f} µs  p99 {out[name]['p99']:9.1f} µs")
    nv.nvmlShutdown()
    return out


def bench_nvml(n: int, smi_n: int) -> dict[str, Any]:
    from isaacd.gpu.nvml import NvmlSource

    src = NvmlSource(register_xid=False)
    gpus = src.open()
    g = gpus[0]
    fast = timeit(lambda: src.sample_fast(g), n, warmup=20)
    slow = timeit(lambda: src.sample_slow(g), max(5, n // 40), warmup=2)
    procs = src.sample_fast(g).processes
    src.close()
    res: dict[str, Any] = {"device": asdict(g), "sample_fast_ms": summary(fast), "sample_slow_ms": summary(slow),
                           "processes_seen": len(procs or ())}
    smi = shutil.which("nvidia-smi")
    if smi is None:
        res["nvidia_smi"] = "not found"
        return res
    fields = smi_valid_fields(smi)
    q = [smi, "--id=0", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    apps = [smi, "--id=0", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
    print(f"  nvidia-smi query: {' '.join(q[1:])}")
    print(f"  one line: {subprocess.run(q, capture_output=True, text=True).stdout.strip()}")
    smi_gpu = timeit(lambda: subprocess.run(q, capture_output=True, check=True), smi_n, warmup=2)
    smi_both = timeit(lambda: (subprocess.run(q, capture_output=True, check=True),
                               subprocess.run(apps, capture_output=True, check=True)), smi_n, warmup=1)
    res.update({
        "nvidia_smi_fields": fields,
        "nvidia_smi_query_gpu_ms": summary(smi_gpu),
        "nvidia_smi_query_gpu_plus_apps_ms": summary(smi_both),
        "ratio_smi_query_gpu_over_nvml_fast": statistics.median(smi_gpu) / statistics.median(fast),
        "ratio_smi_with_apps_over_nvml_fast": statistics.median(smi_both) / statistics.median(fast),
    })
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nvml", action="store_true", help="also measure the real NVML source (needs a GPU)")
    ap.add_argument("-n", type=int, default=300, help="scrape / sample repetitions")
    ap.add_argument("--smi-n", type=int, default=30, help="nvidia-smi repetitions")
    ap.add_argument("--seconds", type=float, default=10.0, help="sampler CPU measurement window")
    ap.add_argument("--json", type=Path, help="write figures here")
    ap.add_argument("--calls-only", action="store_true", help="only the per-NVML-call breakdown (needs a GPU)")
    ap.add_argument("--job-pid", type=int, action="append", default=[],
                    help="with --nvml: PIDs of a GPU process to attribute to a fake job in the final exposition")
    a = ap.parse_args(argv)
    res: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine(),
                           "cpus": os.cpu_count()}
    if a.calls_only:
        print("== NVML cost per call, GPU 0")
        res["nvml_calls_us"] = bench_nvml_calls(a.n)
        if a.json:
            a.json.write_text(json.dumps(res, indent=2, default=str))
        return 0

    print("== scrape latency: 8 GPUs x all series, 4 jobs")
    res["scrape"] = s = bench_scrape(a.n)
    print(f"  {s['series']} series, {s['bytes']} bytes")
    print(f"  render  median {s['render_ms']['median']:.2f} ms  p99 {s['render_ms']['p99']:.2f} ms")
    print(f"  HTTP    median {s['http_ms']['median']:.2f} ms  p99 {s['http_ms']['p99']:.2f} ms")

    print(f"== sampler CPU cost, ScriptedSource 8 GPUs, sample_interval 1 s, slow 10 s ({a.seconds:g} s window)")
    res["sampler_scripted"] = c = bench_sampler_cpu(
        lambda: GpuSampler(ScriptedSource(synthetic_script(8)), sample_interval=1.0, slow_interval=10.0), a.seconds)
    print(f"  {c['cpu_ms_per_s']:.2f} ms CPU per second ({c['cpu_ms_per_s'] / 10:.3f} % of a core); "
          f"fast pass {c['fast_pass_mean_ms']:.3f} ms x {c['fast_passes']}")

    if a.nvml:
        print("== NVML smoke")
        res["nvml_smoke"] = nvml_smoke()
        print("== NVML cost per call, GPU 0")
        res["nvml_calls_us"] = bench_nvml_calls(a.n)
        print("== NVML per-sample cost on GPU 0 vs nvidia-smi")
        res["nvml"] = r = bench_nvml(a.n, a.smi_n)
        f, sl = r["sample_fast_ms"], r["sample_slow_ms"]
        print(f"  NvmlSource.sample_fast  median {f['median']:.3f} ms  p99 {f['p99']:.3f} ms  (all fast fields "
              f"+ processes, n={f['n']})")
        print(f"  NvmlSource.sample_slow  median {sl['median']:.2f} ms  p99 {sl['p99']:.2f} ms  (energy, PCIe tx/rx, "
              "thresholds...)")
        if "nvidia_smi_query_gpu_ms" in r:
            g1, g2 = r["nvidia_smi_query_gpu_ms"], r["nvidia_smi_query_gpu_plus_apps_ms"]
            print(f"  nvidia-smi --query-gpu ({len(r['nvidia_smi_fields'])} fields)  median {g1['median']:.1f} ms  "
                  f"p99 {g1['p99']:.1f} ms")
            print(f"  nvidia-smi --query-gpu + --query-compute-apps  median {g2['median']:.1f} ms")
            print(f"  ratio nvidia-smi / NVML sample: {r['ratio_smi_query_gpu_over_nvml_fast']:.0f}x "
                  f"(with process list: {r['ratio_smi_with_apps_over_nvml_fast']:.0f}x)")
        print(f"== sampler CPU cost, NVML, 1 s / 10 s ({a.seconds:g} s window)")
        from isaacd.gpu.nvml import NvmlSource

        res["sampler_nvml"] = c = bench_sampler_cpu(
            lambda: GpuSampler(NvmlSource(), sample_interval=1.0, slow_interval=10.0), a.seconds)
        print(f"  {c['cpu_ms_per_s']:.2f} ms CPU per second; fast pass {c['fast_pass_mean_ms']:.3f} ms, "
              f"slow pass {c['slow_pass_mean_ms']:.1f} ms ({c['gpus']} GPU)")
        sampler = GpuSampler(NvmlSource(), sample_interval=0.5, slow_interval=1.0).start()
        sampler.wait_ready(10)
        time.sleep(1.5)
        job = fake_job("bench", pids=a.job_pid or [os.getpid()])
        text = generate_latest(build_registry(lambda: fake_status([job]), sampler)).decode()
        sampler.stop()
        res["nvml_exposition"] = text
        print("== exposition from the real GPU (isaacd_gpu_* lines)")
        print("\n".join(line for line in text.splitlines() if line.startswith("isaacd_gpu_")))

    if a.json:
        a.json.write_text(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
