"""The typed status (isaacd/status/): its JSON round-trips, keeps the wire keys scripts read, and every field
that `isaacd status`, /metrics and the CLI read is a declared one (a typo is an AttributeError here, never a
silent None in front of an operator)."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from metrics_fakes import fake_job, fake_status
from prometheus_client import generate_latest

from isaacd.config.schema import parse_config
from isaacd.metrics import build_registry
from isaacd.cli.render import format_status
from isaacd.runner import JobRunner
from isaacd.status import types as status_types
from isaacd.status.types import (
    BackupStatus, BackupUpload, CheckpointStatus, CompileCacheStatus, JobStatus, SpareStatus, Status, SupervisorInfo, WatchdogStatus,
    WatchdogTripCount,
)
from isaacd.history.store import StateStore

from job_fakes import FakeClock, FakeRuntime

DAEMON = Path(__file__).resolve().parents[1] / "daemon"
NOW = time.time()

# The keys of a job's row in `isaacd status --json`, as the dict before the typed status had them: scripts read
# these, so the typed status must keep every one (a new field is added here, never renamed).
WIRE_KEYS = [
    "name", "state", "state_since", "state_reason", "runtime", "workflow", "contract", "task", "device", "gpus",
    "pid", "pids", "cgroup", "container_id", "unit", "node", "waiting", "iteration", "max_iterations",
    "mean_reward", "fps", "resume_from", "redo_until", "scalars", "last_progress_time", "checkpoint", "restarts",
    "num_envs", "num_envs_configured", "cuda_ooms", "last_restart_reason", "restarts_by_reason", "rollbacks",
    "run_dir", "attempt", "started_at", "backoff_until", "stopping_then", "parked_by", "persist_error", "spare",
    "log_path", "watchdogs", "watchdog_trips", "backup", "compile_caches", "launch_wait", "boot", "queue",
    "owner", "evals",
]


def rich_job(name: str = "anymal", **changes: Any) -> JobStatus:
    """A job with every part filled in: each render and metrics branch has something to read."""
    job = JobStatus(
        name=name, state="backing-off", state_since=NOW - 50, state_reason="exited with code 1", runtime="ray",
        workflow="rsl_rl", contract="rsl_rl", task="Isaac-Velocity-Flat-Anymal-D-v0", device="cuda:0",
        gpus=["0"], pid=4242, pids=(4242, 4243), cgroup="/system.slice/isaacd-anymal.service", container_id="c0ffee",
        unit="isaacd-anymal.service", node="gpu-node-2", waiting=None, iteration=120, max_iterations=1500,
        mean_reward=3.25, fps=48213.0, resume_from=CheckpointStatus(iteration=100, path="/r/model_100.pt"),
        redo_until=130, scalars={"Train/mean_reward": 3.25, "Loss/entropy": 0.91}, last_progress_time=NOW - 2,
        checkpoint=CheckpointStatus(iteration=100, path="/r/model_100.pt", time=NOW - 300), restarts=3,
        num_envs=2048, num_envs_configured=4096, cuda_ooms={"startup": 1}, last_restart_reason="exit_code",
        restarts_by_reason={"exit_code": 2, "signal": 1}, rollbacks=1, run_dir="/r", attempt=4,
        started_at=NOW - 900, backoff_until=NOW + 5, stopping_then=None, parked_by=None, persist_error=None,
        spare=SpareStatus(state="ready", pid=4300, rss_bytes=812_000_000, preload_seconds=6.1,
                          cuda_memory_bytes=520_000_000),
        log_path="/var/lib/isaacd/logs/anymal.log",
        watchdogs={"no_progress": WatchdogStatus(state="ok", since=NOW - 600, action="restart", actions=("restart",)),
                   "divergence": WatchdogStatus(state="tripped", since=NOW - 30, detail="loss is nan",
                                                action="rollback", actions=("log", "rollback")),
                   "xid": WatchdogStatus(state="warmup", action="log/stop", actions=("log", "stop"),
                                         actions_by_class={"application": "log", "reset": "stop", "other": "log"})},
        watchdog_trips=(WatchdogTripCount(watchdog="divergence", action="rollback", count=1),),
        backup=BackupStatus(url="s3://bucket/isaacd/anymal",
                            last_upload=BackupUpload(iteration=90, time=NOW - 400, key="run/model_90.pt", size=1000),
                            lag_iterations=10, error="upload refused", error_since=NOW - 60, retry_at=NOW + 30,
                            failures_total=4, bytes_total=123456, uploads_total=9, restoring="fetching"),
        compile_caches=(CompileCacheStatus(name="warp", path="/var/lib/isaacd/caches/anymal/warp", size_bytes=4096),
                        CompileCacheStatus(name="ov", path="/var/lib/isaacd/caches/anymal/kit/ov")),
        queue=status_types.QueueStatus(request="12 GiB on 1 GPU", gpus_asked=1, memory_bytes=12 * 2**30, priority=5,
                                       submitted_at=NOW - 900, placement=(3,), placed_at=NOW - 600, preemptions=1),
    )
    return dataclasses.replace(job, **changes)


def rich_status() -> Status:
    return Status(
        jobs=(rich_job(), rich_job("idle", state="stopped", spare=SpareStatus(state="off", reason="no GPU room"),
                                   backup=None, checkpoint=None, resume_from=None, iteration=None, cuda_ooms=None)),
        supervisor=SupervisorInfo(version="0.1.0", pid=1234, started_at=NOW - 3600, uptime_seconds=3600.0,
                                  config_path="/etc/isaacd/isaacd.toml", config_reloads_total=2,
                                  config_errors_total=1, last_config_error="line 3: bad", state_dir="/var/lib/isaacd"),
        gpus=status_types.GpusStatus(up=False, reason="no NVML"),
    )


def through_the_wire(st: Status) -> Status:
    return Status.from_json(json.loads(json.dumps(st.to_json())))


def test_a_status_round_trips_through_its_json():
    st = rich_status()
    assert through_the_wire(st) == st
    assert through_the_wire(Status()) == Status()
    for job in st.jobs:
        assert JobStatus.from_json(json.loads(json.dumps(job.to_json()))) == job


def test_the_json_keeps_the_wire_shape_scripts_read():
    job = rich_job().to_json()
    assert list(job) == WIRE_KEYS
    assert job["pids"] == [4242, 4243] and job["watchdog_trips"] == [
        {"watchdog": "divergence", "action": "rollback", "count": 1}]
    assert job["resume_from"] == {"iteration": 100, "path": "/r/model_100.pt"}  # a rebuilt resume point has no time
    assert job["checkpoint"] == {"iteration": 100, "path": "/r/model_100.pt", "time": NOW - 300}
    # mode/mode_reason: the booted spare's keys (issue 21), beside the imports-only spare's
    assert job["spare"] == {"state": "ready", "pid": 4300, "mode": None, "mode_reason": None,
                            "rss_bytes": 812_000_000, "preload_seconds": 6.1, "cuda_memory_bytes": 520_000_000}
    assert SpareStatus(state="none").to_json() == {"state": "none", "reason": None}
    assert set(job["watchdogs"]["xid"]) == {"state", "since", "detail", "action", "actions", "actions_by_class"}
    assert set(job["watchdogs"]["no_progress"]) == {"state", "since", "detail", "action", "actions"}
    assert job["compile_caches"] == [{"name": "warp", "path": "/var/lib/isaacd/caches/anymal/warp", "size_bytes": 4096},
                                     {"name": "ov", "path": "/var/lib/isaacd/caches/anymal/kit/ov", "size_bytes": None}]
    assert list(job["backup"]) == ["url", "last_upload", "lag_iterations", "error", "error_since", "retry_at",
                                   "failures_total", "bytes_total", "uploads_total", "restoring", "blocked", "lease"]
    st = rich_status().to_json()
    assert set(st) == {"jobs", "gpus", "supervisor"} and "gpus" not in Status().to_json()


def test_a_runners_status_is_json_with_the_wire_keys_and_comes_back_equal(tmp_path):
    cfg = parse_config('[[jobs]]\nname = "cp"\ncommand = ["sleep", "600"]\nmax_iterations = 100\n', "t.toml",
                       tmp_path).jobs[0]
    clock = FakeClock()
    r = JobRunner(cfg, FakeRuntime(), StateStore(tmp_path / "state"), tmp_path / "state", clock)
    r.recover()
    clock.advance(0.1)
    r.tick(clock.monotonic())
    st = r.snapshot()
    assert isinstance(st, JobStatus) and st.state == "starting" and st.pid is not None and st.attempt == 1
    wire = json.loads(json.dumps(st.to_json()))
    assert list(wire) == WIRE_KEYS
    assert JobStatus.from_json(wire) == st


def test_old_and_partial_rows_read_with_defaults_and_a_nameless_row_is_refused():
    job = JobStatus.from_json({"name": "old", "state": "running", "some_new_field": 1, "checkpoint": "junk"})
    assert job.checkpoint is None and job.pids == () and job.watchdogs == {} and job.cuda_ooms is None
    with pytest.raises(KeyError):
        JobStatus.from_json({"state": "running"})


def test_a_misspelt_field_is_an_attribute_error_not_none():
    job = rich_job()
    with pytest.raises(AttributeError):
        job.mean_rewards  # noqa: B018  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.state = "running"  # type: ignore[misc]


def test_status_renders_every_part_from_the_typed_value_and_from_its_json():
    st = rich_status()
    events = {"anymal": [
        {"time": NOW - 200, "event": "exited", "iteration": 130},
        {"time": NOW - 150, "event": "restart_scheduled", "reason": "signal"},
        {"time": NOW - 100, "event": "started", "resume_from": {"iteration": 100, "path": "/r/model_100.pt"}},
    ]}
    text = format_status(st, now=NOW, events=events)
    assert text == format_status(st.to_json(), now=NOW, events=events)
    for part in ("anymal: exited with code 1", "last restart: exit_code; last crash: signal", "redoing 30",
                 "num_envs 2048 in use of 4096", "anymal watchdogs: no_progress ok", "divergence TRIPPED",
                 "anymal warm spare: ready (pid 4300, 774 MiB RAM, 496 MiB GPU)", "last upload iteration 90",
                 "backup ERROR since 60s ago: upload refused", "ray@gpu-node-2", "last reload rejected",
                 "GPUs: collector down: no NVML"):
        assert part in text, part


def test_a_boot_and_a_start_after_a_stop_read_as_words_from_the_value_and_its_json():
    booting = rich_job("il3", state="starting", boot=status_types.BootStatus(
        seconds=46.2, phase="environment", phase_seconds=12.0, last_line="[INFO]: Creating the scene"))
    stopping = rich_job("cp", state="stopping", state_reason="operator stop (isaacd stop)", stopping_then="start")
    st = Status(jobs=(booting, stopping))
    text = format_status(st, now=NOW)
    assert text == format_status(st.to_json(), now=NOW)
    assert "il3: booting for 46s (environment for 12s); last output: [INFO]: Creating the scene" in text
    assert "cp: operator stop (isaacd stop); then it starts (`isaacd start` during the stop)" in text


def test_metrics_read_the_typed_status_as_they_read_its_json():
    st = rich_status()

    def scrape(provider: Any) -> list[str]:
        text = generate_latest(build_registry(provider, None, process_metrics=False)).decode()
        return sorted(ln for ln in text.splitlines() if ln.startswith("isaacd_") and "uptime" not in ln)

    typed = scrape(lambda: st)
    assert typed == scrape(lambda: st.to_json())
    assert 'isaacd_job_spare_ready{job="anymal"} 1.0' in typed
    assert 'isaacd_watchdog_trips_total{action="rollback",job="anymal",watchdog="divergence"} 1.0' in typed
    assert 'isaacd_scrape_errors_total{source="status"} 0.0' in typed
    assert scrape(lambda: fake_status([fake_job("anymal", now=NOW)]))  # the JSON fakes still read


# ---- static: every attribute read off a status value is one it declares --------------------------------------

STATUS_CLASSES = {name: cls for name, cls in vars(status_types).items() if isinstance(cls, type)
                  and dataclasses.is_dataclass(cls)
                  # its own, and the parts' status types it carries from where the import graph puts them
                  and cls.__module__ in (status_types.__name__, "isaacd.backup.status")}
READERS = ["cli/render.py", "cli/render_backup.py", "cli/main.py", "metrics/collector.py", "metrics/attribution.py",
           "metrics/status.py", "supervisor.py", "attempt/job_status.py"]


def _members(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} | {n for n in vars(cls) if not n.startswith("__")}


def _class_in(annotation: str) -> str | None:
    """The status class an annotation (or a field's type) names: "JobStatus", "SpareStatus | None", ...;
    "*WatchdogStatus" for a collection of them (dict[str, WatchdogStatus], tuple[JobStatus, ...])."""
    names = [n for n in re.findall(r"\w+", annotation) if n in STATUS_CLASSES]
    if not names:
        return None
    return ("*" if re.match(r"\s*(dict|tuple|list|Sequence|Mapping|Iterable)\[", annotation) else "") + names[-1]


def _element(c: str | None) -> str | None:
    return c[1:] if c and c.startswith("*") else None


class _Reads(ast.NodeVisitor):
    """Follows names whose type is a status class, per function: annotated arguments, `for j in x.jobs`,
    `v = x.field`, `v = a if ... else b`, `for k, v in [sorted(]x.field.items()[)]`, `X.from_json(...)`.
    Records (class, attribute, line) for each read of an attribute on a single status value."""

    def __init__(self) -> None:
        self.reads: list[tuple[str, str, int]] = []
        self.types: dict[str, str] = {}

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        outer, self.types = self.types, dict(self.types)
        for a in node.args.args + node.args.kwonlyargs:
            if a.annotation is not None and (c := _class_in(ast.unparse(a.annotation))):
                self.types[a.arg] = c
        self.generic_visit(node)
        self.types = outer

    def _type_of(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return self.types.get(node.id)
        if isinstance(node, ast.IfExp):
            return self._type_of(node.body) or self._type_of(node.orelse)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "from_json" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in STATUS_CLASSES:
            return node.func.value.id
        if isinstance(node, ast.Attribute) and (owner := self._type_of(node.value)) and owner in STATUS_CLASSES:
            f = {f.name: f for f in dataclasses.fields(STATUS_CLASSES[owner])}.get(node.attr)
            if f is not None:
                return _class_in(str(f.type))
        return None

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and (c := self._type_of(node.value)):
            self.types[node.targets[0].id] = c
        self.generic_visit(node)

    def _bind_loop(self, iterable: ast.expr, target: ast.expr) -> None:
        """`for x in rows` / `for k, x in sorted(d.items())` (loops and comprehensions): x's type."""
        it = iterable
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "sorted" and it.args:
            it = it.args[0]
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "items":
            c = _element(self._type_of(it.func.value))
            if c and isinstance(target, ast.Tuple) and isinstance(target.elts[1], ast.Name):
                self.types[target.elts[1].id] = c
        elif (c := _element(self._type_of(it))) and isinstance(target, ast.Name):
            self.types[target.id] = c

    def visit_For(self, node: ast.For) -> None:
        self._bind_loop(node.iter, node.target)
        self.generic_visit(node)

    visit_AsyncFor = visit_For  # type: ignore[assignment]

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self._bind_loop(node.iter, node.target)
        self.generic_visit(node)

    def visit_ListComp(self, node: ast.ListComp) -> None:
        for g in node.generators:
            self.visit_comprehension(g)
        self.visit(node.elt)

    visit_SetComp = visit_GeneratorExp = visit_ListComp  # type: ignore[assignment]

    def visit_DictComp(self, node: ast.DictComp) -> None:
        for g in node.generators:
            self.visit_comprehension(g)
        self.visit(node.key)
        self.visit(node.value)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if (c := self._type_of(node.value)) in STATUS_CLASSES and isinstance(node.ctx, ast.Load):
            self.reads.append((c, node.attr, node.lineno))
        self.generic_visit(node)


@pytest.mark.parametrize("module", READERS)
def test_every_status_field_a_reader_reads_is_declared(module):
    reads = _Reads()
    reads.visit(ast.parse((DAEMON / module).read_text()))
    unknown = [(c, a, line) for c, a, line in reads.reads if a not in _members(STATUS_CLASSES[c])]
    assert not unknown, f"{module} reads fields no status type declares (class, attribute, line): {unknown}"


def test_the_static_check_sees_the_readers_reads():
    """The check above is only worth something if it follows the readers' variables: it must see these."""
    seen: set[tuple[str, str]] = set()
    for module in READERS:
        reads = _Reads()
        reads.visit(ast.parse((DAEMON / module).read_text()))
        seen |= {(c, a) for c, a, _ in reads.reads}
    for want in [("JobStatus", "mean_reward"), ("JobStatus", "num_envs_configured"), ("SpareStatus", "rss_bytes"),
                 ("BackupStatus", "retry_at"), ("BackupUpload", "iteration"), ("WatchdogStatus", "detail"),
                 ("WatchdogTripCount", "count"), ("CheckpointStatus", "time"), ("SupervisorInfo", "config_path")]:
        assert want in seen, want


GPU_DEVICE_WIRE = {
    "index": "0", "uuid": "GPU-8d", "model": "NVIDIA H200", "pci_bus_id": "00000000:19:00.0", "mig": False,
    "temperature_celsius": 61.0, "memory_temperature_celsius": None, "thermal_margin_celsius": 20.0,
    "power_watts": 500.0, "power_limit_watts": 700.0, "sm_clock_hertz": 1.98e9, "memory_clock_hertz": None,
    "memory_used_bytes": 9 * 2**30, "memory_total_bytes": 140 * 2**30, "utilization_ratio": 0.96,
    "memory_utilization_ratio": 0.4, "clock_event_reasons": ["sw_power_cap"],
    "processes": [{"pid": 4242, "used_bytes": 9 * 2**30, "job": "anymal"}, {"pid": 7, "used_bytes": None, "job": None}],
    "jobs": ["anymal"], "assigned": ["anymal"], "placed": ["anymal"], "asked_bytes": 80 * 2**30,
    "xids": {"13": {"count": 2, "last_seen": NOW - 5, "class": "application"}}, "health": "ok"}


def test_the_gpus_are_typed_and_their_json_is_the_wire_shape_scripts_read():
    """`Status.gpus` is a GpusStatus (devices, their processes and XIDs typed); its JSON is the per-device table
    `isaacd status --json` always had, key for key and in order."""
    wire = {"up": True, "reason": None, "source": "nvml", "driver_version": "550.54", "xid_watch": True,
            "devices": [GPU_DEVICE_WIRE]}
    st = Status.from_json({"jobs": [], "gpus": wire})
    assert isinstance(st.gpus, status_types.GpusStatus)
    dev = st.gpus.devices[0]
    assert dev.processes[0].job == "anymal" and dev.xids["13"].xid_class == "application" and dev.jobs == ("anymal",)
    assert json.dumps(st.to_json()["gpus"]) == json.dumps(wire)  # same keys, same order, same values
    assert list(status_types.GpuDeviceStatus().to_json()) == list(GPU_DEVICE_WIRE)
    assert through_the_wire(st) == st
