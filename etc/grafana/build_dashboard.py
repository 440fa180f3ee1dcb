#!/usr/bin/env python3
"""Generates etc/grafana/isaacd-dashboard.json (stdlib only; run it after editing, CI checks the
committed JSON is what this script produces).

Why a small generator instead of grafanalib / grafana-foundation-sdk: the dashboard is ~40 panels of
three shapes; a 200-line script keeps every PromQL expression in one readable list, needs no
dependency in CI, and the tests (tests/test_prometheus_rules.py, tests/test_prometheus_e2e.py) check
the *output* - the JSON Grafana actually loads - against a real Prometheus, which a library would
not do for us.

    python3 etc/grafana/build_dashboard.py            # rewrite the JSON
    python3 etc/grafana/build_dashboard.py --check    # exit 1 if the JSON is stale
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("isaacd-dashboard.json")
DS = {"type": "prometheus", "uid": "${datasource}"}

I = 'instance=~"$instance"'
J = f'{I},job=~"$job"'
GP = f'{I},gpu=~"$gpu"'


class Layout:
    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.x = self.y = 0
        self.row_h = 0
        self.next_id = 1

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append({"type": "row", "title": title, "id": self._id(), "collapsed": False, "panels": [],
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}})
        self.y += 1

    def _id(self) -> int:
        i = self.next_id
        self.next_id += 1
        return i

    def _newline(self) -> None:
        if self.x:
            self.y += self.row_h
            self.x = self.row_h = 0

    def add(self, panel: dict[str, Any], w: int = 8, h: int = 8) -> None:
        if self.x + w > 24:
            self._newline()
        panel["id"] = self._id()
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        panel["datasource"] = DS
        for n, t in enumerate(panel.get("targets", [])):
            t.setdefault("refId", chr(ord("A") + n))
            t["datasource"] = DS
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)


def tgt(expr: str, legend: str = "", instant: bool = False, fmt: str = "time_series") -> dict[str, Any]:
    t: dict[str, Any] = {"expr": expr, "legendFormat": legend or "__auto", "range": not instant, "instant": instant}
    if fmt != "time_series":
        t["format"] = fmt
    return t


def thresholds(*steps: tuple[str, float | None]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]}


def ts(title: str, targets: list[dict[str, Any]], unit: str = "short", desc: str = "", *,
       line_at: float | None = None, dashed: str | None = None, stepped: bool = False,
       minv: float | None = None, maxv: float | None = None) -> dict[str, Any]:
    custom: dict[str, Any] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 0, "showPoints": "never",
                              "spanNulls": False}
    if stepped:
        custom["lineInterpolation"] = "stepAfter"
    defaults: dict[str, Any] = {"unit": unit, "custom": custom}
    if minv is not None:
        defaults["min"] = minv
    if maxv is not None:
        defaults["max"] = maxv
    if line_at is not None:
        custom["thresholdsStyle"] = {"mode": "line+area"}
        defaults["thresholds"] = thresholds(("transparent", None), ("red", line_at))
    overrides = []
    if dashed:
        overrides.append({"matcher": {"id": "byRegexp", "options": dashed},
                          "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                                         {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}}]})
    return {"type": "timeseries", "title": title, "description": desc, "targets": targets,
            "fieldConfig": {"defaults": defaults, "overrides": overrides},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}}}


def stat(title: str, targets: list[dict[str, Any]], unit: str = "short", desc: str = "", *,
         steps: tuple[tuple[str, float | None], ...] = (("green", None),), text_mode: str = "auto",
         mappings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "stat", "title": title, "description": desc, "targets": targets,
            "fieldConfig": {"defaults": {"unit": unit, "thresholds": thresholds(*steps), "mappings": mappings or []},
                            "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "textMode": text_mode, "colorMode": "background", "graphMode": "none"}}


def table(title: str, targets: list[dict[str, Any]], desc: str = "", hide: tuple[str, ...] = ()) -> dict[str, Any]:
    excl = {k: True for k in ("Time", "__name__", *hide)}
    return {"type": "table", "title": title, "description": desc, "targets": targets,
            "fieldConfig": {"defaults": {}, "overrides": []},
            "transformations": [{"id": "merge", "options": {}},
                                {"id": "organize", "options": {"excludeByName": excl}}],
            "options": {"showHeader": True}}


def build() -> dict[str, Any]:
    L = Layout()
    # ------------------------------------------------------------------ overview
    L.row("Overview")
    L.add(stat("Jobs running", [tgt(f'sum(isaacd_job_state{{{I},state="running"}})', instant=True)],
               steps=(("red", None), ("green", 1))), w=4, h=4)
    L.add(stat("Jobs failed", [tgt(f'sum(isaacd_job_state{{{I},state="failed"}})', instant=True)],
               steps=(("green", None), ("red", 1))), w=4, h=4)
    L.add(stat("GPU collector", [tgt(f"min(isaacd_gpu_collector_up{{{I}}})", instant=True)],
               desc="0: NVML unavailable (reason in the isaacd log) or [gpu] source = \"none\".",
               steps=(("red", None), ("green", 1)),
               mappings=[{"type": "value", "options": {"0": {"text": "DOWN"}, "1": {"text": "UP"}}}]), w=4, h=4)
    L.add(stat("GPUs not answering", [tgt(f"count(isaacd_gpu_up{{{I}}} == 0) or vector(0)", instant=True)],
               steps=(("green", None), ("red", 1))), w=4, h=4)
    L.add(stat("XIDs (since isaacd start)", [tgt(f"sum(isaacd_gpu_xid_errors_total{{{I}}}) or vector(0)",
                                                 instant=True)],
               steps=(("green", None), ("orange", 1))), w=4, h=4)
    L.add(stat("isaacd uptime", [tgt(f"max(isaacd_uptime_seconds{{{I}}})", instant=True)], unit="s"), w=4, h=4)
    L.add(table("Jobs and their GPUs (from NVML processes)",
                [tgt(f"isaacd_gpu_job_info{{{J}}}", instant=True, fmt="table")],
                desc="Which job's processes hold memory on which GPU: isaacd maps NVML PIDs to the job's process "
                     "tree or container cgroup.", hide=("Value",)), w=12, h=6)
    L.add(table("Job state", [tgt(f"isaacd_job_state{{{J}}} == 1", instant=True, fmt="table")], hide=("Value",)),
          w=12, h=6)

    # ------------------------------------------------------------------ training
    L.row("Training")
    L.add(ts("Iteration rate", [tgt(f"rate(isaacd_job_iteration{{{J}}}[$__rate_interval])", "{{job}}")],
             unit="none", desc="Training iterations per second (rsl_rl PPO updates)."))
    L.add(ts("Progress", [tgt(f"isaacd_job_iteration{{{J}}} / on(instance, job) isaacd_job_max_iterations{{{J}}}",
                              "{{job}}")], unit="percentunit", minv=0, maxv=1))
    L.add(ts("Mean reward", [tgt(f"isaacd_job_mean_reward{{{J}}}", "{{job}}")],
             desc="rsl_rl's rolling mean over finished episodes: it goes flat when no episode finishes."))
    L.add(ts("Losses", [tgt(f'isaacd_job_scalar{{{J},tag=~"Loss/.*"}}', "{{job}} {{tag}}")],
             desc="Every Loss/* TensorBoard tag the trainer writes."))
    L.add(ts("Episode length", [tgt(f'isaacd_job_scalar{{{J},tag="Train/mean_episode_length"}}', "{{job}}")],
             unit="none"))
    L.add(ts("Env steps per second", [tgt(f"isaacd_job_env_steps_per_second{{{J}}}", "{{job}}")], unit="none",
             desc="rsl_rl Perf/total_fps."))
    L.add(ts("Checkpoint age", [tgt(f"time() - isaacd_job_checkpoint_timestamp_seconds{{{J}}}", "{{job}}")],
             unit="s", line_at=3600, desc="Alert IsaacdJobCheckpointTooOld fires above one hour."))
    L.add(ts("Time since last progress",
             [tgt(f"time() - isaacd_job_last_progress_timestamp_seconds{{{J}}}", "{{job}}")], unit="s",
             line_at=900, desc="Seconds since a new TensorBoard step; alert at 15 minutes."))
    L.add(ts("Newest checkpoint iteration", [tgt(f"isaacd_job_checkpoint_iteration{{{J}}}", "{{job}}")],
             unit="none", stepped=True))
    L.add(ts("Restarts in range",
             [tgt(f"sum by (instance, job, reason) (increase(isaacd_job_restarts_total{{{J}}}[$__range]))",
                  "{{job}} {{reason}}")], unit="none", stepped=True))
    L.add(ts("Watchdog trips", [tgt(f"isaacd_watchdog_trips_total{{{J}}}", "{{job}} {{watchdog}} → {{action}}")],
             unit="none", stepped=True))
    L.add(table("Watchdog states", [tgt(f"isaacd_watchdog_state{{{J}}} == 1", instant=True, fmt="table")],
                hide=("Value",)))
    L.add(ts("GPU utilization of the job's GPUs",
             [tgt(f"isaacd_gpu_utilization_ratio{{{I}}} * on(instance, gpu) group_right "
                  f"isaacd_gpu_job_info{{{J}}}", "{{job}} GPU {{gpu}}")], unit="percentunit", minv=0, maxv=1,
             desc="GPU series joined to jobs through isaacd_gpu_job_info."))
    L.add(ts("GPU power of the job's GPUs",
             [tgt(f"isaacd_gpu_power_watts{{{I}}} * on(instance, gpu) group_right isaacd_gpu_job_info{{{J}}}",
                  "{{job}} GPU {{gpu}}")], unit="watt"))
    L.add(ts("GPU memory by job",
             [tgt(f'sum by (instance, job, gpu) (isaacd_gpu_process_memory_used_bytes{{{J},job!=""}})',
                  "{{job}} GPU {{gpu}}")], unit="bytes"))

    # ------------------------------------------------------------------ GPUs
    L.row("GPUs")
    L.add(ts("Temperature", [
        tgt(f"isaacd_gpu_temperature_celsius{{{GP}}}", "GPU {{gpu}}"),
        tgt(f'isaacd_gpu_temperature_threshold_celsius{{{GP},threshold=~"slowdown|shutdown"}}',
            "GPU {{gpu}} {{threshold}}"),
    ], unit="celsius", line_at=85, dashed="/slowdown|shutdown/",
        desc="Dashed: the driver's slowdown and shutdown thresholds. Shaded: above 85 °C (alert after 30 s)."))
    L.add(ts("Thermal margin", [tgt(f"isaacd_gpu_thermal_margin_celsius{{{GP}}}", "GPU {{gpu}}")], unit="celsius",
             desc="Degrees left before thermal slowdown, as the driver reports it."))
    L.add(ts("HBM temperature", [
        tgt(f"isaacd_gpu_memory_temperature_celsius{{{GP}}}", "GPU {{gpu}}"),
        tgt(f'isaacd_gpu_temperature_threshold_celsius{{{GP},threshold="memory_max"}}', "GPU {{gpu}} memory_max"),
    ], unit="celsius", dashed="/memory_max/"))
    L.add(ts("Utilization", [
        tgt(f"isaacd_gpu_utilization_ratio{{{GP}}}", "GPU {{gpu}}"),
        tgt(f"isaacd_gpu_memory_utilization_ratio{{{GP}}}", "GPU {{gpu}} memory"),
    ], unit="percentunit", minv=0, maxv=1, desc="MIG devices report no utilization (no series, not zero)."))
    L.add(ts("Power vs limit", [
        tgt(f"isaacd_gpu_power_watts{{{GP}}}", "GPU {{gpu}}"),
        tgt(f"isaacd_gpu_power_limit_watts{{{GP}}}", "GPU {{gpu}} limit"),
    ], unit="watt", dashed="/limit/"))
    L.add(ts("Clocks", [
        tgt(f"isaacd_gpu_sm_clock_hertz{{{GP}}}", "GPU {{gpu}} SM"),
        tgt(f"isaacd_gpu_memory_clock_hertz{{{GP}}}", "GPU {{gpu}} memory"),
        tgt(f"isaacd_gpu_sm_clock_max_hertz{{{GP}}}", "GPU {{gpu}} SM max"),
    ], unit="hertz", dashed="/max/"))
    L.add(ts("Throttle (clock event) reasons",
             [tgt(f'isaacd_gpu_clock_event_reason{{{GP},reason!="gpu_idle"}} == 1', "GPU {{gpu}} {{reason}}")],
             unit="none", stepped=True, minv=0, maxv=1,
             desc="A line at 1 while a reason is active: power cap, SW/HW thermal slowdown, HW slowdown, power brake."),
          w=12)
    L.add(ts("Memory used", [
        tgt(f"isaacd_gpu_memory_used_bytes{{{GP}}}", "GPU {{gpu}}"),
        tgt(f"isaacd_gpu_memory_total_bytes{{{GP}}}", "GPU {{gpu}} total"),
    ], unit="bytes", dashed="/total/"), w=12)
    L.add(ts("Memory by process", [tgt(f"isaacd_gpu_process_memory_used_bytes{{{GP}}}",
                                       "GPU {{gpu}} pid {{pid}} {{job}}")], unit="bytes"))
    L.add(table("XID errors", [
        tgt(f"isaacd_gpu_xid_errors_total{{{GP}}}", instant=True, fmt="table"),
    ], desc="Count per XID code since isaacd started; class: application (restart the job), reset, reboot.",
        hide=("job", "model", "pci_bus_id")))
    L.add(ts("Time since last XID", [tgt(f"time() - isaacd_gpu_xid_last_timestamp_seconds{{{GP}}}",
                                         "GPU {{gpu}} XID {{xid}} ({{class}})")], unit="s"))
    L.add(ts("ECC errors", [
        tgt(f"isaacd_gpu_ecc_errors_total{{{GP}}}", "GPU {{gpu}} {{type}} (since driver load)"),
        tgt(f"isaacd_gpu_ecc_errors_aggregate_total{{{GP}}}", "GPU {{gpu}} {{type}} (lifetime)"),
    ], unit="none", stepped=True))
    L.add(ts("Remapped rows", [
        tgt(f"isaacd_gpu_remapped_rows_total{{{GP}}}", "GPU {{gpu}} {{cause}}"),
        tgt(f"isaacd_gpu_row_remap_pending{{{GP}}}", "GPU {{gpu}} pending"),
        tgt(f"isaacd_gpu_row_remap_failure{{{GP}}}", "GPU {{gpu}} failure"),
    ], unit="none", stepped=True))
    L.add(ts("GPU answering / unhealthy", [
        tgt(f"isaacd_gpu_up{{{GP}}}", "GPU {{gpu}} up"),
        tgt(f"isaacd_gpu_unhealthy{{{GP}}}", "GPU {{gpu}} unhealthy: {{reason}}"),
    ], unit="none", stepped=True, minv=0, maxv=1))
    L.add(ts("PCIe throughput", [tgt(f"isaacd_gpu_pcie_throughput_bytes_per_second{{{GP}}}",
                                     "GPU {{gpu}} {{direction}}")], unit="Bps"))
    L.add(ts("Energy (average power)", [tgt(f"rate(isaacd_gpu_energy_joules_total{{{GP}}}[$__rate_interval])",
                                            "GPU {{gpu}}")], unit="watt"))
    L.add(table("GPUs", [tgt(f"isaacd_gpu_info{{{GP}}}", instant=True, fmt="table")], hide=("Value", "job")))

    # ------------------------------------------------------------------ isaacd itself
    L.row("isaacd")
    L.add(ts("Sampler pass duration (p99)", [tgt(
        "histogram_quantile(0.99, sum by (le, instance, loop) "
        f"(rate(isaacd_gpu_sample_duration_seconds_bucket{{{I}}}[$__rate_interval])))", "{{instance}} {{loop}}")],
        unit="s"))
    L.add(ts("Collector errors", [tgt(f"isaacd_gpu_collector_errors_total{{{I}}}",
                                      "GPU {{gpu}} {{field}} {{error}}")], unit="none", stepped=True))
    L.add(ts("Scrape errors and config reloads", [
        tgt(f"isaacd_scrape_errors_total{{{I}}}", "scrape errors ({{source}})"),
        tgt(f"isaacd_config_reloads_total{{{I}}}", "config reloads"),
        tgt(f"isaacd_config_errors_total{{{I}}}", "rejected configs"),
    ], unit="none", stepped=True))
    L.add(table("Versions", [
        tgt(f"isaacd_build_info{{{I}}}", instant=True, fmt="table"),
        tgt(f"isaacd_gpu_driver_info{{{I}}}", instant=True, fmt="table"),
    ], hide=("Value", "job")), w=24, h=5)

    def var(name: str, label: str, query: str) -> dict[str, Any]:
        return {"name": name, "label": label, "type": "query", "datasource": DS,
                "query": {"query": query, "refId": f"var-{name}"}, "definition": query,
                "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
                "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "sort": 3}

    return {
        "uid": "isaacd",
        "title": "isaacd: GPUs and training",
        "description": "Isaac Lab / rsl_rl training supervised by isaacd: job progress, restarts, watchdogs, and "
                       "per-GPU health (thermal, throttle, power, memory, XID, ECC). Metrics: docs/metrics.md.",
        "tags": ["isaacd", "gpu", "isaac-lab", "rsl-rl"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "annotations": {"list": [
            {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
             "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"},
        ]},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0, "refresh": 1, "regex": ""},
            var("instance", "Host", "label_values(isaacd_build_info, instance)"),
            var("job", "Job", 'label_values(isaacd_job_info{instance=~"$instance"}, job)'),
            var("gpu", "GPU", 'label_values(isaacd_gpu_info{instance=~"$instance"}, gpu)'),
        ]},
        "panels": L.panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python3 {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
