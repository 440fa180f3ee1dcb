"""A firing isaacd alert reaches a person: real isaacd -> real Prometheus (the shipped rules) -> real Alertmanager
(Debian's `prometheus-alertmanager`, the shipped route tree) -> a webhook receiver on 127.0.0.1.

The shipped etc/alertmanager/alertmanager.yml is used as is except for two things a test must change: the
receivers' URLs point at this test's webhook server, and the grouping waits are shortened from 30 s to 1 s.
The job is a trainer that always exits 3 with `max_restarts = 0`, so isaacd marks it failed at once and
`IsaacdJobFailed` fires; the shipped routes page the on-call (SMS) receiver for it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from free_ports import free_ports
from helpers import write_config

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[1]
AM_CONFIG = ROOT / "etc" / "alertmanager" / "alertmanager.yml"
RULES = ROOT / "etc" / "prometheus" / "isaacd-rules.yml"
PROM_CONFIG = ROOT / "etc" / "prometheus" / "prometheus.yml"


def _binary(*names: str) -> str:
    for n in names:
        if path := shutil.which(n):
            return path
    pytest.fail(f"none of {names} installed: scripts/test.sh installs prometheus and prometheus-alertmanager")


class Receiver:
    """The person's phone: records every webhook notification, by path (/sms, /chat)."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict[str, Any]]] = []
        received = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def site_config(receiver_url: str) -> dict[str, Any]:
    """The shipped Alertmanager config with the receivers pointed here and the waits shortened."""
    cfg = yaml.safe_load(AM_CONFIG.read_text())
    for r in cfg["receivers"]:
        for w in r.get("webhook_configs", []):
            w["url"] = receiver_url + "/" + w["url"].rsplit("/", 1)[-1]
    routes = [cfg["route"], *cfg["route"].get("routes", [])]
    for route in routes:
        for key in ("group_wait", "group_interval"):
            if key in route:
                route[key] = "1s"
    return cfg


def wait(pred: Any, timeout: float, what: str, procs: dict[str, subprocess.Popen[bytes]], logs: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        for name, p in procs.items():
            if p.poll() is not None:
                raise AssertionError(f"{name} exited {p.returncode}\n" + "\n".join(
                    f.read_text(errors="replace")[-2000:] for f in sorted(logs.glob("*.log"))))
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n" + "\n".join(
        f"{f.name}: {f.read_text(errors='replace')[-2000:]}" for f in sorted(logs.glob("*.log"))))


def test_the_shipped_config_is_valid_and_routes_pages_to_sms():
    amtool = _binary("amtool")
    assert subprocess.run([amtool, "check-config", str(AM_CONFIG)], capture_output=True).returncode == 0
    for labels, want in ((["alertname=IsaacdJobFailed", "severity=warning"], "oncall-sms"),
                         (["alertname=IsaacdDown", "severity=critical"], "oncall-sms"),
                         (["alertname=IsaacdGpuHot", "severity=warning"], "team-chat"),
                         (["alertname=IsaacdConfigReloadFailed", "severity=info"], "team-chat")):
        res = subprocess.run([amtool, "config", "routes", "test", f"--config.file={AM_CONFIG}", *labels],
                             capture_output=True, text=True)
        assert res.stdout.strip() == want, (labels, res.stdout, res.stderr)
    # the shipped Prometheus config sends alerts to Alertmanager's default address
    prom = yaml.safe_load(PROM_CONFIG.read_text())
    assert prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9093"]


def test_a_failed_job_pages_the_on_call_through_prometheus_and_alertmanager(tmp_path, supervisor_factory):
    prometheus = _binary("prometheus")
    alertmanager = _binary("prometheus-alertmanager", "alertmanager")
    receiver = Receiver()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    port_isaacd, port_prom, port_am, port_cluster = free_ports(4)
    try:
        cfg = write_config(tmp_path, '\n[[jobs]]\nname = "doomed"\ncommand = ["sh", "-c", "exit 3"]\n'
                                     '[jobs.restart]\nmax_restarts = 0\n')
        cfg.write_text(cfg.read_text().replace("[metrics]\nenabled = false\n",
                                               f'[metrics]\nlisten = "127.0.0.1:{port_isaacd}"\n'))
        am_cfg = tmp_path / "alertmanager.yml"
        am_cfg.write_text(yaml.safe_dump(site_config(receiver.url)))
        with open(tmp_path / "alertmanager.log", "wb") as log:
            procs["alertmanager"] = subprocess.Popen(
                [alertmanager, f"--config.file={am_cfg}", f"--storage.path={tmp_path / 'am'}",
                 f"--web.listen-address=127.0.0.1:{port_am}", f"--cluster.listen-address=127.0.0.1:{port_cluster}",
                 "--cluster.advertise-address=127.0.0.1:0", "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT)
        prom_cfg = tmp_path / "prometheus.yml"
        prom_cfg.write_text(json.dumps({  # the shipped scrape and alerting settings, faster intervals
            "global": {"scrape_interval": "500ms", "evaluation_interval": "500ms"},
            "rule_files": [str(RULES)],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{port_am}"]}]}]},
            "scrape_configs": [{"job_name": "isaacd", "honor_labels": True,
                                "static_configs": [{"targets": [f"127.0.0.1:{port_isaacd}"]}]}],
        }))
        with open(tmp_path / "prometheus.log", "wb") as log:
            procs["prometheus"] = subprocess.Popen(
                [prometheus, f"--config.file={prom_cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{port_prom}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        sp = supervisor_factory(cfg)
        wait(lambda: sp.job("doomed")["state"] == "failed", 60, "the job to fail", procs, tmp_path)

        def paged() -> list[dict[str, Any]]:
            return [a for path, body in receiver.got if path == "/sms" for a in body["alerts"]
                    if a["labels"].get("alertname") == "IsaacdJobFailed" and a["status"] == "firing"]

        alert = wait(paged, 120, "IsaacdJobFailed at the SMS webhook", procs, tmp_path)[0]
        assert alert["labels"]["job"] == "doomed"
        assert alert["labels"]["instance"] == f"127.0.0.1:{port_isaacd}"
        assert "doomed" in alert["annotations"]["summary"] and "failed" in alert["annotations"]["summary"]
        # routed to the pager only: the chat receiver did not get a copy of this alert
        assert not [b for path, b in receiver.got if path == "/chat"
                    and any(a["labels"].get("alertname") == "IsaacdJobFailed" for a in b["alerts"])]
    finally:
        for p in procs.values():
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        receiver.close()
