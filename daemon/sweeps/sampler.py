"""A sweep's trials (issue 39): their configurations drawn from the search space (space.py), seeded, and their
numbers and job names.

Pure, and reproducible: `sample(space, trials, seed)` gives the same list for the same arguments, on any machine and
under any PYTHONHASHSEED (one `random.Random(seed)`, the keys drawn in the space's order, which is the sweep file's;
no set or hash is iterated). Trial `n` (1-based) is `sample(...)[n - 1]`; its job is `trial_name(sweep, n, trials)`,
`<sweep>-t007`. A longer sweep of the same space and seed starts with the same trials (each trial's draws follow
the previous trial's), so the samples of a supervisor killed mid-sweep are the ones it drew before.

  * `Grid` keys are a cross product, in the space's order; the grid points take turns (trial 1 the first point,
    trial 2 the second, ...), so the first trials ASHA launches, which set its rungs' first bars, cover the grid; each
    point comes back `trials / points` times with fresh draws of the sampled keys. `trials` must be a multiple of
    the grid's points (`grid_points`), else a ValueError saying which counts would do.
  * `Choice` one of its values, as written; `IntRange` an integer, both ends included (`randint`); `Uniform` a float
    in [low, high]; `LogUniform` a float whose logarithm is uniform in [log low, log high] (a learning rate).
  * Floats drawn are rounded to 6 significant digits (`ROUND_DIGITS`) and kept in [low, high]: they read well in
    `isaacd sweep status` and their shortest `repr` (`as_override`) is the number the trainer gets on its command
    line, exactly (a Hydra override parses `0.000312457` and `1.23457e-05` back to the same float).
"""

from __future__ import annotations

import itertools
import math
import random
import re

from .space import Choice, Distribution, Grid, IntRange, LogUniform, SearchSpace, Uniform, Value

ROUND_DIGITS = 6  # significant digits of a sampled float: 0.000312457, 1.23457e-05, 0.987654
NAME_DIGITS = 3  # <sweep>-t007: at least this many digits, more for a sweep of 1,000 trials or more


def sample(space: SearchSpace, trials: int, seed: int) -> list[dict[str, Value]]:
    """The configurations of trials 1..`trials`, in order (trial n is element n - 1); each a dict of every searched
    key, in the space's order."""
    if trials < 1:
        raise ValueError(f"trials = {trials}: a sweep needs at least 1 trial")
    points = grid_points(space)
    if trials % len(points):
        lower, upper = trials // len(points) * len(points), (trials // len(points) + 1) * len(points)
        fits = f"{lower} or {upper}" if lower else f"{upper}"
        raise ValueError(f"trials = {trials} is not a multiple of the grid's {len(points)} points "
                         f"(each point runs as often as the others): use trials = {fits}")
    rng = random.Random(seed)
    out: list[dict[str, Value]] = []
    for index in range(trials):
        point = points[index % len(points)]
        config: dict[str, Value] = {}
        for key, dist in space.items():
            config[key] = point[key] if isinstance(dist, Grid) else draw(dist, rng)
        out.append(config)
    return out


def grid_points(space: SearchSpace) -> list[dict[str, Value]]:
    """The cross product of the grid keys, the first key varying slowest; [{}] when there is no grid key."""
    keys = [k for k, d in space.items() if isinstance(d, Grid)]
    values = [space[k].values for k in keys]  # type: ignore[union-attr]  # every one a Grid
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def draw(dist: Distribution, rng: random.Random) -> Value:
    """One value of a sampled (not grid) distribution."""
    if isinstance(dist, Choice):
        return dist.values[rng.randrange(len(dist.values))]
    if isinstance(dist, IntRange):
        return rng.randint(dist.low, dist.high)
    if isinstance(dist, Uniform):
        return _rounded(rng.uniform(dist.low, dist.high), dist.low, dist.high)
    if isinstance(dist, LogUniform):
        if dist.low <= 0:
            raise ValueError(f"loguniform low = {dist.low}: it must be above 0 (its logarithm is drawn)")
        x = math.exp(rng.uniform(math.log(dist.low), math.log(dist.high)))
        return _rounded(x, dist.low, dist.high)
    raise TypeError(f"{dist!r} is drawn by the grid's cross product, not one at a time")


def _rounded(x: float, low: float, high: float) -> float:
    # rounding may step just past a bound written with more digits than ROUND_DIGITS: the bound is the answer then
    return min(max(float(f"{x:.{ROUND_DIGITS}g}"), low), high)


def as_override(value: Value) -> str:
    """A value as the trainer's command line gets it (`key=<this>`): a float's shortest round-trip repr, a bool
    Hydra's `true`/`false`, an int or a string as it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def trial_name(sweep: str, number: int, trials: int) -> str:
    """Trial `number`'s job: `<sweep>-t007`, zero-padded to the width of the largest number so the names sort."""
    if not 1 <= number <= trials:
        raise ValueError(f"trial {number} is not one of the sweep's trials 1..{trials}")
    width = max(NAME_DIGITS, len(str(trials)))
    return f"{sweep}-t{number:0{width}d}"


def trial_number(sweep: str, job: str) -> int | None:
    """The trial number of one of `sweep`'s trial jobs (`trial_name`'s inverse), or None for any other job."""
    m = re.fullmatch(re.escape(sweep) + r"-t(\d+)", job)
    return int(m.group(1)) if m and int(m.group(1)) >= 1 else None
