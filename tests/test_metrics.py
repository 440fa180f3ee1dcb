"""The exporter: exposition parsed back with prometheus_client's parser, promtool lint, serving."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from isaacd.gpu import GpuSampler, ManualClock, ScriptedSource
from isaacd.gpu.nvml import NvmlSource
from isaacd.metrics import METRICS, build_registry, gpu_status, parse_listen, serve
from isaacd.metrics.attribution import attribute_pids
from isaacd.metrics.catalog import BY_NAME, GPU_LABELS, series_names
from metrics_fakes import demo_gpu_script, fake_job, fake_status, fake_sweep, rows

ROOT = Path(__file__).resolve().parents[1]


def scripted_sampler(script, clock=None):
    clock = clock or ManualClock()
    s = GpuSampler(ScriptedSource(script, clock=clock), clock=clock)
    s.poll_fast()
    s.poll_slow()
    clock.advance(1)
    s.poll_xid(0)
    s.poll_fast()
    return s


def full_setup():
    script = demo_gpu_script(2, job_pid="self")
    script["events"].append({"t": 0, "gpu": 1, "fail": {"pcie_link_width": "error"}})
    sampler = scripted_sampler(script)
    sampler.mark_unhealthy(1, "hw thermal slowdown for 60 s")
    status = fake_status([fake_job("anymal", pids=[os.getpid()], gpus=[0, "GPU-00000001-0000-4000-8000-5c0000000000"]),
                          fake_job("idle", pids=[], state="backing-off", gpus=[]), queued_job("waiter"),
                          placed_job("placed")],
                         sweeps=[fake_sweep()])
    return sampler, status


def queued_job(name: str) -> dict:
    """A job waiting in the host's queue for 12 GiB on one GPU (issue 31: the queue's series)."""
    job = fake_job(name, pids=[], state="queued", gpus=[])
    job["queue"] = {"request": "12 GiB on 1 GPU", "memory_bytes": 12 * 2**30, "priority": 5,
                    "submitted_at": time.time() - 60, "position": 1, "reason": "needs 12 GiB on 1 GPU; 0 free",
                    "run_seconds": 1800.0, "estimate_error": 1.25}  # issue 42: its estimate, its last run's error
    return job


def placed_job(name: str) -> dict:
    """A job the queue placed on GPU 0 that ends in 10 minutes by its estimate (issue 42)."""
    job = fake_job(name, pids=[], state="running", gpus=[0])
    job["queue"] = {"request": "12 GiB on 1 GPU", "memory_bytes": 12 * 2**30, "priority": 5, "placement": [0],
                    "ends_at": time.time() + 600}
    return job


def samples(registry):
    text = generate_latest(registry).decode()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out, text


def one(smp, name, **labels):
    hits = [s for s in smp.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, f"{name}{labels}: {hits}"
    return hits[0].value


def test_every_catalog_metric_is_emitted_with_its_labels():
    sampler, status = full_setup()
    from pathlib import Path

    from isaacd.volumes import Volume

    vols = [Volume("state", "", Path("/")), Volume("log_root", "anymal", Path("/nonexistent/logs"))]
    smp, _ = samples(build_registry(lambda: status, sampler, process_metrics=False, volumes=lambda: vols))
    expected = {n for m in METRICS for n in series_names(m)}
    assert set(smp) == expected, (f"missing: {sorted(expected - set(smp))}; "
                                  f"not in catalog: {sorted(set(smp) - expected)}")
    for name, ss in smp.items():
        base = name
        for suf in ("_bucket", "_sum", "_count"):
            if name.endswith(suf) and name[: -len(suf)] in BY_NAME:
                base = name[: -len(suf)]
        want = set(BY_NAME[base].labels) | ({"le"} if name.endswith("_bucket") else set())
        for s in ss:
            assert set(s.labels) == want, (name, s.labels)


def test_job_and_gpu_values():
    sampler, status = full_setup()
    smp, text = samples(build_registry(lambda: status, sampler, process_metrics=False))
    assert one(smp, "isaacd_job_state", job="anymal", state="running") == 1
    assert one(smp, "isaacd_job_state", job="anymal", state="failed") == 0
    assert one(smp, "isaacd_job_state", job="idle", state="backing-off") == 1
    assert one(smp, "isaacd_job_iteration", job="anymal") == 120
    assert one(smp, "isaacd_job_scalar", job="anymal", tag="Loss/surrogate") == pytest.approx(-0.0123)
    assert one(smp, "isaacd_job_scalar", job="anymal", tag="Perf/collection time") == pytest.approx(0.41)
    assert one(smp, "isaacd_job_restarts_total", job="anymal", reason="exit_code") == 2
    assert one(smp, "isaacd_job_restarts_total", job="anymal", reason="oom") == 0
    assert one(smp, "isaacd_job_restarts_total", job="anymal", reason="cuda_oom") == 0  # from 0: increase() sees it
    assert one(smp, "isaacd_job_cuda_ooms_total", job="anymal", phase="startup") == 1
    assert one(smp, "isaacd_job_cuda_ooms_total", job="anymal", phase="training") == 0
    assert (one(smp, "isaacd_job_num_envs", job="anymal"), one(smp, "isaacd_job_num_envs_configured", job="anymal")) \
        == (2048, 4096)  # stepped down after a CUDA out-of-memory at start-up
    assert one(smp, "isaacd_watchdog_trips_total", job="anymal", watchdog="no_progress", action="restart") == 1
    assert one(smp, "isaacd_watchdog_state", job="anymal", watchdog="duty_cycle", state="warmup") == 1
    assert one(smp, "isaacd_job_gpu_assigned", job="anymal", gpu="1") == 1, "uuid resolved to the GPU key"
    assert one(smp, "isaacd_config_reloads_total") == 2
    assert one(smp, "isaacd_gpu_collector_up") == 1
    assert one(smp, "isaacd_gpu_temperature_celsius", gpu="0") == 58
    assert one(smp, "isaacd_gpu_thermal_margin_celsius", gpu="0") == 87 - 58
    assert one(smp, "isaacd_gpu_clock_event_reason", gpu="1", reason="hw_thermal_slowdown") == 1
    assert one(smp, "isaacd_gpu_clock_event_reason", gpu="0", reason="hw_thermal_slowdown") == 0
    assert one(smp, "isaacd_gpu_clock_event_reason", gpu="0", reason="sw_power_cap") == 1
    assert one(smp, "isaacd_gpu_xid_errors_total", gpu="1", xid="48", **{"class": "reset"}) == 2
    assert one(smp, "isaacd_gpu_xid_errors_total", gpu="0", xid="13", **{"class": "application"}) == 1
    assert one(smp, "isaacd_gpu_process_memory_used_bytes", gpu="0", pid=str(os.getpid()), job="anymal") == 60 * 2**30
    assert one(smp, "isaacd_gpu_job_info", gpu="1", job="anymal") == 1
    assert one(smp, "isaacd_gpu_unhealthy", gpu="1", reason="hw thermal slowdown for 60 s") == 1
    assert one(smp, "isaacd_gpu_collector_errors_total", gpu="1", field="pcie_link_width", error="error") >= 1
    assert one(smp, "isaacd_gpu_temperature_threshold_celsius", gpu="0", threshold="slowdown") == 89
    assert one(smp, "isaacd_gpu_power_watts", gpu="0") == 612
    assert one(smp, "isaacd_gpu_memory_total_bytes", gpu="0") == 143771 * 2**20
    assert one(smp, "isaacd_gpu_info", gpu="0", mig="false") == 1
    assert one(smp, "isaacd_gpu_sample_duration_seconds_count", loop="fast") == 2
    # every GPU series carries the identity labels
    for s in smp["isaacd_gpu_power_watts"]:
        assert s.labels["uuid"].startswith("GPU-") and s.labels["model"] == "NVIDIA H200" and s.labels["pci_bus_id"]


def test_not_reported_fields_have_no_series_not_zeros():
    sampler = scripted_sampler({"gpus": [{"index": 0, "unsupported": ["memory_temperature_celsius"]},
                                         {"index": 0, "mig": True, "parent": 0}]})
    smp, _ = samples(build_registry(None, sampler, process_metrics=False))
    assert "isaacd_gpu_memory_temperature_celsius" not in smp
    util = {s.labels["gpu"] for s in smp["isaacd_gpu_utilization_ratio"]}
    assert util == {"0"}, "MIG devices have no utilization series"
    assert one(smp, "isaacd_gpu_info", gpu="0:0", mig="true", parent_gpu="0") == 1
    assert {s.labels["gpu"] for s in smp["isaacd_gpu_memory_used_bytes"]} == {"0", "0:0"}


def test_gpu_lost_drops_series_but_keeps_identity():
    clock = ManualClock()
    sampler = scripted_sampler({"gpus": 2, "events": [{"t": 5, "gpu": 1, "lost": True}]}, clock)
    clock.advance(10)
    sampler.poll_fast()
    smp, _ = samples(build_registry(None, sampler, process_metrics=False))
    assert one(smp, "isaacd_gpu_up", gpu="1") == 0 and one(smp, "isaacd_gpu_up", gpu="0") == 1
    assert {s.labels["gpu"] for s in smp["isaacd_gpu_temperature_celsius"]} == {"0"}
    assert one(smp, "isaacd_gpu_collector_errors_total", gpu="1", field="device", error="gpu_lost") == 1


def test_no_nvml_still_serves_job_metrics():
    sampler = GpuSampler(NvmlSource())
    sampler.poll_fast()
    if sampler.snapshot().up:
        pytest.skip("this machine has a working NVML")
    smp, _ = samples(build_registry(lambda: fake_status(), sampler, process_metrics=False))
    assert one(smp, "isaacd_gpu_collector_up") == 0
    assert one(smp, "isaacd_gpu_xid_watch_up") == 0
    assert "isaacd_gpu_info" not in smp and "isaacd_gpu_temperature_celsius" not in smp
    assert one(smp, "isaacd_job_state", job="anymal", state="running") == 1
    assert one(smp, "isaacd_status_up") == 1


def test_without_any_gpu_sampler():
    smp, _ = samples(build_registry(lambda: fake_status(), None, process_metrics=False))
    assert one(smp, "isaacd_gpu_collector_up") == 0
    assert one(smp, "isaacd_job_info", job="anymal", runtime="process") == 1


def test_status_provider_failure_is_counted_and_logged_once():
    calls = {"n": 0}

    def broken():
        calls["n"] += 1
        raise RuntimeError("supervisor lock timeout")

    sampler = scripted_sampler({"gpus": 1})
    reg = build_registry(broken, sampler, process_metrics=False)
    with capture_logs() as logs:
        samples(reg)
        smp, _ = samples(reg)
    assert one(smp, "isaacd_status_up") == 0
    assert one(smp, "isaacd_scrape_errors_total", source="status") == 2
    assert one(smp, "isaacd_scrape_errors_total", source="gpu") == 0
    assert one(smp, "isaacd_gpu_temperature_celsius", gpu="0") == 35
    assert "isaacd_job_info" not in smp
    assert len([e for e in logs if e["event"] == "metrics scrape error"]) == 1


def test_one_malformed_job_does_not_cost_the_others():
    st = fake_status([{"state": "running"}, fake_job("ok"), {"name": "weird", "state": "exploded", "iteration": "x",
                                                               "scalars": {"a": "b", "n": float("nan")}}])
    smp, _ = samples(build_registry(lambda: st, None, process_metrics=False))
    assert one(smp, "isaacd_job_iteration", job="ok") == 120
    assert one(smp, "isaacd_job_state", job="weird", state="exploded") == 1
    assert math.isnan(one(smp, "isaacd_job_scalar", job="weird", tag="n"))
    assert not [s for s in smp["isaacd_job_scalar"] if s.labels["tag"] == "a"]
    assert not [s for s in smp.get("isaacd_job_iteration", []) if s.labels["job"] == "weird"]
    assert one(smp, "isaacd_scrape_errors_total", source="status") == 1


def test_restarts_without_breakdown_and_watchdog_action_precreated():
    job = fake_job("a")
    job["restarts_by_reason"] = {}
    job["restarts"] = 4
    smp, _ = samples(build_registry(lambda: fake_status([job]), None, process_metrics=False))
    assert one(smp, "isaacd_job_restarts_total", job="a", reason="other") == 4
    assert one(smp, "isaacd_job_restarts_total", job="a", reason="watchdog") == 0


def test_attribution_by_pid_and_cgroup(tmp_path):
    def proc(pid, path):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(f"0::{path}\n")

    proc(101, "/machine.slice/libpod-abc123.scope/container")
    proc(102, "/system.slice/isaacd-foobar.service")
    proc(103, "/system.slice/isaacd-foo.service/payload")
    proc(104, "/user.slice/user-1000.slice")
    jobs = [
        {"name": "podjob", "pids": [], "cgroup": "libpod-abc123.scope"},
        {"name": "foo", "pids": [], "cgroup": "/system.slice/isaacd-foo.service"},
        {"name": "proc", "pids": [200, 201]},
    ]
    got = attribute_pids([101, 102, 103, 104, 200, 201, 999], rows(jobs), str(tmp_path))
    assert got == {101: "podjob", 103: "foo", 200: "proc", 201: "proc"}


def test_gpu_status_for_the_cli():
    sampler, status = full_setup()
    st = gpu_status(sampler.snapshot(), rows(status["jobs"])).to_json()  # as `isaacd status --json` has it
    json.dumps(st)
    assert st["up"] and st["source"] == "scripted"
    d0, d1 = st["devices"]
    assert d0["index"] == "0" and d0["jobs"] == ["anymal"] and d0["health"] == "ok"
    assert d0["utilization_ratio"] == pytest.approx(0.96) and d0["xids"]["13"]["class"] == "application"
    assert d1["health"].startswith("unhealthy") and "hw_thermal_slowdown" in d1["clock_event_reasons"]


# ------------------------------------------------------------------ promtool lint

@pytest.mark.prometheus
def test_promtool_check_metrics_on_a_real_scrape():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian: apt-get install prometheus)")
    sampler, status = full_setup()
    _, text = samples(build_registry(lambda: status, sampler, process_metrics=True))
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr


# ------------------------------------------------------------------ HTTP

def get(url, timeout=5.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def test_serve_path_404_healthz_and_close():
    reg = build_registry(lambda: fake_status(), None)
    srv = serve("127.0.0.1:0", "/isaacd/metrics", reg)
    try:
        assert srv.port > 0 and srv.url == f"http://127.0.0.1:{srv.port}/isaacd/metrics"
        code, ctype, body = get(srv.url)
        assert code == 200 and ctype.startswith("text/plain") and "isaacd_job_state" in body
        assert "process_cpu_seconds_total" in body
        assert get(f"http://127.0.0.1:{srv.port}/metrics")[0] == 404
        assert get(f"http://127.0.0.1:{srv.port}/healthz")[:1] == (200,)
        assert "/isaacd/metrics" in get(f"http://127.0.0.1:{srv.port}/")[2]
    finally:
        srv.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=1).close()


def test_serve_ipv6_loopback():
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        srv = serve("[::1]:0", "/metrics", build_registry(lambda: fake_status(), None, process_metrics=False))
    except OSError as e:
        pytest.skip(f"no IPv6 loopback here: {e}")
    try:
        assert srv.url.startswith("http://[::1]:")
        assert get(srv.url)[0] == 200
    finally:
        srv.close()


def test_address_taken_is_an_oserror():
    reg = build_registry(None, None, process_metrics=False)
    srv = serve("127.0.0.1:0", "/metrics", reg)
    try:
        with pytest.raises(OSError):
            serve(f"127.0.0.1:{srv.port}", "/metrics", reg)
    finally:
        srv.close()


@pytest.mark.parametrize("listen, host, port", [
    ("127.0.0.1:9835", "127.0.0.1", 9835), ("[::1]:9835", "::1", 9835), ("localhost:1", "localhost", 1),
    ("0.0.0.0:9835", "0.0.0.0", 9835), ("[::]:0", "::", 0),
])
def test_parse_listen(listen, host, port):
    assert parse_listen(listen) == (host, port)


@pytest.mark.parametrize("listen", [":9835", "9835", "::1:9835", "[::1]", "host:port", "h:70000", "[::1]9835"])
def test_parse_listen_rejects(listen):
    with pytest.raises(ValueError):
        parse_listen(listen)


class _Stuck(ScriptedSource):
    """After ``block`` is set, the next sample_fast call hangs like a wedged driver call."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.block, self.gate, self.entered = threading.Event(), threading.Event(), threading.Event()
        self.returned = threading.Event()  # the hung call came back (the gate opened, or after its 60 s)

    def sample_fast(self, gpu):
        if self.block.is_set() and gpu.key == "3":
            self.entered.set()
            self.gate.wait(60)
            self.returned.set()
        return super().sample_fast(gpu)


def test_scrape_does_not_wait_for_a_stuck_nvml_call():
    src = _Stuck({"gpus": 8})
    sampler = GpuSampler(src, sample_interval=0.01, xid_timeout=0.05).start()
    srv = serve("127.0.0.1:0", "/metrics", build_registry(lambda: fake_status(), sampler))
    try:
        assert sampler.wait_ready(5)
        src.block.set()
        assert src.entered.wait(5)
        time.sleep(0.1)
        code, _, body = get(srv.url, timeout=30)
        # answered while the NVML call still hangs: a scrape that waited for it would answer after it came back
        assert code == 200 and not src.returned.is_set()
        assert 'isaacd_gpu_temperature_celsius{gpu="7"' in body
    finally:
        src.gate.set()
        srv.close()
        sampler.stop()


def test_docs_document_every_metric():
    doc = (ROOT / "docs" / "metrics.md").read_text()
    missing = [m.name for m in METRICS if f"`{m.name}`" not in doc]
    assert not missing, f"docs/metrics.md lacks: {missing}"
    # each metric's own table row lists exactly its labels (*gpu labels* = gpu, uuid, model, pci_bus_id)
    rows: dict[str, list[str]] = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| `isaacd_") else []
        if len(cells) >= 3:
            labels: list[str] = []
            for part in (p.strip() for p in cells[2].split(",")):
                if part == "*gpu labels*":
                    labels += GPU_LABELS
                elif part.startswith("`") and part.endswith("`"):
                    labels.append(part.strip("`"))
                elif part not in ("—", "-", ""):
                    raise AssertionError(f"docs/metrics.md: {cells[0]}: label cell part {part!r} is not `label`")
            rows[cells[0].strip("`")] = labels
    wrong = {m.name: (rows.get(m.name), list(m.labels)) for m in METRICS
             if m.name not in rows or sorted(rows[m.name]) != sorted(m.labels)}
    assert not wrong, f"docs/metrics.md rows whose labels differ from the catalog (doc, catalog): {wrong}"


def test_watchdog_trip_counters_exist_before_the_first_trip():
    job = fake_job("a")
    job["watchdogs"] = {"no_progress": {"state": "ok", "since": None, "action": "restart"},
                        "thermal": {"state": "ok", "since": None, "action": "power-cap"}}
    job["watchdog_trips"] = [{"watchdog": "no_progress", "action": "restart", "count": 2}]
    smp, _ = samples(build_registry(lambda: fake_status([job]), None, process_metrics=False))
    assert one(smp, "isaacd_watchdog_trips_total", job="a", watchdog="no_progress", action="restart") == 2
    assert one(smp, "isaacd_watchdog_trips_total", job="a", watchdog="thermal", action="power-cap") == 0
