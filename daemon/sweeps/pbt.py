"""Population-based training's decision (issue 40): a population's members with their objectives in, exploits out.
Pure: no I/O, no clock, and randomness only from a `random.Random` seeded by the sweep's seed, the member and its
exploit count, so a supervisor killed mid-sweep decides the same exploit again (same source, same new values). The
sweep's wiring calls `decide(pbt, members)` when a member logged new iterations, and carries each `Exploit` out
through the member's job (a stop with a save, a copy of the source's newest complete checkpoint, a start from that
copy with the new values: through the member's booted spare where one is ready), recording it first.

Read upstream:
  * Ray Tune, python/ray/tune/schedulers/pbt.py (`PopulationBasedTraining`, asynchronous mode): a trial that reaches
    its `perturbation_interval` since its last perturbation is judged; `_quantiles()` sorts the unfinished trials
    with a score and takes `ceil(n * quantile_fraction)` from each end, at most `floor(n / 2)`, none when n <= 1;
    a trial in the lower quantile clones a random trial of the upper one (`_exploit`; skipped when that one has no
    checkpoint), its config perturbed by `explore()`: with `resample_probability` a fresh sample, else a continuous
    value times 1.2 or 0.8 (an int truncated), a list value moved to an adjacent entry; the trial's
    last-perturbation time is set whether it exploited or not.
  * Jaderberg et al., "Population Based Training of Neural Networks" (2017): exploit (truncation selection: the
    bottom 20 % copy the top 20 %) and explore (perturb by 0.8 / 1.2, or resample).
  * Petrenko et al., DexPBT (RSS 2023), and Isaac Lab's rl_games PBT (`rl_games/pbt/pbt.py`): the same loop, one
    process per member, a replaced member `os.execv`s itself (a cold boot of Isaac Sim per swap).

The rules, one scenario each in tests/test_pbt.py:
  * A member is judged when it is `TRAINING` and has trained `interval` iterations since it was last judged (or
    started); judging records `judged_at` (`Keep` or `Exploit`), so it is judged again only `interval` later.
  * The ranks: every `TRAINING` member with an objective, best first, ties by member number (the lower first), NaN
    last; `mode = min` negates. A member `BOOTING` (started or exploited, no objective logged since) or
    `EXPLOITING` (an exploit decided, not yet carried out) is neither ranked nor a source: its objective is not its
    own yet, or is about to be replaced. A finished member (completed, failed, cancelled) is not ranked either (as
    Ray's `is_finished`): the population goes on without it.
  * The quantiles: q = ceil(n * quantile), at most floor(n / 2) (a member is never both top and bottom); none
    when n <= 1. A judged member in the bottom q exploits; anywhere else it keeps training (`Keep`).
  * The source: one of the top q with a complete checkpoint (`checkpoint` is not None), drawn by the member's
    seeded generator; none has one: `Keep` (why = "no checkpoint"), as Ray skips the exploit. The source never stops.
  * Explore: each mutated key of the source's config, in the sweep file's order. With `resample_probability` a
    fresh draw from its distribution; else a continuous or integer value times one of `factors` (drawn), kept in the
    distribution's bounds (an integer rounded), a `choice`/`grid` value moved to an adjacent entry (a value not
    among them: a fresh draw). Keys not mutated are the source's. Floats keep 6 significant digits, as sampled ones.
  * `stop_at`: a member whose objective reaches it ends the population (`Done`).
  * Done: when no member can train on (every one completed, failed or cancelled); the best is the best objective
    among them, a failed member's excepted (it may have diverged: its last objective is no result); its schedule of
    hyperparameters is its lineage, kept by the wiring.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from .sampler import ROUND_DIGITS, draw
from .space import Choice, Distribution, Grid, IntRange, LogUniform, Uniform, Value


class MemberState(str, Enum):
    BOOTING = "booting"  # launched or exploited; no objective logged since: not ranked, not a source
    TRAINING = "training"
    EXPLOITING = "exploiting"  # an exploit decided and not yet carried out
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINISHED = (MemberState.COMPLETED, MemberState.FAILED, MemberState.CANCELLED)


@dataclass(frozen=True)
class Mutation:
    """How one hyperparameter moves at an exploit: `dist` is its search-space distribution (the initial sample's
    and a resample's, and its bounds)."""

    dist: Distribution
    factors: tuple[float, ...] = (0.8, 1.2)
    resample_probability: float = 0.25

    def __post_init__(self) -> None:
        if not self.factors or any(not f > 0 for f in self.factors):
            raise ValueError(f"factors = {list(self.factors)}: positive multipliers, e.g. [0.8, 1.2]")
        if not 0.0 <= self.resample_probability <= 1.0:
            raise ValueError(f"resample_probability = {self.resample_probability}: a probability, 0 to 1")


@dataclass(frozen=True)
class Pbt:
    """The scheduler's settings, from the sweep file (`[sweep.scheduler]`, `[sweep.objective]`, `stop_at`)."""

    interval: int  # iterations between a member's judgements
    max_iterations: int
    mutations: Mapping[str, Mutation]  # the perturbed keys, in the sweep file's order
    quantile: float = 0.25  # the bottom fraction that copies the top fraction
    mode: Literal["max", "min"] = "max"
    seed: int = 0
    stop_at: float | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.interval < self.max_iterations:
            raise ValueError(f"interval = {self.interval}: iterations between exploits, at least 1 and below "
                             f"max_iterations = {self.max_iterations}")
        if not 0.0 < self.quantile <= 0.5:
            raise ValueError(f"quantile = {self.quantile}: the bottom fraction that copies the top, above 0 and at "
                             "most 0.5 (0.25: the worst quarter copies the best quarter)")
        if not self.mutations:
            raise ValueError("no hyperparameter to perturb: name at least one in [sweep.scheduler.perturb]")
        if self.mode not in ("max", "min"):
            raise ValueError(f"mode = {self.mode!r}: use 'max' or 'min'")

    def key(self, value: float | None) -> float:
        """A value as the ranks read it: higher is better whatever the mode; NaN (or none) the worst."""
        if value is None or math.isnan(value):
            return -math.inf
        return value if self.mode == "max" else -value


@dataclass(frozen=True)
class MemberView:
    """One member as `decide` reads it. The wiring keeps `judged_at` and `exploits` from the decisions it recorded."""

    number: int  # 1-based, as a sweep's trial
    state: MemberState
    config: Mapping[str, Value]  # its hyperparameters now
    iteration: int = 0  # the last iteration it logged
    objective: float | None = None  # its smoothed objective now
    judged_at: int = 0  # the iteration it was last judged at (or started from)
    checkpoint: int | None = None  # its newest complete checkpoint's iteration (None: none yet)
    exploits: int = 0  # exploits it has had: with the seed and its number, its generator's seed


# ---- decisions ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Keep:
    """A judged member keeps training (record `judged_at = iteration`)."""

    member: int
    iteration: int
    rank: int  # 1 = best of the `of` ranked members
    of: int
    why: str  # "top", "middle", "no checkpoint" (bottom, but no top member has one)


@dataclass(frozen=True)
class Exploit:
    """A bottom member copies `source`'s newest complete checkpoint (at `source_checkpoint` when decided: the
    wiring copies the newest complete one when it carries it out) and goes on from it with `new` hyperparameters."""

    member: int
    iteration: int
    rank: int
    of: int
    source: int
    source_checkpoint: int
    old: Mapping[str, Value]
    new: Mapping[str, Value]


@dataclass(frozen=True)
class Done:
    best: int | None
    value: float | None
    reason: str


Decision = Keep | Exploit | Done


def decide(pbt: Pbt, members: Sequence[MemberView]) -> list[Decision]:
    """This pass's decisions: the judged members' Keep or Exploit (by member number), or one Done."""
    reached = [m for m in members if m.state is MemberState.TRAINING and pbt.stop_at is not None
               and m.objective is not None and pbt.key(m.objective) >= pbt.key(pbt.stop_at)]
    if reached:
        best = _ranked(pbt, reached)[0]
        return [Done(best.number, best.objective, f"stop_at {pbt.stop_at} reached")]
    if members and all(m.state in FINISHED for m in members):
        scored = [m for m in members if m.objective is not None and m.state is not MemberState.FAILED]
        best = _ranked(pbt, scored)[0] if scored else None
        return [Done(best.number if best else None, best.objective if best else None, "every member finished")]
    ranked = _ranked(pbt, [m for m in members if m.state is MemberState.TRAINING and m.objective is not None])
    rank = {m.number: i + 1 for i, m in enumerate(ranked)}
    q = quantile_size(len(ranked), pbt.quantile)
    top = ranked[:q]
    bottom = {m.number for m in ranked[len(ranked) - q:]} if q else set()
    top_numbers = {m.number for m in top}
    out: list[Decision] = []
    for m in sorted(members, key=lambda m: m.number):
        if not _due(pbt, m) or m.number not in rank:
            continue
        r, n = rank[m.number], len(ranked)
        if m.number not in bottom:
            out.append(Keep(m.number, m.iteration, r, n, "top" if m.number in top_numbers else "middle"))
            continue
        sources = [s for s in top if s.checkpoint is not None]
        if not sources:
            out.append(Keep(m.number, m.iteration, r, n, "no checkpoint"))
            continue
        rng = member_rng(pbt.seed, m.number, m.exploits)
        source = sources[rng.randrange(len(sources))]
        new = explore(source.config, pbt.mutations, rng)
        out.append(Exploit(m.number, m.iteration, r, n, source.number, source.checkpoint,  # type: ignore[arg-type]
                           dict(m.config), new))
    return out


def quantile_size(n: int, quantile: float) -> int:
    """How many members make the top (and the bottom): ceil(n * quantile), at most floor(n / 2), 0 when n <= 1."""
    if n <= 1:
        return 0
    return min(math.ceil(n * quantile), n // 2)


def member_rng(seed: int, member: int, exploits: int) -> random.Random:
    """The generator of one member's one exploit: the same after a restart (a str seed is hashed by SHA-512, not
    by Python's salted hash), and independent of the order the members are judged in."""
    return random.Random(f"pbt/{seed}/{member}/{exploits}")


def explore(config: Mapping[str, Value], mutations: Mapping[str, Mutation], rng: random.Random) -> dict[str, Value]:
    """`config` with each mutated key perturbed (the module's rules); the other keys as they are."""
    new = dict(config)
    for key, mutation in mutations.items():
        new[key] = _perturbed(config.get(key), mutation, rng)
    return new


def _perturbed(value: Value | None, m: Mutation, rng: random.Random) -> Value:
    dist = m.dist
    resample = rng.random() < m.resample_probability
    if isinstance(dist, (Choice, Grid)):
        values = list(dist.values)
        if resample or value not in values:
            return values[rng.randrange(len(values))]
        i = values.index(value) + rng.choice((-1, 1))
        return values[min(max(i, 0), len(values) - 1)]
    if resample or not isinstance(value, (int, float)) or isinstance(value, bool):
        return draw(dist, rng)
    x = value * m.factors[rng.randrange(len(m.factors))]
    if isinstance(dist, IntRange):
        return min(max(int(round(x)), dist.low), dist.high)
    assert isinstance(dist, (Uniform, LogUniform))
    return min(max(float(f"{x:.{ROUND_DIGITS}g}"), dist.low), dist.high)


def _due(pbt: Pbt, m: MemberView) -> bool:
    return (m.state is MemberState.TRAINING and m.iteration - m.judged_at >= pbt.interval
            and m.iteration < pbt.max_iterations)


def _ranked(pbt: Pbt, members: Sequence[MemberView]) -> list[MemberView]:
    return sorted(members, key=lambda m: (-pbt.key(m.objective), m.number))


__all__ = ["Decision", "Done", "Exploit", "Keep", "MemberState", "MemberView", "Mutation", "Pbt", "decide",
           "explore", "member_rng", "quantile_size"]
