"""A sweep's search space (issue 39): one distribution per searched key (a Hydra override such as
`agent.algorithm.learning_rate`, or a job key: `num_envs`, `seed`). Values only; the sweep file (spec.py) builds them,
the sampler (sampler.py) draws from them."""

from __future__ import annotations

from dataclasses import dataclass

Value = bool | int | float | str


@dataclass(frozen=True)
class Choice:
    """One of `values`, each equally likely."""

    values: tuple[Value, ...]


@dataclass(frozen=True)
class Uniform:
    """A float in [low, high]."""

    low: float
    high: float


@dataclass(frozen=True)
class LogUniform:
    """A float in [low, high] whose logarithm is uniform (learning rates); 0 < low < high."""

    low: float
    high: float


@dataclass(frozen=True)
class IntRange:
    """An integer in [low, high], both included."""

    low: int
    high: int


@dataclass(frozen=True)
class Grid:
    """Every one of `values`: the trials are the cross product of the grid keys (each repeated for the sampled keys)."""

    values: tuple[Value, ...]


Distribution = Choice | Uniform | LogUniform | IntRange | Grid
SearchSpace = dict[str, Distribution]  # searched key -> its distribution, in the sweep file's order
