"""The supervisor's sweep commands (issue 39), what the control socket calls (control.py `_sweep_request`): a part
of the Supervisor (its base, as attempt/ending.py's EndedJobs is), kept here with the sweeps it serves."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..access.policy import Caller
from ..status.sweeps import SweepStatus
from .controller import SweepController, best_of
from .submit import submit_sweep

if TYPE_CHECKING:
    from ..scheduling.submit import Submittable


class SweepCommands:
    sweeps: SweepController | None

    def _sweeps(self) -> SweepController:
        if self.sweeps is None:
            raise ValueError("this supervisor runs no sweeps (built without them)")
        return self.sweeps

    def sweep_submit(self: "Submittable | SweepCommands", text: str, source: str,  # type: ignore[misc]
                     caller: Caller | None = None) -> str:
        """`isaacd sweep submit`: the trials' job files written and the config reloaded once (sweeps/submit.py)."""
        return submit_sweep(self, self._sweeps(), text, source, caller)  # type: ignore[arg-type, union-attr]

    def sweep_statuses(self) -> tuple[SweepStatus, ...]:
        return self.sweeps.snapshot() if self.sweeps is not None else ()

    def sweep_cancel(self, name: str) -> str:
        return self._sweeps().cancel(name)

    def sweep_best(self, name: str) -> str:
        return best_of(self._sweeps(), name)
