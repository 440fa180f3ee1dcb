"""The Ray runtime's shared-storage check and owner fence, written by the supervisor into a job's log_root before
each placement and read by the actor on its node (runtimes/ray_actor.py):

- the marker `<log_root>/.isaacd-storage-check` holds this supervisor's value: the actor that reads another value
  (or none) is on a node that does not share the log_root;
- the owner file `<log_root>/.isaacd-owner-<job>` holds the token of the job's current attempt. The actor of an
  older attempt that is still running (its node was cut off from the head, so the head took it for lost) stops its
  trainer on seeing another token: two trainers never write the same job's checkpoints for longer than the fence
  interval.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from ..config.schema import JobConfig

MARKER_NAME = ".isaacd-storage-check"
OWNER_PREFIX = ".isaacd-owner-"


def owner_file(job: JobConfig) -> Path:
    return job.log_root / f"{OWNER_PREFIX}{job.name}"


def marker_file(job: JobConfig) -> Path:
    return job.log_root / MARKER_NAME


def _replace_text(path: Path, text: str) -> None:
    """Write `text` to `path` atomically: readers on other nodes see the old value or the new one."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)


class StorageCheck:
    """This supervisor's marker value (`nonce`, fresh per supervisor) and the claim of a job's log_root."""

    def __init__(self) -> None:
        self.nonce = uuid.uuid4().hex

    def claim(self, job: JobConfig, token: str) -> None:
        """The marker and the owner file written for the attempt `token`; raises OSError."""
        job.log_root.mkdir(parents=True, exist_ok=True)
        self._write_marker(marker_file(job))
        _replace_text(owner_file(job), token)  # from now on an older attempt's actor fences itself

    def _write_marker(self, marker: Path) -> None:
        """This supervisor's value in the log_root, replaced atomically (actors on other nodes read it while
        other jobs are placed: they must never see it half-written)."""
        try:
            if marker.read_text().strip() == self.nonce:
                return
        except OSError:
            pass
        _replace_text(marker, self.nonce)
