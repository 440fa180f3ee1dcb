"""What the eval keeper (evals.py) asks the runner's effect interpreter to do: start an evaluation, kill one
(`runner.apply_evals`, beside `apply_spare`). The keeper then hears how it went (`started`, `start_failed`, `killed`)
and says so in the job's journal. Nothing here acts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..runtimes.base import Handle, LaunchSpec


@dataclass(frozen=True)
class StartEval:
    """Start this evaluation (`Runtime.start`); `prepared`: its task, token and settings, for the keeper."""

    spec: LaunchSpec
    prepared: Any = field(compare=False)


@dataclass(frozen=True)
class KillEval:
    """SIGKILL an evaluation (`Runtime.kill`). `failure`: it counts as a failed attempt of its checkpoint (it ran past
    its deadline); else it is only evaluated again later (the job stopped, the queue needs the memory, a shutdown).
    `leftover`: a previous supervisor's, found by its token."""

    handle: Handle
    reason: str
    failure: bool = False
    leftover: bool = False


EvalEffect = StartEval | KillEval
