"""What the spare keeper (spare.py) asks the runner's effect interpreter to do: start a spare, kill one.

The keeper decides (a spare behind a training trainer, one stuck in its boot, one at rest, a hand-over that failed,
one a previous supervisor left) and returns these; `runner.apply_spare` acts with the job's runtime and tells the
keeper how it went (`SpareKeeper.started`, `start_failed`, `killed`), so the keeper's events and retry delays are
said after the act, as before. Nothing here acts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..runtimes.base import Handle, LaunchSpec


@dataclass(frozen=True)
class StartSpare:
    """Start this spare (`Runtime.start`). `prepared`: what the keeper made ready for it (its FIFO and the end it
    holds, its events file, its staging, its mode), for the keeper to keep or undo once it hears how it went."""

    spec: LaunchSpec
    prepared: Any = field(compare=False)


@dataclass(frozen=True)
class KillSpare:
    """SIGKILL a spare (`Runtime.kill`), with the reason its `spare_stopped` event gives. `leftover`: the staging
    dir of a spare a previous supervisor left (removed once it is killed), None for the keeper's own spare."""

    handle: Handle
    reason: str
    leftover: Path | None = None


SpareEffect = StartSpare | KillSpare
