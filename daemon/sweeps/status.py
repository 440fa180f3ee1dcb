"""A sweep's status values live in status/sweeps.py (the status folder never imports sweeps/: no folder loops); named
here too for the sweep's own modules."""

from ..status.sweeps import SweepStatus, TrialStatus

__all__ = ["SweepStatus", "TrialStatus"]
