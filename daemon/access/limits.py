"""What a user who is no admin may ask for in a job (issue 32): refused at submit, each with the key named. Pure."""

from __future__ import annotations

from ..config.access import AccessConfig
from ..config.schema import ConfigIssue, JobConfig
from ..config.users import User


def refusals(job: JobConfig, user: User, access: AccessConfig) -> list[ConfigIssue]:
    """Every reason `user` (no admin) may not run `job` as written; [] when it may. Filled in by issue 32's limits."""
    return []
