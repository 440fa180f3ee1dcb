"""A job's watchdog statuses and its row are made again only when something in them changed (watchdogs/base.py
`status`, engine.py `job_status`; issue 39: 1,000 queued jobs' rows were copied at every publish), and then they are."""

from __future__ import annotations

from pathlib import Path

from helpers import NoGpus, write_config

from isaacd.config.schema import load_config
from isaacd.jobs.model import JobState
from isaacd.status.signals import JobSignals
from isaacd.status.types import JobStatus, WatchdogState
from isaacd.watchdogs.engine import WatchdogEngine


def signals(cfg, state: JobState, now: float) -> list[JobSignals]:  # noqa: ANN001
    alive = state in (JobState.STARTING, JobState.RUNNING)
    return [JobSignals(name="a", cfg=cfg, alive=alive, attempt=1 if alive else 0, attempt_started_at=0.0 if alive
                       else None, first_step=None, iteration=None, last_progress_time=None, state=state)]


def test_the_rows_watchdogs_follow_each_change_of_state_and_of_the_row(tmp_path: Path):
    cfg = load_config(write_config(tmp_path, '[[jobs]]\nname = "a"\n[jobs.watchdogs.no_progress]\n'
                                             'warmup_seconds = 0\ntimeout = 60\nhold = 0\n')).jobs[0]
    engine = WatchdogEngine(NoGpus())
    engine.tick(100.0, signals(cfg, JobState.QUEUED, 100.0))
    queued = JobStatus(name="a", state="queued")
    first = engine.job_status(queued)
    assert first.watchdogs["no_progress"].state == WatchdogState.IDLE
    assert engine.job_status(JobStatus(name="a", state="queued")) is first  # nothing changed: the same row
    assert engine.job_status(JobStatus(name="a", state="queued", restarts=1)).restarts == 1  # the row changed
    # it runs and makes no progress past the timeout: the watchdog trips, and the row says so at once
    engine.tick(200.0, signals(cfg, JobState.RUNNING, 200.0))
    tripped = engine.job_status(JobStatus(name="a", state="running")).watchdogs["no_progress"]
    assert tripped.state == WatchdogState.TRIPPED and tripped.since == 200.0
    engine.tick(210.0, signals(cfg, JobState.RUNNING, 210.0))  # within its cooldown
    assert engine.job_status(JobStatus(name="a", state="running")).watchdogs["no_progress"].state == \
        WatchdogState.COOLDOWN
    # back in the queue: idle again, naming the new state
    engine.tick(401.0, signals(cfg, JobState.QUEUED, 401.0))
    again = engine.job_status(JobStatus(name="a", state="queued")).watchdogs["no_progress"]
    assert again.state == WatchdogState.IDLE and again.detail == "not watching: the job is queued"


def test_a_row_remade_equal_is_known_by_identity_from_the_next_publish_on(tmp_path: Path):
    # the runner remakes a still job's row when the caches' sizes were walked: equal, another object. The engine's
    # answer is the same, and from then on the row is known by identity, not compared field by field and its
    # watchdogs asked again at every publish (~100 of 1,000 rows at every tick, issue 39's rest CPU)
    cfg = load_config(write_config(tmp_path, '[[jobs]]\nname = "a"\n[jobs.watchdogs.no_progress]\n'
                                             'warmup_seconds = 0\ntimeout = 60\nhold = 0\n')).jobs[0]
    engine = WatchdogEngine(NoGpus())
    engine.tick(100.0, signals(cfg, JobState.QUEUED, 100.0))
    first = engine.job_status(JobStatus(name="a", state="queued"))
    wd = engine.sets["a"][1]["no_progress"]
    asked = []
    status = wd.status
    wd.status = lambda: asked.append(1) or status()  # type: ignore[method-assign]
    remade = JobStatus(name="a", state="queued")
    assert engine.job_status(remade) is first and len(asked) == 1  # compared once: the same answer
    assert engine.job_status(remade) is first and engine.job_status(remade) is first
    assert len(asked) == 1  # then known by identity: the watchdog not asked again


def test_the_engine_names_a_job_whose_watchdogs_stepped_until_its_row_is_made_again(tmp_path: Path):
    # status/publishing.py sends a row through this hook again only when the hook names the job
    cfg = load_config(write_config(tmp_path, '[[jobs]]\nname = "a"\n[jobs.watchdogs.no_progress]\n'
                                             'warmup_seconds = 0\ntimeout = 60\nhold = 0\n')).jobs[0]
    engine = WatchdogEngine(NoGpus())
    queued = signals(cfg, JobState.QUEUED, 100.0)
    engine.tick(100.0, queued)
    assert engine.rows_changed() == {"a"}  # its watchdogs stepped: its part of the row may differ
    engine.job_status(JobStatus(name="a", state="queued"))
    assert engine.rows_changed() == set()
    engine.tick(100.2, queued)  # the same signals: asleep, not stepped
    assert engine.rows_changed() == set()
    engine.tick(200.0, signals(cfg, JobState.RUNNING, 200.0))  # it runs: stepped, and its row trips
    assert engine.rows_changed() == {"a"}
    assert engine.job_status(JobStatus(name="a", state="running")).watchdogs["no_progress"].state == \
        WatchdogState.TRIPPED
