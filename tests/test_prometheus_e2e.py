"""A real Prometheus (Debian's `prometheus` binary) scrapes two isaacd exporters on loopback:

* target A: a scripted GPU timeline (2 GPUs, heat, throttling, XIDs) and a job whose PID holds GPU memory;
* target B: the real NVML source - on CI there is no driver, so this is the "no GPU" host.

Then, through Prometheus's HTTP API: the job series arrived with the right labels (`job` is the
training job thanks to honor_labels), every PromQL expression of the dashboard and of the rules
parses and evaluates, dashboard panels return data (GPU panels on A; job panels on B too), the rules
evaluate without errors, and the alerts the script should trigger fire.

Starts Prometheus once for the module, waits with bounded timeouts, always kills it.
(The exporters are served from this process with a fake status provider; the same checks apply
when the targets are real `isaacd run` supervisors.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from isaacd.gpu import GpuSampler, ScriptedSource
from isaacd.gpu.nvml import NvmlSource
from isaacd.metrics import build_registry, serve
from isaacd.metrics.catalog import BY_NAME
from isaacd.metrics.testing import demo_gpu_script, fake_job, fake_status

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "etc" / "grafana" / "isaacd-dashboard.json"
RULES = ROOT / "etc" / "prometheus" / "isaacd-rules.yml"
SHIPPED_CONFIG = ROOT / "etc" / "prometheus" / "prometheus.yml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveStatus:
    """A status provider whose job makes progress (iteration grows), like a training run."""

    def __init__(self, name: str, pids: list[int]):
        self.t0 = time.time()
        self.name, self.pids = name, pids

    def __call__(self) -> dict:
        now = time.time()
        job = fake_job(self.name, pids=self.pids, now=now, iteration=100 + int((now - self.t0) * 10))
        return fake_status([job], started_at=self.t0 - 60)


class Prom:
    def __init__(self, base: str, proc: subprocess.Popen, log: Path):
        self.base, self.proc, self.log = base, proc, log

    def api(self, path: str, **params: str) -> dict:
        url = f"{self.base}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:  # 400/422: bad query - the body says why
            return json.load(e)

    def query(self, expr: str) -> dict:
        return self.api("/api/v1/query", query=expr)

    def value(self, expr: str) -> float | None:
        r = self.query(expr)
        res = r.get("data", {}).get("result", [])
        if r.get("status") != "success" or not res:
            return None
        if r["data"]["resultType"] == "scalar":
            return float(res[1])
        return float(res[0]["value"][1])


def wait_for(pred, timeout: float, what: str, prom: Prom | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        if prom is not None and prom.proc.poll() is not None:
            raise AssertionError(f"prometheus exited ({prom.proc.returncode}): {prom.log.read_text()[-3000:]}")
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                         + (f"\nprometheus log:\n{prom.log.read_text()[-3000:]}" if prom else ""))


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("Debian's prometheus is not installed (apt-get install prometheus)")
    tmp = tmp_path_factory.mktemp("prom")

    script = demo_gpu_script(2, job_pid="self")
    script["events"].append({"t": 0, "gpu": 1, "fail": {"pcie_link_width": "error"}})
    sampler_a = GpuSampler(ScriptedSource(script), sample_interval=0.25, slow_interval=0.5, xid_timeout=0.1).start()
    sampler_a.mark_unhealthy(1, "hw thermal slowdown")  # as a watchdog would
    sampler_b = GpuSampler(NvmlSource(), sample_interval=0.25, slow_interval=0.5, xid_timeout=0.1).start()
    srv_a = serve("127.0.0.1:0", "/metrics", build_registry(LiveStatus("anymal", [os.getpid()]), sampler_a))
    srv_b = serve("127.0.0.1:0", "/metrics", build_registry(LiveStatus("cpu-only", [999999]), sampler_b))
    inst_a, inst_b = f"127.0.0.1:{srv_a.port}", f"127.0.0.1:{srv_b.port}"

    assert "honor_labels: true" in SHIPPED_CONFIG.read_text()  # the test mirrors the shipped scrape config
    port = free_port()
    cfg = tmp / "prometheus.yml"
    cfg.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "500ms", "evaluation_interval": "500ms"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "isaacd", "honor_labels": True, "metrics_path": "/metrics",
                            "static_configs": [{"targets": [inst_a, inst_b]}]}],
    }))
    log = tmp / "prometheus.log"
    with open(log, "wb") as logf:
        proc = subprocess.Popen(
            [binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=logf, stderr=subprocess.STDOUT, cwd=tmp)
    prom = Prom(f"http://127.0.0.1:{port}", proc, log)
    try:
        def ready():
            try:
                with urllib.request.urlopen(f"{prom.base}/-/ready", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for(ready, 30, "prometheus /-/ready", prom)
        wait_for(lambda: prom.value('count(up{job="isaacd"} == 1)') == 2, 30, "both targets up", prom)
        # enough scrapes for rate()/increase() and some rule evaluations
        wait_for(lambda: (prom.value("min(count_over_time(isaacd_uptime_seconds[1m]))") or 0) >= 5, 30,
                 "5 scrapes of each target", prom)
        yield prom, inst_a, inst_b
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        srv_a.close()
        srv_b.close()
        sampler_a.stop()
        sampler_b.stop()


def test_job_series_arrive_with_the_right_labels(stack):
    prom, a, b = stack
    r = prom.query('isaacd_job_state{state="running"} == 1')
    got = {(s["metric"]["instance"], s["metric"]["job"]) for s in r["data"]["result"]}
    assert got == {(a, "anymal"), (b, "cpu-only")}
    assert prom.query("count(isaacd_job_state{exported_job!=\"\"})")["data"]["result"] == [], \
        "honor_labels keeps the training job in `job`"
    scal = prom.query(f'isaacd_job_scalar{{instance="{a}",job="anymal",tag="Loss/surrogate"}}')["data"]["result"]
    assert len(scal) == 1 and float(scal[0]["value"][1]) == pytest.approx(-0.0123)
    assert prom.value(f'isaacd_job_restarts_total{{instance="{a}",job="anymal",reason="exit_code"}}') == 2
    assert (prom.value(f'irate(isaacd_job_iteration{{instance="{a}",job="anymal"}}[30s])') or 0) > 1
    # supervisor and GPU series keep the scrape job's name
    assert prom.value(f'isaacd_uptime_seconds{{instance="{a}",job="isaacd"}}') is not None


def test_gpu_series_and_collector_state(stack):
    prom, a, b = stack
    assert prom.value(f'isaacd_gpu_collector_up{{instance="{a}"}}') == 1
    assert prom.value(f'isaacd_gpu_collector_up{{instance="{b}"}}') == 0, "no NVML on CI: collector down"
    t = prom.query(f'isaacd_gpu_temperature_celsius{{instance="{a}",gpu="0"}}')["data"]["result"]
    assert len(t) == 1
    m = t[0]["metric"]
    assert m["job"] == "isaacd" and m["uuid"].startswith("GPU-") and m["model"] == "NVIDIA H200" and m["pci_bus_id"]
    info = prom.query('isaacd_gpu_job_info{job="anymal"}')["data"]["result"]
    assert {s["metric"]["gpu"] for s in info} == {"0", "1"}
    joined = prom.query('isaacd_gpu_power_watts * on(instance, gpu) group_right isaacd_gpu_job_info{job="anymal"}')
    assert {s["metric"]["job"] for s in joined["data"]["result"]} == {"anymal"}
    assert prom.value(f'isaacd_gpu_xid_errors_total{{instance="{a}",gpu="1",xid="48",class="reset"}}') == 2


def _substitute(expr: str, instance: str) -> str:
    subs = {"__rate_interval": "1m", "__interval": "15s", "__range": "5m", "instance": instance}

    def rep(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        return subs.get(name, ".*")

    out = re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", rep, expr)
    assert "$" not in out, out
    return out


def dashboard_queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    out: list[tuple[str, str]] = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((f"panel {p['title']!r} {t.get('refId')}", t["expr"]))
            walk(p.get("panels", []))

    walk(dash["panels"])
    for v in dash["templating"]["list"]:
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q.strip())
            out.append((f"variable {v['name']}", m.group(1) if m else q))
    return out


def needs_gpu(expr: str) -> bool:
    names = set(re.findall(r"\b(isaacd_[a-z_]+)", expr))
    base = {re.sub(r"_(bucket|sum|count)$", "", n) if n not in BY_NAME else n for n in names}
    return any(BY_NAME[n].needs_gpu for n in base if n in BY_NAME)


def test_every_dashboard_expression_parses_and_returns_data(stack):
    prom, a, b = stack
    queries = dashboard_queries()
    assert len(queries) > 40
    problems = []
    for where, expr in queries:
        for inst, expect_data in ((a, True), (b, not needs_gpu(expr))):
            r = prom.query(_substitute(expr, inst))
            if r.get("status") != "success":
                problems.append(f"{where} on {inst}: {r.get('error')}: {expr}")
            elif expect_data and not r["data"]["result"]:
                problems.append(f"{where} on {inst}: no data: {expr}")
    assert not problems, "\n".join(problems)


def test_every_rule_parses_evaluates_and_the_scripted_faults_fire(stack):
    prom, a, b = stack

    def groups():
        return prom.api("/api/v1/rules")["data"]["groups"]

    wait_for(lambda: all(r.get("lastEvaluation", "").startswith("2") or r.get("health") == "ok"
                         for g in groups() for r in g["rules"]), 20, "rules evaluated", prom)
    rules = [r for g in groups() for r in g["rules"]]
    assert len(rules) >= 7
    names = {r["name"] for r in rules}
    for required in ("IsaacdGpuHot", "IsaacdGpuHwThermalSlowdown", "IsaacdGpuXidResetRequired",
                     "IsaacdGpuCollectorDown", "IsaacdJobNotProgressing", "IsaacdJobRestartLoop",
                     "IsaacdJobCheckpointTooOld"):
        assert required in names
    problems = []
    for r in rules:
        if r.get("health") == "err":
            problems.append(f"{r['name']}: {r.get('lastError')}")
        q = prom.query(r["query"])
        if q.get("status") != "success":
            problems.append(f"{r['name']}: {q.get('error')}: {r['query']}")
        if r["type"] == "alerting":
            if not r["labels"].get("severity") or not r["annotations"].get("summary"):
                problems.append(f"{r['name']}: needs a severity label and a summary")
    assert not problems, "\n".join(problems)

    def firing():
        alerts = prom.api("/api/v1/alerts")["data"]["alerts"]
        return {(x["labels"]["alertname"], x["labels"].get("gpu")) for x in alerts if x["state"] == "firing"}

    want = {("IsaacdGpuHwThermalSlowdown", "1"), ("IsaacdGpuXidResetRequired", "1"), ("IsaacdGpuXidError", "0"),
            ("IsaacdGpuUnhealthy", "1")}
    got = wait_for(lambda: (f := firing()) >= want and f, 15, f"alerts {want} firing", prom)
    assert ("IsaacdGpuHot", "0") not in got
