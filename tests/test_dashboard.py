"""The Grafana dashboard is built with grafana-foundation-sdk (Grafana's dashboards-as-code library), so its JSON is
the SDK's typed dashboard model: decoding it into that model and encoding it again changes nothing. (Every query in
it is run against a real Prometheus in tests/test_prometheus_e2e.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "etc" / "grafana" / "isaacd-dashboard.json"
BUILDER = ROOT / "etc" / "grafana" / "build_dashboard.py"


def test_the_builder_uses_the_sdk():
    assert "from grafana_foundation_sdk.builders import" in BUILDER.read_text()


def test_the_dashboard_is_exactly_the_sdks_model():
    raw = json.loads(DASHBOARD.read_text())
    again = json.loads(json.dumps(Dashboard.from_json(raw), cls=JSONEncoder))
    assert again == raw
