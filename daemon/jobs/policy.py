"""Policy as pure functions: the backoff ladder, the crash-loop window, the rollback bound, the CUDA out-of-memory
step-down, and which jobs a supervisor shutdown stops."""

from __future__ import annotations

from typing import Protocol

from .model import JobState


class RestartLimits(Protocol):
    """The fields of config.RestartPolicy the decisions read."""

    max_restarts: int
    window: float
    backoff_initial: float
    backoff_max: float
    backoff_factor: float
    reset_after: float
    first_restart_immediate: bool


def quick_failures_after(previous: int, ran_seconds: float, moved_forward: bool, policy: RestartLimits) -> int:
    """Consecutive quick failures, counting the attempt that just ended: 1 when it ran `reset_after` seconds or
    saved a newer checkpoint (a crash once a day is no crash loop), else one more than before."""
    if ran_seconds >= policy.reset_after or moved_forward:
        return 1
    return previous + 1


def backoff_delay(quick_failures: int, policy: RestartLimits) -> float:
    """0 for the first failure when `first_restart_immediate`; then exponential from backoff_initial, capped."""
    steps = quick_failures - 1
    if policy.first_restart_immediate:
        if steps <= 0:
            return 0.0
        steps -= 1
    return min(policy.backoff_initial * policy.backoff_factor ** max(steps, 0), policy.backoff_max)


def restarts_in_window(restart_times: tuple[float, ...], now: float, policy: RestartLimits) -> tuple[float, ...]:
    return tuple(t for t in restart_times if now - t <= policy.window)


def restart_limit_reached(restart_times: tuple[float, ...], now: float, policy: RestartLimits) -> bool:
    return len(restarts_in_window(restart_times, now, policy)) >= policy.max_restarts


# rollbacks to an earlier checkpoint before a watchdog's trip stops the job instead: the divergence watchdog's
# default ([jobs.watchdogs.divergence] max_rollbacks) and the bound a trip carries when its watchdog has no such key
DEFAULT_MAX_ROLLBACKS = 3


def rollback_allowed(rollbacks_done: int, max_rollbacks: int) -> bool:
    return rollbacks_done < max_rollbacks


# ---- CUDA out of memory (issue 23) -------------------------------------------------------------
# A start-up that ran out of GPU memory is tried once more at the same num_envs (a neighbour may have freed its
# memory since); a second one at that size would fail the same way again, minutes of start-up apiece.
STARTUP_OOM_RETRIES = 1


class OomLimits(Protocol):
    """The fields of config.OomPolicy the decisions read."""

    step_down: float | None
    min_num_envs: int | None


def num_envs_in_use(stepped: int | None, stepped_from: int | None, configured: int) -> int:
    """The num_envs a launch uses: the stepped-down count, while the configured one is still the count it was
    stepped down from (a config that changes num_envs starts over from the new value)."""
    if stepped is None or stepped_from != configured:
        return configured
    return stepped


def next_num_envs(current: int, limits: OomLimits) -> int | None:
    """After a start-up OOM at `current` envs: the smaller count to try, or None (step-down off, or at the floor)."""
    if limits.step_down is None:
        return None
    smaller = max(limits.min_num_envs or 1, int(current * limits.step_down))
    return smaller if smaller < current else None


# ---- supervisor shutdown -------------------------------------------------------------------------
def stopped_at_shutdown(runtime: str, state: JobState) -> bool:
    """A shutdown stops (SIGINT, grace, SIGKILL) the trainers that are the supervisor's own children: the process
    runtime's, while one may run. A container job keeps running in its own unit and the next supervisor adopts it."""
    return runtime == "process" and state.active
