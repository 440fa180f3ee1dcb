"""GpuSampler + ScriptedSource: heat, throttling, XIDs, a GPU falling off the bus, no NVML."""

from __future__ import annotations

import json
import threading
import time

import pytest
from structlog.testing import capture_logs

from isaacd.gpu import (
    GpuLostError,
    GpuMap,
    GpuPermissionError,
    GpuSampler,
    GpuSample,
    ManualClock,
    NoSource,
    ScriptedSource,
    ScriptError,
    build_sampler,
    make_source,
    xid_class,
)
from isaacd.gpu.nvml import NvmlSource


def scripted(script, clock=None, **kw):
    clock = clock or ManualClock()
    src = ScriptedSource(script, clock=clock)
    return GpuSampler(src, clock=clock, **kw), src, clock


HEAT = {
    "gpus": 1,
    "events": [
        {"t": 0, "temperature_celsius": 40, "utilization_gpu_ratio": 0.97, "power_watts": 600},
        {"t": 60, "temperature_celsius": 92, "ramp": True},
        {"t": 50, "clock_event_reasons": ["sw_thermal_slowdown", "hw_thermal_slowdown"]},
    ],
}


def test_heat_curve_ramps_and_throttles():
    sampler, _, clock = scripted(HEAT)
    temps, margins, reasons = [], [], []
    for _ in range(8):
        sampler.poll_fast()
        s = sampler.snapshot().samples[0]
        temps.append(s.temperature_celsius)
        margins.append(s.thermal_margin_celsius)
        reasons.append(s.clock_event_reason_names)
        clock.advance(10)
    assert temps == pytest.approx([40, 40 + 52 / 6, 40 + 2 * 52 / 6, 66, 40 + 4 * 52 / 6, 40 + 5 * 52 / 6, 92, 92])
    # not scripted: follows the driver's gpu_max threshold (87 C on an H200) minus temperature
    assert margins == pytest.approx([87 - t for t in temps])
    assert reasons[4] == frozenset({"gpu_idle"})
    assert reasons[5] == frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown"})
    assert sampler.snapshot().samples[0].utilization_gpu_ratio == pytest.approx(0.97)


def test_gpu_lost_mid_run_is_counted_and_sampler_survives():
    sampler, _, clock = scripted({"gpus": 2, "events": [
        {"t": 5, "gpu": 1, "lost": True}, {"t": 20, "gpu": 1, "lost": False}]})
    sampler.poll_fast()
    sampler.poll_slow()
    snap = sampler.snapshot()
    assert set(snap.samples) == {"0", "1"} and set(snap.slow) == {"0", "1"}
    clock.advance(6)
    with capture_logs() as logs:
        sampler.poll_fast()
        sampler.poll_slow()
        clock.advance(1)
        sampler.poll_fast()
    snap = sampler.snapshot()
    assert set(snap.samples) == {"0"}, "the lost GPU's series are dropped, not frozen"
    assert set(snap.slow) == {"0"}
    assert snap.errors[("1", "device", "gpu_lost")] == 3
    assert snap.failing == {"1": "gpu_lost"}
    assert not snap.is_up(1) and snap.is_up(0)
    assert snap.up, "one GPU lost is not the collector down"
    # logged once per transition, not once per pass
    assert [e["event"] for e in logs if e["event"] == "gpu sample failed"] == ["gpu sample failed"] * 2  # fast, slow
    clock.advance(14)
    sampler.poll_fast()
    snap = sampler.snapshot()
    assert set(snap.samples) == {"0", "1"} and not snap.failing
    assert snap.errors[("1", "device", "gpu_lost")] == 3


def test_xid_counts_accumulate_per_code():
    sampler, _, clock = scripted({"gpus": 2, "events": [
        {"t": 1, "gpu": 0, "xid": 13}, {"t": 2, "gpu": 0, "xid": [13, 79]}, {"t": 3, "gpu": 1, "xid": 48},
        {"t": 100, "gpu": 1, "xid": 48}]})
    t0 = clock()
    sampler.poll_fast()
    assert sampler.poll_xid(0) == []
    clock.advance(2.5)
    evs = sampler.poll_xid(0)
    assert [(e.gpu, e.xid) for e in evs] == [("0", 13), ("0", 13), ("0", 79)]
    clock.advance(1)
    sampler.poll_xid(0)
    snap = sampler.snapshot()
    assert snap.xids[("0", 13)].count == 2
    assert snap.xids[("0", 13)].last_seen == t0 + 2
    assert snap.xids[("0", 79)].count == 1
    assert snap.xids[("1", 48)].count == 1
    assert snap.xid_total() == 4 and snap.xid_total(0) == 3 and snap.xid_total("1", 48) == 1
    assert snap.xid_watch
    clock.advance(100)
    sampler.poll_xid(0)
    assert sampler.snapshot().xids[("1", 48)].count == 2
    assert sampler.snapshot().xids[("1", 48)].last_seen == t0 + 100
    assert xid_class(79) == "reboot" and xid_class(48) == "reset" and xid_class(13) == "application"
    assert xid_class(999) == "other"


def test_field_failures_drop_only_that_field_and_not_supported_counts_once():
    sampler, _, clock = scripted({
        "gpus": [{"index": 0, "unsupported": ["memory_temperature_celsius"]}],
        "events": [{"t": 1, "fail": {"power_watts": "error"}}, {"t": 3, "fail": {}}]})
    for _ in range(5):
        sampler.poll_fast()
        clock.advance(1)
    snap = sampler.snapshot()
    assert snap.errors[("0", "memory_temperature_celsius", "not_supported")] == 1
    assert snap.errors[("0", "power_watts", "error")] == 2
    s = snap.samples[0]
    assert s.memory_temperature_celsius is None and s.power_watts is not None


def test_power_limit_set_get_permission_and_range():
    sampler, src, clock = scripted({"gpus": 1, "events": [{"t": 0, "power_watts": 650}]})
    sampler.poll_fast()
    assert sampler.get_power_limit(0) == 700
    sampler.set_power_limit("0", 400)
    assert sampler.get_power_limit(0) == 400 and src.power_limit_calls == [("0", 400.0)]
    sampler.poll_fast()
    s = sampler.snapshot().samples[0]
    assert s.power_limit_watts == 400 and s.power_watts == 400, "draw is capped by the limit"
    with pytest.raises(ValueError, match="outside"):
        sampler.set_power_limit(0, 50)
    ro, _, _ = scripted({"gpus": 1, "power_limit_settable": False})
    ro.poll_fast()
    with pytest.raises(PermissionError, match="root"):
        ro.set_power_limit(0, 400)
    with pytest.raises(GpuPermissionError):
        ro.set_power_limit(0, 400)


def test_unhealthy_marks_by_index_key_or_uuid():
    sampler, _, _ = scripted({"gpus": 2})
    sampler.poll_fast()
    uuid = sampler.snapshot().gpus[1].uuid
    sampler.mark_unhealthy(uuid, "xid 79")
    sampler.mark_unhealthy(0, "hot")
    snap = sampler.snapshot()
    assert dict(snap.unhealthy) == {"1": "xid 79", "0": "hot"}
    assert snap.unhealthy[uuid] == "xid 79"
    sampler.clear_unhealthy("0")
    assert dict(sampler.snapshot().unhealthy) == {"1": "xid 79"}


def test_snapshot_is_immutable_and_not_updated_in_place():
    sampler, _, clock = scripted(HEAT)
    sampler.poll_fast()
    old = sampler.snapshot()
    clock.advance(60)
    sampler.poll_fast()
    assert old.samples[0].temperature_celsius == 40
    assert sampler.snapshot().samples[0].temperature_celsius == 92
    with pytest.raises(TypeError):
        old.samples["0"] = None  # type: ignore[index]
    with pytest.raises(TypeError):
        old.errors[("x", "y", "z")] = 1  # type: ignore[index]
    with pytest.raises(Exception):
        old.up = False  # type: ignore[misc]


def test_gpumap_lookup_forms():
    m = GpuMap({"0": "a", "0:1": "b"}, {"GPU-x": "0", "MIG-y": "0:1"})
    assert m[0] == m["0"] == m["GPU-x"] == "a"
    assert m["MIG-y"] == "b" and 1 not in m and m.get(1) is None and list(m) == ["0", "0:1"]


def test_mig_devices_have_no_utilization_and_own_processes():
    sampler, _, _ = scripted({
        "gpus": [{"index": 0}, {"index": 0, "mig": True, "parent": 0}, {"index": 1, "mig": True, "parent": 0}],
        "events": [{"t": 0, "gpu": "0:1", "processes": [{"pid": 4242, "used_bytes": 10}]}]})
    sampler.poll_fast()
    snap = sampler.snapshot()
    assert list(snap.gpus) == ["0", "0:0", "0:1"]
    mig = snap.samples["0:1"]
    assert mig.utilization_gpu_ratio is None and mig.temperature_celsius is None and mig.power_watts is None
    assert mig.memory_total_bytes is not None
    assert snap.samples["0"].processes is None, "with MIG on, processes are reported per MIG device"
    assert [(p.gpu, p.pid) for p in snap.processes] == [("0:1", 4242)]
    assert snap.gpus["0:1"].is_mig and snap.gpus["0:1"].parent_index == 0


def test_scripted_processes_self_and_children():
    import os
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sampler, _, _ = scripted({"gpus": 1, "events": [
            {"t": 0, "processes": [{"pid": "self", "used_bytes": 1}, {"pid": "children", "used_bytes": 2}]}]})
        sampler.poll_fast()
        procs = {p.pid: p.used_bytes for p in sampler.snapshot().processes}
        assert procs[os.getpid()] == 1 and procs[child.pid] == 2
    finally:
        child.kill()
        child.wait()


def test_script_from_json_and_toml_files(tmp_path):
    j = tmp_path / "t.json"
    j.write_text(json.dumps({"gpus": 1, "events": [{"t": 0, "temperature_celsius": 77}]}))
    t = tmp_path / "t.toml"
    t.write_text('gpus = 2\n[[events]]\nt = 0\ngpu = 1\ntemperature_celsius = 66\n')
    for path, gpu, temp in ((j, 0, 77), (t, 1, 66)):
        s = build_sampler("scripted", str(path), 0.5, 2.0)
        s.poll_fast()
        assert s.snapshot().samples[gpu].temperature_celsius == temp
        assert s.sample_interval == 0.5 and s.slow_interval == 2.0


@pytest.mark.parametrize("script, msg", [
    ({"gpus": 1, "events": [{"t": 0, "temprature_celsius": 1}]}, "unknown keys"),
    ({"gpus": 1, "events": [{"t": -1}]}, "'t' must be"),
    ({"gpus": 1, "events": [{"gpu": 3, "temperature_celsius": 1}]}, "no GPU 3"),
    ({"gpus": 1, "events": [{"clock_event_reasons": ["too_hot"]}]}, "unknown clock event reason"),
    ({"gpus": 1, "events": [{"temperature_celsius": "hot"}]}, "must be a number"),
    ({"gpus": 1, "evnts": []}, "unknown keys"),
    ({"gpus": [{"index": 0, "mig": True}]}, "needs 'parent'"),
])
def test_bad_scripts_fail_with_a_clear_message(script, msg):
    with pytest.raises(ScriptError, match=msg):
        ScriptedSource(script)


def test_missing_script_file_is_a_clear_error(tmp_path):
    with pytest.raises(ScriptError, match="cannot read"):
        make_source("scripted", tmp_path / "nope.json")
    with pytest.raises(ValueError, match="needs script"):
        make_source("scripted")
    with pytest.raises(ValueError, match="unknown"):
        make_source("dcgm")


def test_no_nvml_collector_down_logged_once():
    """Real nvidia-ml-py, no driver on this machine: the 'no NVML' path."""
    src = NvmlSource()
    try:
        import pynvml

        pynvml.nvmlInit()
        pytest.skip("this machine has a working NVML")
    except Exception:
        pass
    with capture_logs() as logs:
        sampler = GpuSampler(src)
        for _ in range(3):
            sampler.poll_fast()
            sampler.poll_slow()
            assert sampler.poll_xid(0) == []
    snap = sampler.snapshot()
    assert not snap.up and "NVML" in snap.reason
    assert len(snap.gpus) == 0 and len(snap.samples) == 0
    downs = [e for e in logs if e["event"] == "gpu collector down"]
    assert len(downs) == 1 and "NVML" in downs[0]["reason"]
    with pytest.raises(Exception, match="NVML"):
        sampler.set_power_limit(0, 300)


def test_source_none_and_no_source():
    for sampler in (GpuSampler(NoSource()), GpuSampler(None), build_sampler("none")):
        sampler.poll_fast()
        assert not sampler.snapshot().up and sampler.snapshot().reason


def test_threads_sample_publish_and_stop_quickly():
    src = ScriptedSource({"gpus": 2, "events": [{"t": 0, "xid": 31}]})
    sampler = GpuSampler(src, sample_interval=0.02, slow_interval=0.05, xid_timeout=0.1)
    with sampler:
        assert sampler.wait_ready(5)
        deadline = time.time() + 5
        while time.time() < deadline:
            snap = sampler.snapshot()
            if snap.durations["fast"].count >= 5 and snap.durations["slow"].count >= 2 and snap.xids:
                break
            time.sleep(0.02)
        assert snap.durations["fast"].count >= 5 and snap.durations["slow"].count >= 2
        assert snap.xids[("0", 31)].count == 1 and snap.xids[("1", 31)].count == 1
        assert set(snap.samples) == {"0", "1"}
    # stopped: every sampler thread has ended (stop() waits for them, and says so if one is stuck)
    assert not sampler.snapshot().up and all(not th.is_alive() for th in threading.enumerate()
                                             if th.name.startswith("isaacd-gpu-"))


class _Exploding(ScriptedSource):
    """A source with a bug: GPU 1's sample raises something that isn't a GpuError."""

    calls = 0

    def sample_fast(self, gpu):
        self.calls += 1
        if gpu.key == "1":
            raise ZeroDivisionError("bug")
        return super().sample_fast(gpu)


def test_unexpected_exception_on_one_gpu_never_kills_the_loop():
    src = _Exploding({"gpus": 2})
    sampler = GpuSampler(src, sample_interval=0.01, slow_interval=1, xid_timeout=0.05)
    with sampler:
        deadline = time.time() + 5
        while src.calls < 20 and time.time() < deadline:
            time.sleep(0.01)
        snap = sampler.snapshot()
    assert src.calls >= 20
    assert set(snap.samples) == {"0"}
    assert snap.errors[("1", "device", "error")] >= 9


class _Blocking(ScriptedSource):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.release = threading.Event()
        self.entered = threading.Event()
        self.returned = threading.Event()  # the stuck call came back (released, or after its 60 s)

    def sample_fast(self, gpu):
        if self.entered.is_set():
            self.entered.set()
            self.release.wait(60)
            self.returned.set()
        self.entered.set()
        return super().sample_fast(gpu)


def test_snapshot_never_waits_for_a_stuck_driver_call():
    src = _Blocking({"gpus": 1})
    sampler = GpuSampler(src, sample_interval=0.01, xid_timeout=0.05)
    sampler.start()
    try:
        assert src.entered.wait(5)
        time.sleep(0.05)  # the fast thread is now stuck inside sample_fast
        for _ in range(100):
            snap = sampler.snapshot()
        # all 100 answered while the driver call is still stuck (60 s, or until released below): a snapshot that
        # waited for it would come back only after it returned; told apart by the order, not by a clock
        assert not src.returned.is_set()
        assert isinstance(snap.samples[0], GpuSample)
    finally:
        src.release.set()
        sampler.stop()


def test_reopen_after_failure_logs_recovery(tmp_path):
    calls = {"n": 0}

    class Flaky(ScriptedSource):
        def open(self):
            calls["n"] += 1
            if calls["n"] < 3:
                from isaacd.gpu import GpuUnavailableError

                raise GpuUnavailableError("Driver Not Loaded")
            return super().open()

    sampler = GpuSampler(Flaky({"gpus": 1}), sample_interval=0.01, reopen_interval=0.02, xid_timeout=0.05)
    with capture_logs() as logs:
        with sampler:
            deadline = time.time() + 5
            while not sampler.snapshot().samples and time.time() < deadline:
                time.sleep(0.01)
    events = [e["event"] for e in logs if e["event"].startswith("gpu collector")]
    assert events == ["gpu collector down", "gpu collector up again"]


def test_lost_gpu_power_calls_raise():
    sampler, _, clock = scripted({"gpus": 1, "events": [{"t": 1, "lost": True}]})
    sampler.poll_fast()
    clock.advance(2)
    with pytest.raises(GpuLostError):
        sampler.get_power_limit(0)


def test_restart_after_stop_reopens_and_does_not_spin():
    src = ScriptedSource({"gpus": 1})
    sampler = GpuSampler(src, sample_interval=0.02, xid_timeout=0.05)
    for _ in range(2):
        with sampler:
            assert sampler.wait_ready(5)
            deadline = time.time() + 5
            while not sampler.snapshot().up and time.time() < deadline:
                time.sleep(0.01)
            assert sampler.snapshot().up
            c0 = time.process_time()
            time.sleep(0.3)
            assert time.process_time() - c0 < 0.2, "no busy loop"
