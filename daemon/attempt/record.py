"""The job's saved document and its journal: the history (facts: attempts, run dirs, exits) and the model
(decisions: jobs/model.py), saved together in one document, the model being the only copy of the counters and
the resting state. An older document (no `machine`, its counters as fields of their own: store.LegacyCounters)
is turned into a model here once; the next save writes the new format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..clock import Clock
from ..jobs.model import JobModel, legacy_state, rebased
from ..daemon_log import log
from ..history.rebuild import load_history
from ..history.store import Attempt, JobHistory, LegacyCounters, StateStore
from .setting import JobSetting

WARN_EVENTS = {"failed", "checkpoint_rejected", "config_rejected", "resume_mismatch", "start_failed",
               "tensorboard_damaged", "state_save_failed", "stop_timeout", "cuda_oom", "num_envs_stepped_down"}


class JobRecord:
    def __init__(self, setting: JobSetting, store: StateStore, state_dir: Path, clock: Clock):
        self.name = setting.cfg.name
        self.store, self.clock = store, clock
        self.log = log.bind(job=self.name)
        self.history: JobHistory = load_history(store, setting.cfg, state_dir)  # rebuilt from disk if damaged
        self.model: JobModel = model_from_history(self.history, clock, setting.cfg.stop_timeout, self.log)
        self.persist_error: str | None = None  # the last failed save, until a save succeeds
        self.dirty = False  # a save failed: retried every tick

    def persist(self) -> bool:
        """Save history + model. A failure (disk full, fds exhausted) is reported once per distinct error and
        retried every tick; the caller decides whether to act without it (a launch does not)."""
        h = self.history
        h.machine, h.boot_id, h.legacy = self.model.to_json(), self.clock.boot_id, None  # migrated, if it was old
        try:
            self.store.save(h)
        except OSError as exc:
            self.dirty = True
            problem = f"cannot save the job's state in {self.store.jobs_dir}: {exc.strerror or exc}"
            if problem != self.persist_error:
                self.persist_error = problem
                self.event("state_save_failed", error=problem, detail="retrying every tick")
            return False
        self.dirty = False
        if self.persist_error is not None:
            self.persist_error = None
            self.event("state_saved", detail="the job's state is on disk again")
        return True

    def event(self, event: str, **fields: Any) -> None:
        level = "warning" if event in WARN_EVENTS or (
            event == "exited" and not (fields.get("code") == 0 or fields.get("requested"))) else "info"
        getattr(self.log, level)(event, **fields)
        try:
            self.store.append_event(self.name, event, **fields)
        except OSError as exc:  # a full state disk must not stop the job's care; the log above has it
            self.log.error("journal_append_failed", journal_event=event, error=str(exc))

    def never_started(self, attempt: Attempt, why: str) -> None:
        """Close an attempt no trainer ever ran for (so it is no open attempt to adopt)."""
        attempt.ended_at = self.clock.wall()
        attempt.exit = {"code": None, "signal": None, "oom_killed": False, "external_stop": False, "description": why}


def model_from_history(h: JobHistory, clock: Clock, stop_timeout: float, logger: Any = log) -> JobModel:
    """The saved model, rebased when the machine rebooted since; or one derived from an older document."""
    now = clock.monotonic()
    if h.machine is not None:
        try:
            m = JobModel.from_json(h.machine)
        except (KeyError, TypeError, ValueError) as exc:
            logger.error("job_model_damaged", error=str(exc), detail="derived again from the history")
        else:
            return m if h.boot_id == clock.boot_id else rebased(m, now, stop_timeout)
    return _model_from_legacy(h, h.legacy or LegacyCounters(), now, clock.wall())


def _model_from_legacy(h: JobHistory, old: LegacyCounters, now: float, wall: float) -> JobModel:
    """A history written before the state machine (or rebuilt from the journal): its counters and resting state."""
    m = JobModel(restarts=old.restarts, restart_times=tuple(now - max(wall - t, 0.0) for t in old.restart_times),
                 restarts_by_reason=tuple(sorted(old.restarts_by_reason.items())),
                 last_restart_reason=old.last_restart_reason, rollbacks=old.rollbacks,
                 watchdog_trips=tuple(sorted(old.watchdog_trips.items())))
    cur = h.current
    open_trainer = cur is not None and cur.exit is None and bool(cur.handle or cur.token)
    return legacy_state(m, open_trainer, old.final_state, old.final_reason)  # the state is jobs/model.py's to say
