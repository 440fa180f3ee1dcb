"""The job state machine: one explicit table of allowed transitions.

    pending ──start──▶ starting ──trainer up──▶ running ──exit 0 at max_iterations──▶ completed
       ▲                  │                       │  │
       │                  └──────exit/crash───────┤  └──stop──▶ stopping ──▶ stopped
       │                                          ▼
       └──────backoff elapsed────────────── backing-off ──restart limit──▶ failed

Anything not in TRANSITIONS is a bug, raised as InvalidTransition rather than silently applied.
"""

from __future__ import annotations

import enum


class JobState(str, enum.Enum):
    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    BACKING_OFF = "backing-off"
    STOPPING = "stopping"
    STOPPED = "stopped"
    COMPLETED = "completed"
    FAILED = "failed"

    @property
    def active(self) -> bool:
        """A trainer process/container exists (or may exist) for the job."""
        return self in (JobState.STARTING, JobState.RUNNING, JobState.STOPPING)

    @property
    def terminal(self) -> bool:
        return self in (JobState.STOPPED, JobState.COMPLETED, JobState.FAILED)


S = JobState
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    S.PENDING: frozenset({S.STARTING, S.STOPPED, S.FAILED, S.COMPLETED}),
    S.STARTING: frozenset({S.RUNNING, S.BACKING_OFF, S.FAILED, S.STOPPING, S.COMPLETED, S.STOPPED}),
    S.RUNNING: frozenset({S.BACKING_OFF, S.COMPLETED, S.FAILED, S.STOPPING, S.STOPPED}),
    S.BACKING_OFF: frozenset({S.STARTING, S.STOPPED, S.FAILED, S.COMPLETED}),
    S.STOPPING: frozenset({S.STOPPED, S.BACKING_OFF, S.COMPLETED, S.FAILED}),
    S.STOPPED: frozenset({S.PENDING, S.STARTING}),
    S.COMPLETED: frozenset({S.PENDING, S.STARTING}),
    S.FAILED: frozenset({S.PENDING, S.STARTING}),
}


class InvalidTransition(RuntimeError):
    pass


def check_transition(job: str, old: JobState, new: JobState) -> None:
    if new not in TRANSITIONS[old]:
        raise InvalidTransition(f"job {job}: {old.value} -> {new.value} is not an allowed transition")
