"""Texts that the supervisor and the client must word the same way."""

from __future__ import annotations

from typing import Iterable


class UnknownJob(ValueError):
    """A ValueError, not a KeyError: str(KeyError) adds quotes that the control server would then strip."""

    def __init__(self, name: str, existing: Iterable[str]):
        super().__init__(no_such_job(name, existing))


def no_such_job(name: str, existing: Iterable[str]) -> str:
    # Ends with the job list, never with a quote: the control server strips quotes from error ends.
    jobs = ", ".join(sorted(existing)) or "none"
    return f'no job named "{name}"; jobs here: {jobs}'
