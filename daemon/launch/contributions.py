"""What a prepare step (steps.py) contributes to a launch: one typed value each, assembled by pipeline.py."""

from __future__ import annotations

from dataclasses import dataclass

from ..jobs.messages import Settle
from ..os_seam.oscalls import RunAs


@dataclass(frozen=True)
class Env:
    """Variables set for the process (later steps win)."""

    values: dict[str, str]


@dataclass(frozen=True)
class EnvDefaults:
    """Variables set only where nothing before has set them (the job's own `environment` wins)."""

    values: dict[str, str]


@dataclass(frozen=True)
class ScrubEnv:
    """The environment so far cut down to what an owner's process may inherit (access/owner.py owner_env)."""

    owner: RunAs
    job_environment: dict[str, str]


@dataclass(frozen=True)
class Refusal:
    """The launch cannot go on; `settle`: the job's end (a retry cannot help), None: a crash (backoff)."""

    reason: str
    settle: Settle | None = Settle.FAILED
    crash_loop: bool = True  # a crash (settle None) the trainer is not to blame for: retried, not counted


Contribution = Env | EnvDefaults | ScrubEnv | Refusal | None  # None: nothing to add for this launch
