"""The metrics' label values are the enums' values: every member of JobState, WatchdogState, OomPhase and
ReasonClass shows up in /metrics (series from 0, and the HELP text of the state gauges), so a new member
cannot be missed by a copied list, and a str-valued enum never leaks its class name into a label or the JSON."""

from __future__ import annotations

import json
from dataclasses import replace

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from isaacd.cli.render import format_status
from isaacd.jobs.messages import ReasonClass
from isaacd.jobs.model import JobState, OomPhase
from isaacd.metrics import build_registry
from isaacd.status.types import Status, WatchdogState, WatchdogStatus
from metrics_fakes import fake_job, fake_status


def scrape(status):
    families = {f.name: f for f in text_string_to_metric_families(
        generate_latest(build_registry(lambda: status, None, process_metrics=False)).decode())}
    return families


def label_values(fam, label, **where):
    return {s.labels[label] for s in fam.samples if all(s.labels.get(k) == v for k, v in where.items())}


def test_every_enum_member_is_a_label_value_and_in_the_help():
    ray = fake_job("r")
    ray["runtime"] = "ray"
    fams = scrape(fake_status([fake_job("a"), ray]))
    assert label_values(fams["isaacd_job_state"], "state", job="a") == {s.value for s in JobState}
    assert label_values(fams["isaacd_watchdog_state"], "state", job="a", watchdog="no_progress") == \
        {s.value for s in WatchdogState}
    assert label_values(fams["isaacd_job_cuda_ooms"], "phase", job="a") == {p.value for p in OomPhase}
    # every reason a restart is counted under starts at 0; config_error never restarts, node_lost is Ray's alone
    restart_reasons = {r.value for r in ReasonClass} - {ReasonClass.CONFIG_ERROR.value}
    assert label_values(fams["isaacd_job_restarts"], "reason", job="a") == \
        restart_reasons - {ReasonClass.NODE_LOST.value}
    assert label_values(fams["isaacd_job_restarts"], "reason", job="r") == restart_reasons
    for fam, enum in (("isaacd_job_state", JobState), ("isaacd_watchdog_state", WatchdogState)):
        assert f"({', '.join(m.value for m in enum)})" in fams[fam].documentation


def test_typed_states_are_the_bare_words_in_metrics_json_and_status():
    job = fake_job("a", state="running")
    job["watchdogs"] = {"no_progress": {"state": "pending", "since": 1.0}}
    typed = Status.from_json(fake_status([job]))
    wd = WatchdogStatus(state=WatchdogState.TRIPPED, since=2.0, detail="no progress for 600 s", action="restart")
    status = replace(typed, jobs=(replace(typed.jobs[0], state=JobState.RUNNING, watchdogs={"no_progress": wd}),))
    fams = scrape(status)
    assert {s.labels["state"] for s in fams["isaacd_watchdog_state"].samples if s.value == 1} == {"tripped"}
    assert {s.labels["state"] for s in fams["isaacd_job_state"].samples if s.value == 1} == {"running"}
    assert '"state": "tripped"' in json.dumps(wd.to_json())
    assert "no_progress TRIPPED" in format_status(status, now=3.0)
