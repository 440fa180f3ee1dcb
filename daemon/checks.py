"""One finding of `isaacd doctor`: what was checked, how it went, and the fix.

Its own module so the checks that live beside what they check (backup/doctor.py) need not import doctor.py,
which gathers them all.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Check:
    name: str
    status: str  # pass | warn | fail | skip
    detail: str
    fix: str = ""
