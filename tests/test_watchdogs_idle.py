"""A job with no trainer shows its watchdogs as idle, not ok (daemon/watchdogs/engine.py `job_status`, issue 37):
`isaacd status` once said `no_progress ok` for a job that waited in the queue and was watched by nothing."""

from __future__ import annotations

from pathlib import Path

from helpers import NoGpus, write_config

from isaacd.cli.render import _watchdog_notes
from isaacd.config.schema import load_config
from isaacd.jobs.model import JobState
from isaacd.status.signals import JobSignals
from isaacd.status.types import JobStatus, WatchdogState
from isaacd.watchdogs.engine import WatchdogEngine


def engine_after_a_tick(tmp_path: Path, state: JobState) -> WatchdogEngine:
    cfg = load_config(write_config(tmp_path, '[[jobs]]\nname = "a"\n'))
    engine = WatchdogEngine(NoGpus())
    alive = state in (JobState.STARTING, JobState.RUNNING)
    engine.tick(100.0, [JobSignals(name="a", cfg=cfg.jobs[0], alive=alive, attempt=1 if alive else 0,
                                   attempt_started_at=0.0 if alive else None, first_step=None, iteration=None,
                                   last_progress_time=None, state=state)])
    return engine


def test_a_queued_jobs_watchdogs_read_idle_naming_the_state_not_ok(tmp_path: Path):
    row = engine_after_a_tick(tmp_path, JobState.QUEUED).job_status(JobStatus(name="a", state="queued"))
    assert row.watchdogs["no_progress"].state == WatchdogState.IDLE
    assert row.watchdogs["no_progress"].detail == "not watching: the job is queued"
    assert row.watchdogs["xid"].state == WatchdogState.OK  # it watches the GPUs, trainer or not
    assert _watchdog_notes(row, 0.0) == ["  a watchdogs: idle (the job is queued: no trainer to watch); xid ok"]


def test_a_stopped_jobs_watchdogs_are_idle_and_say_so_in_one_line(tmp_path: Path):
    row = engine_after_a_tick(tmp_path, JobState.STOPPED).job_status(JobStatus(name="a", state="stopped"))
    only_trainer = {n: w for n, w in row.watchdogs.items() if n != "xid"}
    assert {w.state for w in only_trainer.values()} <= {WatchdogState.IDLE, WatchdogState.DISABLED}
    row = JobStatus(name="a", state="stopped", watchdogs=only_trainer)
    assert _watchdog_notes(row, 0.0) == ["  a watchdogs: idle (the job is stopped: no trainer to watch)"]


def test_a_running_jobs_watchdogs_keep_their_own_state(tmp_path: Path):
    row = engine_after_a_tick(tmp_path, JobState.RUNNING).job_status(JobStatus(name="a", state="running"))
    assert row.watchdogs["no_progress"].state in (WatchdogState.OK, WatchdogState.WARMUP)
