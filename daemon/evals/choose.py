"""Which checkpoint to evaluate next (issue 41; eval-design.md C). Pure: the eval keeper (attempt/evals.py) calls
`next_eval` when no evaluation runs, with the job's complete checkpoints (the trainer's own, model_N.pt: not isaacd's
per-iteration snapshots), its training reward by iteration, the job's record (record.py) and the wall clock.

The rules, each a test in tests/test_eval_choose.py:
- *every N*: the 1st, the N+1th, the 2N+1th ... complete checkpoint in order of iteration (the first gives the
  untrained baseline); *best*: each checkpoint whose training reward (the newest reward at or before its iteration)
  is above that of every earlier checkpoint (the first with a reward is chosen; a checkpoint with none yet is not).
- *oldest first*: of the chosen checkpoints not evaluated yet, the oldest ready one, so the curve fills in order.
- *newest few when behind*: a chosen checkpoint never attempted with `KEEP_NEWEST` (3) or more chosen checkpoints
  after it is skipped, so when more than 3 wait only the newest 3 are evaluated. This depends on nothing but what
  is written, so a skipped checkpoint stays skipped (the keeper also records it: `EvalRecord.skip`).
- *retry with backoff*: after the first failure the next attempt comes soon (2 s: a first crash is most often
  transient, killed from outside or out of memory while training grew), after k >= 2 failures it waits 30 s x 2^(k-2)
  after the last failure, at most 10 minutes; meanwhile newer ready checkpoints go first.
- *given up*: after `retries` failed attempts a checkpoint is never chosen again (the keeper records the give-up
  with `should_give_up`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..config.eval import EvalConfig
from .record import EvalRecord

KEEP_NEWEST = 3  # when more chosen checkpoints than this wait, only the newest this many are evaluated
FIRST_RETRY = 2.0  # seconds after the first failure
BACKOFF_FIRST = 30.0  # seconds after the second failure, doubling after each further one
BACKOFF_MAX = 600.0


@dataclass(frozen=True)
class EvalTask:
    iteration: int
    checkpoint: str  # its path, as `checkpoints` gave it
    attempt: int  # 1 for the first; failures so far + 1


@dataclass(frozen=True)
class EvalPlan:
    """Where each chosen checkpoint stands, oldest first."""

    chosen: tuple[int, ...]  # every checkpoint the `every` rule chooses
    waiting: tuple[int, ...]  # chosen, not evaluated, given up, skipped or running (in backoff too)
    skipped: tuple[int, ...]  # chosen and left unevaluated because newer ones waited (with those the record holds)


def backoff(failures: int) -> float:
    """Seconds from the last failure to the next attempt, after `failures` failed attempts (0 for none)."""
    if failures <= 0:
        return 0.0
    if failures == 1:
        return FIRST_RETRY
    return min(BACKOFF_MAX, BACKOFF_FIRST * 2.0 ** (failures - 2))


def should_give_up(cfg: EvalConfig, record: EvalRecord, iteration: int) -> bool:
    """Its failed attempts reached `retries`: the keeper gives it up (an event with the last reason)."""
    return record.failure_count(iteration) >= cfg.retries


def chosen(cfg: EvalConfig, checkpoints: Sequence[tuple[int, str]], rewards: Mapping[int, float]) -> dict[int, str]:
    """The checkpoints the `every` rule chooses, iteration -> path, in order of iteration."""
    by_iteration = dict(sorted(dict(checkpoints).items()))  # one path per iteration (the last given)
    if cfg.every != "best":
        n = int(cfg.every)
        return {i: p for k, (i, p) in enumerate(by_iteration.items()) if k % n == 0}
    out: dict[int, str] = {}
    reward_its = sorted(rewards)
    top: float | None = None
    for i, p in by_iteration.items():
        r = _reward_at(reward_its, rewards, i)
        if r is None:
            continue
        if top is None or r > top:
            out[i] = p
            top = r
    return out


def _reward_at(its: Sequence[int], rewards: Mapping[int, float], iteration: int) -> float | None:
    """The newest reward at or before `iteration` (binary search: `its` sorted)."""
    lo, hi = 0, len(its)
    while lo < hi:
        mid = (lo + hi) // 2
        if its[mid] <= iteration:
            lo = mid + 1
        else:
            hi = mid
    return rewards[its[lo - 1]] if lo else None


def plan(cfg: EvalConfig, checkpoints: Sequence[tuple[int, str]], rewards: Mapping[int, float],
         record: EvalRecord, running: int | None = None) -> EvalPlan:
    picked = list(chosen(cfg, checkpoints, rewards))
    done = set(record.results) | set(record.given_up)
    skipped = set(record.skipped) - done
    for k, i in enumerate(picked):
        if i not in done and i != running and not record.attempts.get(i) and len(picked) - k - 1 >= KEEP_NEWEST:
            skipped.add(i)
    waiting = tuple(i for i in picked if i not in done and i not in skipped and i != running
                    and record.failure_count(i) < cfg.retries)
    return EvalPlan(tuple(picked), waiting, tuple(sorted(skipped)))


def next_eval(cfg: EvalConfig, checkpoints: Sequence[tuple[int, str]], rewards: Mapping[int, float],
              record: EvalRecord, now: float) -> EvalTask | None:
    """The evaluation to start now (`now`: wall seconds, as the record's failures are), or None: nothing chosen
    waits, or every waiting one is in its backoff."""
    paths = dict(checkpoints)
    for i in plan(cfg, checkpoints, rewards, record).waiting:
        fails = record.failures.get(i, [])
        if fails and now < max(f.at for f in fails) + backoff(len(fails)):
            continue  # in its backoff: a newer ready one goes first
        return EvalTask(i, paths[i], len(fails) + 1)
    return None


def waiting_count(cfg: EvalConfig, checkpoints: Sequence[tuple[int, str]], rewards: Mapping[int, float],
                  record: EvalRecord, running: int | None = None) -> int:
    """Chosen checkpoints not yet evaluated (`EvalsStatus.waiting`): neither done, given up, skipped nor `running`."""
    return len(plan(cfg, checkpoints, rewards, record, running).waiting)
