"""`isaacd status` shows the num_envs in use against the configured one (issue 23: a [jobs.oom] step-down)."""

from __future__ import annotations

import re
import time

from isaacd.cli.render import format_status

NOW = time.time()


def status(**job) -> dict:  # noqa: ANN003
    row = {"name": "cp", "state": "running", "runtime": "process", "pid": 4242, "iteration": 9, "max_iterations": 300,
           "mean_reward": 1.0, "fps": 100.0, "checkpoint": None, "restarts": 2, "started_at": NOW - 5, **job}
    return {"supervisor": {"version": "0", "pid": 1, "started_at": NOW - 60, "config_path": "x.toml"}, "jobs": [row]}


def envs_column(text: str) -> str:
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("JOB "))
    row = next(ln for ln in lines if ln.startswith("cp "))
    return dict(zip(re.split(r"\s{2,}", header.strip()), re.split(r"\s{2,}", row.strip())))["ENVS"]


def test_stepped_down_job_shows_in_use_of_configured_and_how_to_go_back():
    out = format_status(status(num_envs=256, num_envs_configured=1024), NOW)
    assert envs_column(out) == "256 of 1024"
    assert ("  cp: num_envs 256 in use of 1024 configured, stepped down after CUDA out of memory at start-up; "
            "`isaacd restart cp` tries 1024 again") in out.splitlines()


def test_job_at_its_configured_count_shows_just_the_count():
    out = format_status(status(num_envs=1024, num_envs_configured=1024), NOW)
    assert envs_column(out) == "1024" and "stepped down" not in out


def test_an_older_supervisors_status_without_num_envs_reads():
    assert envs_column(format_status(status(), NOW)) == "-"
