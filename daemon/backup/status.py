"""What the backup keeper (keeper.py) says of a job's backup: typed values, stdlib only.

They live here, not in status/types.py, because of the import graph: status/ reads runtimes/ (status/source.py),
runtimes/ reads backup/ (the Ray actor's uploads), so backup/ may not read status/. status/types.py carries these
in `JobStatus.backup` as they are and makes their JSON (`isaacd status --json`), the one place it is made.
`isaacd status` imports this module: stdlib only, like status/types.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackupUpload:
    """The newest checkpoint in the bucket."""

    iteration: int
    time: float
    key: str | None = None
    size: int | None = None


@dataclass(frozen=True, slots=True)
class BackupLease:
    """The prefix's lease (backup/lease.py): held by this supervisor, or refused and who holds it."""

    state: str | None = None  # held, refused, error, none; "delegate" on a Ray node
    holder: str | None = None  # the other holder, in words (host, machine-id, state dir, heartbeat, expiry)
    expires: float | None = None  # unix: ours while held, the holder's while refused
    conditional: bool | None = None  # the store refused a lost race (False: it ignores the headers)
    fix: str | None = None


@dataclass(frozen=True, slots=True)
class BackupStatus:
    """A job's backup target ([jobs.backup], backup/uploader.py): uploads, lag, the last error, a fetch under way."""

    url: str | None = None
    last_upload: BackupUpload | None = None
    lag_iterations: int | None = None
    error: str | None = None
    error_since: float | None = None
    retry_at: float | None = None
    failures_total: int | None = None
    bytes_total: int | None = None
    uploads_total: int | None = None
    restoring: str | None = None  # "fetching", or why the fetch from the bucket failed
    blocked: str | None = None  # why this supervisor may not write the prefix (backup/lease.py): holder and fix
    lease: BackupLease | None = None
