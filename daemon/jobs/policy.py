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


def rollback_allowed(rollbacks_done: int, max_rollbacks: int) -> bool:
    return rollbacks_done < max_rollbacks
