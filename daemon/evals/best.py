"""The best evaluation of a job (issue 41): the highest mean episode return; of equal ones, the earlier iteration
(the checkpoint that got there first, and the one already named as best stays so). Pure."""

from __future__ import annotations

from collections.abc import Iterable

from .types import EvalResult


def best_result(results: Iterable[EvalResult]) -> EvalResult | None:
    """The best of `results` (in any order), None where there is none."""
    return min(results, key=lambda r: (-r.return_mean, r.iteration), default=None)


def is_better(new: EvalResult, old: EvalResult | None) -> bool:
    """`new` would replace `old` as the best."""
    return old is None or best_result((new, old)) is new
