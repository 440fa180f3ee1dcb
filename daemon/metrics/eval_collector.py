"""Checkpoint evaluations in /metrics (issue 41): each job with `[jobs.eval]`, its newest and best evaluation score,
the newest's success rate (where the task logs one) and iteration, and its evaluations by outcome. Like the rest of
/metrics it reads only the published status (`JobStatus.evals`, an evals/types.py `EvalsStatus`); what it exports is
defined in catalog.py. A job without `[jobs.eval]` has no series; one whose evaluations have no result yet has only
its counters (never a fake 0 score)."""

from __future__ import annotations

from ..evals.types import EvalsStatus
from .families import Families, num

# isaacd_job_evals_total's outcomes, every one from 0 so increase() sees the first: an evaluation that finished with
# a score, an attempt that failed (crashed, killed at its deadline, a checkpoint that does not load; retried), a
# checkpoint given up after its retries
EVAL_OUTCOMES = ("done", "failed", "given_up")


def collect_evals(f: Families, name: str, ev: EvalsStatus | None) -> None:
    """One job's evaluation series; nothing for a job without [jobs.eval] (`ev` None)."""
    if ev is None:
        return
    if ev.last is not None:
        f.add("isaacd_job_eval_return", [name], num(ev.last.return_mean))
        f.add("isaacd_job_eval_success_rate", [name], num(ev.last.success_rate))  # None: the task logs none
        f.add("isaacd_job_eval_iteration", [name], num(ev.last.iteration))
    if ev.best is not None:
        f.add("isaacd_job_eval_best_return", [name], num(ev.best.return_mean))
    if ev.cost_seconds is not None:
        f.add("isaacd_job_eval_training_cost_seconds", [name], num(ev.cost_seconds))
    counts = {"done": ev.done, "failed": ev.failed, "given_up": len(ev.given_up)}
    for outcome in EVAL_OUTCOMES:
        f.add("isaacd_job_evals_total", [name, outcome], num(counts[outcome]))
