"""Restart policy as pure functions: the backoff ladder, the crash-loop window, the rollback bound."""

from __future__ import annotations

from typing import Protocol


class RestartLimits(Protocol):
    """The fields of config.RestartPolicy the decisions read."""

    max_restarts: int
    window: float
    backoff_initial: float
    backoff_max: float
    backoff_factor: float
    reset_after: float


def quick_failures_after(previous: int, ran_seconds: float, moved_forward: bool, policy: RestartLimits) -> int:
    """Consecutive attempts that neither ran `reset_after` seconds nor saved a newer checkpoint, counting the
    one that just ended. One that made progress resets the ladder: a crash once a day is no crash loop."""
    if ran_seconds >= policy.reset_after or moved_forward:
        return 0
    return previous + 1


def backoff_delay(quick_failures: int, policy: RestartLimits) -> float:
    """Exponential in the consecutive quick failures; the first one waits backoff_initial."""
    return min(policy.backoff_initial * policy.backoff_factor ** max(quick_failures - 1, 0), policy.backoff_max)


def restarts_in_window(restart_times: tuple[float, ...], now: float, policy: RestartLimits) -> tuple[float, ...]:
    return tuple(t for t in restart_times if now - t <= policy.window)


def restart_limit_reached(restart_times: tuple[float, ...], now: float, policy: RestartLimits) -> bool:
    return len(restarts_in_window(restart_times, now, policy)) >= policy.max_restarts


def rollback_allowed(rollbacks_done: int, max_rollbacks: int) -> bool:
    return rollbacks_done < max_rollbacks
