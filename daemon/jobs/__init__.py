"""The job core: model and transition table (model.py), messages in (messages.py), effects out
(effects.py), one pure decision function (machine.py) and the restart policy (policy.py)."""

from .model import InvalidTransition, JobModel, JobState, Origin, TRANSITIONS, check_transition

__all__ = ["InvalidTransition", "JobModel", "JobState", "Origin", "TRANSITIONS", "check_transition"]
