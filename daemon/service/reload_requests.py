"""A reload asked for without a config in hand (a SIGHUP; a PBT exploit's rewritten member file, issue 40): a part
of the Supervisor (its base, as attempt/ending.py's EndedJobs is). The run loop carries it out before its next
tick, once the config files have been quiet a moment (an editor's in-place save is waited out)."""

from __future__ import annotations

import threading

from ..config.read import quiet_for


class ReloadRequests:
    config_path: str | None
    _reload_requested: threading.Event
    _wake: threading.Event

    def request_reload(self) -> None:
        """As a SIGHUP does: the run loop wakes and reloads once the files are quiet."""
        self._reload_requested.set()
        self._wake.set()

    def _config_quiet(self) -> bool:
        return self.config_path is None or quiet_for(self.config_path) is not None
