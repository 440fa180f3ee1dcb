"""Static checks of etc/prometheus and etc/grafana: promtool check/test, dashboard JSON shape,
every metric they mention exists. (The PromQL itself is run against a real Prometheus in
tests/test_prometheus_e2e.py.)"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from isaacd.metrics.catalog import BY_NAME

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "etc" / "prometheus" / "isaacd-rules.yml"
CONFIG = ROOT / "etc" / "prometheus" / "prometheus.yml"
RULE_TESTS = sorted((ROOT / "tests" / "prom").glob("*.test.yml"))
DASHBOARD = ROOT / "etc" / "grafana" / "isaacd-dashboard.json"
BUILDER = ROOT / "etc" / "grafana" / "build_dashboard.py"


def promtool() -> str:
    p = shutil.which("promtool")
    if p is None:
        pytest.skip("promtool not installed (Debian: apt-get install prometheus); CI installs it")
    return p


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.prometheus
def test_promtool_check_rules():
    r = run(promtool(), "check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.prometheus
def test_promtool_check_example_config():
    r = run(promtool(), "check", "config", str(CONFIG))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.prometheus
def test_promtool_rule_unit_tests():
    assert RULE_TESTS, "tests/prom/*.test.yml missing"
    r = run(promtool(), "test", "rules", *map(str, RULE_TESTS))
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_has_a_promtool_test():
    alerts = set(re.findall(r"^\s*- alert:\s*(\S+)", RULES.read_text(), re.M))
    tested = set()
    for t in RULE_TESTS:
        tested |= set(re.findall(r"alertname:\s*(\S+)", t.read_text()))
    assert alerts and not alerts - tested, f"alerts without a promtool test: {sorted(alerts - tested)}"


def _metric_names(text: str) -> set[str]:
    names = set(re.findall(r"\b(isaacd_[a-z0-9_]+)\b", text))
    out = set()
    for n in names:
        if n in BY_NAME:
            out.add(n)
        else:
            out.add(re.sub(r"_(bucket|sum|count)$", "", n))
    return out


def test_rules_and_dashboard_only_use_metrics_that_exist():
    for path in (RULES, DASHBOARD):
        unknown = _metric_names(path.read_text()) - set(BY_NAME)
        assert not unknown, f"{path.name} uses metrics isaacd does not export: {sorted(unknown)}"


def test_dashboard_json_is_generated_from_the_builder():
    r = subprocess.run([sys.executable, str(BUILDER), "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def _panels(panels):
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []))


def test_dashboard_shape():
    d = json.loads(DASHBOARD.read_text())
    assert d["uid"] == "isaacd" and d["schemaVersion"] >= 36
    names = [v["name"] for v in d["templating"]["list"]]
    assert names == ["datasource", "instance", "node", "job", "gpu"], "a data source, host, Ray node, job and GPU selector"
    panels = list(_panels(d["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    titles = {p["title"] for p in panels}
    for want in ("Temperature", "Thermal margin", "HBM temperature", "Utilization", "Power vs limit", "Clocks",
                 "Throttle (clock event) reasons", "Memory used", "XID errors", "ECC errors", "Iteration rate",
                 "Mean reward", "Losses", "Env steps per second", "Checkpoint age", "Restarts in range",
                 "Watchdog trips"):
        assert want in titles, want
    for p in panels:
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0
        refs = [t["refId"] for t in p["targets"]]
        assert p["targets"] and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            # variables only as regex matchers, so "All" (.*) works everywhere
            for m in re.finditer(r'(\w+)(=~|=|!=|!~)"\$(\w+)"', t["expr"]):
                assert m.group(2) == "=~", (p["title"], t["expr"])
    temp = next(p for p in panels if p["title"] == "Temperature")
    exprs = " ".join(t["expr"] for t in temp["targets"])
    assert "slowdown" in exprs and "shutdown" in exprs, "temperature with slowdown/shutdown lines"


def test_provisioning_files_point_at_the_dashboard():
    prov = (ROOT / "etc" / "grafana" / "provisioning" / "dashboards" / "isaacd.yaml").read_text()
    assert "apiVersion: 1" in prov and "type: file" in prov and "path:" in prov
    ds = (ROOT / "etc" / "grafana" / "provisioning" / "datasources" / "isaacd-prometheus.yaml").read_text()
    assert "type: prometheus" in ds


def test_example_scrape_config_honors_the_job_label():
    text = CONFIG.read_text()
    assert "honor_labels: true" in text and "127.0.0.1:9835" in text and "isaacd-rules.yml" in text
