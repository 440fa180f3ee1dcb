"""One finding of `isaacd doctor`: what was checked, how it went, and the fix.

Its own module so a check kept in a module of its own (doctor_backup.py) need not import doctor.py, which
gathers them all.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Check:
    name: str
    status: str  # pass | warn | fail | skip
    detail: str
    fix: str = ""
