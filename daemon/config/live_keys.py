"""Which of a job's keys a reload puts in force at once, and how a changed job reads (`isaacd reload`'s answer and
the `config_changed` event). Pure, and free of pydantic: the client renders the answer with it (tests/test_cli.py
keeps client commands off the daemon's stack)."""

from __future__ import annotations

from collections.abc import Collection

NOW = "now"
NEXT_START = "next start"  # a job's key read at its trainer's launch

# A job's keys read from its config in force at each tick or message, so a reload's change is in force at once; every
# other job key is read when its trainer launches, and applies at its next start. (A key a later change makes live
# belongs here, or `isaacd reload` tells a user to restart a job for nothing: it said so of [jobs.eval] until
# 2026-12-07, which the eval keeper had always read each tick.)
JOB_KEYS_NOW = {
    "eval": "attempt/evals.py: the eval keeper's tick",
    "watchdogs": "watchdogs/engine.py: rebuilt when they change",
    "restart": "runner.handle_message: the machine's context",
    # not stop_timeout: the supervisor's own stop deadline reads it live, but a container's --stop-timeout and a
    # unit's TimeoutStopSec are written at its launch (runtimes/container_spec.py, quadlet.py)
    "priority": "jobs/queue_entry.py: the queue's order, from the job as written",
    "preemptible": "jobs/queue_entry.py",
}


def job_key_applies(key: str) -> str:
    """NOW for a job key read live (JOB_KEYS_NOW, by its top-level name), else NEXT_START."""
    return NOW if key.partition(".")[0] in JOB_KEYS_NOW else NEXT_START


def split_keys(keys: Collection[str]) -> tuple[list[str], list[str]]:
    """A changed job's keys: (those in force now, those that wait for its next start), each in the given order."""
    now = [k for k in keys if job_key_applies(k) == NOW]
    return now, [k for k in keys if k not in now]


def job_change_lines(job: str, keys: Collection[str]) -> list[str]:
    """How a changed job's keys read: those in force now, and those that wait for its next start (one line each)."""
    now, later = split_keys(keys)
    lines = []
    if later or not now:
        what = f" ({', '.join(later)})" if later else ""
        lines.append(f"{job} changed{what}: applies at its next start; `isaacd restart {job}` applies it now")
    if now:
        lines.append(f"{job} changed ({', '.join(now)}): in force now")
    return lines


def job_change_detail(keys: Collection[str]) -> str:
    """The `config_changed` event's detail: "applies at the next start; `isaacd restart` applies it now" where any
    key waits for the next start, "eval.every in force now" for those that do not."""
    now, later = split_keys(keys)
    parts = []
    if later or not now:
        parts.append(f"{', '.join(later) + ' ' if later and now else ''}applies at the next start; "
                     "`isaacd restart` applies it now")
    if now:
        parts.append(f"{', '.join(now)} in force now")
    return "; ".join(parts)
