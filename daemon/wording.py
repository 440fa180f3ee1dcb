"""Texts that the supervisor and the client must word the same way."""

from __future__ import annotations

from typing import Iterable


def no_such_job(name: str, existing: Iterable[str]) -> str:
    # Ends with the job list, never with a quote: the control server strips quotes from error ends.
    jobs = ", ".join(sorted(existing)) or "none"
    return f'no job named "{name}"; jobs here: {jobs}'
