#!/usr/bin/env python3
"""Generates etc/grafana/isaacd-dashboard.json with grafana-foundation-sdk, Grafana's own dashboards-as-code
library: panels, queries, variables and field configs are typed builders, so the JSON is Grafana's schema by
construction. Run it after editing; CI checks that the committed JSON is what this script produces, and
tests/test_prometheus_e2e.py runs every query in it against a real Prometheus scraping real isaacd daemons.

    .venv/bin/python etc/grafana/build_dashboard.py            # rewrite the JSON
    .venv/bin/python etc/grafana/build_dashboard.py --check    # exit 1 if the JSON is stale

The SDK is a test/dev dependency (`pip install -e '.[test]'`); the daemon does not need it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as pb
from grafana_foundation_sdk.builders import stat as statb
from grafana_foundation_sdk.builders import table as tableb
from grafana_foundation_sdk.builders import timeseries as tsb
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

OUT = Path(__file__).with_name("isaacd-dashboard.json")
LINE_AND_AREA = cm.GraphTresholdsStyleMode.LINE_AND_AREA  # sic: the SDK's enum is spelled "Tresholds"
DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

I = 'instance=~"$instance"'
J = f'{I},job=~"$job"'
GP = f'{I},gpu=~"$gpu"'


class Layout:
    """Rows and panels in order. The SDK places panels left to right and wraps at 24 columns; we only number
    them (Grafana needs unique ids) and give every panel and query the dashboard's data source variable."""

    def __init__(self, dash: db.Dashboard) -> None:
        self.dash = dash
        self.next_id = 1

    def _id(self) -> int:
        i = self.next_id
        self.next_id += 1
        return i

    def row(self, title: str) -> None:
        self.dash.with_row(db.Row(title).id(self._id()).collapsed(False))

    def add(self, panel: Any, w: int = 8, h: int = 8) -> None:
        self.dash.with_panel(panel.id(self._id()).span(w).height(h).datasource(DS))


def tgt(expr: str, legend: str = "", instant: bool = False, fmt: str = "time_series") -> pb.Dataquery:
    q = pb.Dataquery().expr(expr).legend_format(legend or "__auto").datasource(DS)
    q = q.instant() if instant else q.range()
    if fmt == "table":
        q = q.format(pm.PromQueryFormat.TABLE)
    return q


def _targets(panel: Any, targets: list[pb.Dataquery]) -> Any:
    for n, t in enumerate(targets):
        panel = panel.with_target(t.ref_id(chr(ord("A") + n)))
    return panel


def thresholds(*steps: tuple[str, float | None]) -> db.ThresholdsConfig:
    return db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(
        [dm.Threshold(value=v, color=c) for c, v in steps])


def ts(title: str, targets: list[pb.Dataquery], unit: str = "short", desc: str = "", *,
       line_at: float | None = None, dashed: str | None = None, stepped: bool = False,
       minv: float | None = None, maxv: float | None = None) -> tsb.Panel:
    p = (tsb.Panel().title(title).description(desc).unit(unit)
         .draw_style(cm.GraphDrawStyle.LINE).line_width(1).fill_opacity(0)
         .show_points(cm.VisibilityMode.NEVER).span_nulls(False)
         .legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.LIST)
                 .placement(cm.LegendPlacement.BOTTOM).show_legend(True))
         .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING)))
    if stepped:
        p = p.line_interpolation(cm.LineInterpolation.STEP_AFTER)
    if minv is not None:
        p = p.min(minv)
    if maxv is not None:
        p = p.max(maxv)
    if line_at is not None:
        p = (p.thresholds_style(cb.GraphThresholdsStyleConfig().mode(LINE_AND_AREA))
             .thresholds(thresholds(("transparent", None), ("red", line_at))))
    if dashed:
        p = p.override_by_regexp(dashed, [
            dm.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]}),
            dm.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "red"})])
    return _targets(p, targets)


def stat(title: str, targets: list[pb.Dataquery], unit: str = "short", desc: str = "", *,
         steps: tuple[tuple[str, float | None], ...] = (("green", None),), text_mode: str = "auto",
         mappings: dict[str, str] | None = None) -> statb.Panel:
    p = (statb.Panel().title(title).description(desc).unit(unit).thresholds(thresholds(*steps))
         .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
         .text_mode(cm.BigValueTextMode(text_mode)).color_mode(cm.BigValueColorMode.BACKGROUND)
         .graph_mode(cm.BigValueGraphMode.NONE))
    if mappings:
        p = p.mappings([dm.ValueMap(options={k: dm.ValueMappingResult(text=v) for k, v in mappings.items()})])
    return _targets(p, targets)


def table(title: str, targets: list[pb.Dataquery], desc: str = "", hide: tuple[str, ...] = ()) -> tableb.Panel:
    excl = {k: True for k in ("Time", "__name__", *hide)}
    p = (tableb.Panel().title(title).description(desc).show_header(True)
         .with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
         .with_transformation(dm.DataTransformerConfig(id_val="organize", options={"excludeByName": excl})))
    return _targets(p, targets)


def build() -> dm.Dashboard:
    dash = (db.Dashboard("isaacd: GPUs and training").uid("isaacd")
            .description("Isaac Lab / rsl_rl training supervised by isaacd: job progress, restarts, watchdogs, and "
                         "per-GPU health (thermal, throttle, power, memory, XID, ECC). Metrics: docs/metrics.md.")
            .tags(["isaacd", "gpu", "isaac-lab", "rsl-rl"]).editable().tooltip(dm.DashboardCursorSync.CROSSHAIR)
            .refresh("30s").version(1).time("now-6h", "now")
            .annotation(db.AnnotationQuery().name("Annotations & Alerts").enable(True).hide(True)
                        .datasource(dm.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
                        .icon_color("rgba(0, 211, 255, 1)").type("dashboard"))
            .with_variable(db.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
            .with_variable(_var("instance", "Host", "label_values(isaacd_build_info, instance)"))
            # Ray clusters: the node a job's trainer runs on (isaacd_job_info's node label; "" for one-host runtimes,
            # which "All" = ".*" still matches); picking a node narrows the jobs
            .with_variable(_var("node", "Node", 'label_values(isaacd_job_info{instance=~"$instance"}, node)'))
            .with_variable(_var("job", "Job",
                                'label_values(isaacd_job_info{instance=~"$instance",node=~"$node"}, job)'))
            .with_variable(_var("gpu", "GPU", 'label_values(isaacd_gpu_info{instance=~"$instance"}, gpu)')))
    L = Layout(dash)
    # ------------------------------------------------------------------ overview
    L.row("Overview")
    L.add(stat("Jobs running", [tgt(f'sum(isaacd_job_state{{{I},state="running"}})', instant=True)],
               steps=(("red", None), ("green", 1))), w=4, h=4)
    L.add(stat("Jobs failed", [tgt(f'sum(isaacd_job_state{{{I},state="failed"}})', instant=True)],
               steps=(("green", None), ("red", 1))), w=4, h=4)
    L.add(stat("GPU collector", [tgt(f"min(isaacd_gpu_collector_up{{{I}}})", instant=True)],
               desc="0: NVML unavailable (reason in the isaacd log) or [gpu] source = \"none\".",
               steps=(("red", None), ("green", 1)),
               mappings={"0": "DOWN", "1": "UP"}), w=4, h=4)
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

    # ------------------------------------------------------------------ the host's queue (issue 31)
    L.row("Queue")
    L.add(ts("Queued jobs by priority",
             [tgt(f"sum by (instance, priority) (isaacd_queue_jobs{{{I}}})", "{{instance}} priority {{priority}}")],
             unit="none", stepped=True, minv=0,
             desc="Jobs waiting for the GPUs they asked for (gpus = N or gpu_memory); `isaacd queue` lists them "
                  "in order, with why each waits."))
    L.add(ts("Longest wait by priority",
             [tgt(f"max by (instance, priority) (isaacd_queue_wait_seconds{{{J}}})",
                  "{{instance}} priority {{priority}}")], unit="s", line_at=1800,
             desc="Since each waiting job last entered the queue (its submission, or its requeue after a "
                  "preemption). Alert IsaacdJobQueuedTooLong fires for a job above 30 minutes."))
    L.add(ts("Preemptions per hour",
             [tgt(f"sum by (instance, job) (rate(isaacd_job_preemptions_total{{{J}}}[$__rate_interval])) * 3600",
                  "{{job}}")], unit="none", minv=0,
             desc="Jobs stopped with a save at an iteration boundary to make room for a higher priority, and "
                  "queued again (0 iterations lost)."))
    L.add(ts("GPU memory: allocated by the queue vs idle", [
        tgt(f"isaacd_gpu_memory_allocated_bytes{{{GP}}}", "GPU {{gpu}} allocated"),
        tgt(f"isaacd_gpu_memory_idle_bytes{{{GP}}}", "GPU {{gpu}} idle"),
        tgt(f"isaacd_gpu_memory_total_bytes{{{GP}}}", "GPU {{gpu}} total"),
    ], unit="bytes", dashed="/total/", minv=0,
        desc="Allocated: what the placed jobs asked for (a whole-GPU job: all of it). Idle: neither allocated nor "
             "in use (total - max(allocated, used)): room the queue could give a waiting job unless the GPU is "
             "pinned, cordoned or hot."), w=24)

    # ------------------------------------------------------------------ sweeps (issue 39)
    L.row("Sweeps")
    L.add(ts("Sweep trials by state",
             [tgt(f"sum by (instance, sweep, state) (isaacd_sweep_trials{{{I}}})", "{{sweep}} {{state}}")],
             unit="none", stepped=True, minv=0,
             desc="Each sweep's trials: pending (not launched yet), running (holding one of the sweep's concurrency "
                  "places: queued, starting or training), paused (by ASHA at a rung, with a save: no GPU until "
                  "promoted), completed, failed, cancelled. `isaacd sweep status NAME` lists them, the best first."))
    L.add(ts("Best objective by sweep",
             [tgt(f"isaacd_sweep_best_objective{{{I}}}", "{{sweep}}")], unit="none",
             desc="The objective of each sweep's best trial (its TensorBoard tag, smoothed over the last N logged "
                  "iterations); none until a trial reaches its first rung. `isaacd sweep best NAME > best.toml` "
                  "writes that trial as a job file."))
    L.add(ts("Sweep GPU time (GPU-hours)",
             [tgt(f"isaacd_sweep_gpu_seconds_total{{{I}}} / 3600", "{{sweep}}")], unit="none", minv=0,
             desc="GPU time each sweep's trials have held so far (a gpu_memory trial counts its share of a GPU); a "
                  "paused trial adds nothing, so ASHA's early pauses show as a flatter line."))

    # ------------------------------------------------------------------ checkpoint evaluations (issue 41)
    L.row("Evaluations")
    L.add(ts("Evaluation return: newest and best", [
        tgt(f"isaacd_job_eval_return{{{J}}}", "{{job}}"),
        tgt(f"isaacd_job_eval_best_return{{{J}}}", "{{job}} best"),
    ], unit="none", dashed="/best/", stepped=True,
        desc="Mean episode return of each job's newest evaluated checkpoint (played headless, deterministic "
             "actions, the same seed for every checkpoint: the scores compare) and, dashed, of its best, the one "
             "`isaacd best JOB` names. Unlike the training reward it carries no exploration noise."), w=12)
    L.add(ts("Evaluation success rate", [tgt(f"isaacd_job_eval_success_rate{{{J}}}", "{{job}}")],
             unit="percentunit", minv=0, maxv=1, stepped=True,
             desc="Success rate of the newest evaluation, for tasks that log one (Metrics/success_rate); none "
                  "for the others."), w=12)
    L.add(ts("Evaluation lag (iterations behind training)",
             [tgt(f"isaacd_job_iteration{{{J}}} - on(instance, job) isaacd_job_eval_iteration{{{J}}}", "{{job}}")],
             unit="none", minv=0,
             desc="How far the newest evaluated checkpoint is behind the iteration training has reached: it grows "
                  "between checkpoints and when evaluations fall behind (more than 3 waiting: the newest are "
                  "evaluated, the older skipped)."), w=12)
    L.add(ts("Evaluations by outcome (per hour)",
             [tgt(f"sum by (instance, job, outcome) (increase(isaacd_job_evals_total{{{J}}}[1h]))",
                  "{{job}} {{outcome}}")], unit="none", minv=0, stepped=True,
             desc="done: a score recorded; failed: an attempt crashed, passed its deadline or could not load its "
                  "checkpoint (retried); given_up: a checkpoint given up after its retries. Alert "
                  "IsaacdJobEvalsFailing: 3 failures in an hour and none done."), w=12)
    L.add(ts("Evaluation cost to training (seconds each)",
             [tgt(f"isaacd_job_eval_training_cost_seconds{{{J}}}", "{{job}}")], unit="s", stepped=True,
             desc="Training time one evaluation costs its job (the mean of the 5 newest measures: the trainer's "
                  "iterations' time while one ran, less as many usual iterations). The next evaluation waits so "
                  "that they cost at most [jobs.eval] max_training_cost of the training (0.5 % by default on the "
                  "job's GPU; docs/evals.md, Pacing). None for unpaced (CPU) evaluations."), w=24)

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
    return dash.build()


def _var(name: str, label: str, query: str) -> db.QueryVariable:
    # "All" is ".*" so every query's =~"$var" matcher works with it
    return (db.QueryVariable(name).label(label).datasource(DS).query(query)
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).include_all(True).multi(True).all_value(".*")
            .current(dm.VariableOption(selected=True, text=["All"], value=["$__all"]))
            .sort(dm.VariableSort.ALPHABETICAL_CASE_INSENSITIVE_ASC))


def render() -> str:
    return json.dumps(build(), cls=JSONEncoder, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run .venv/bin/python {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
