"""Checkpoints in object storage (issue 22): every complete checkpoint copied off the host, and a resume from
the bucket when the job's disk (or node) is gone. One module per job:

- config.py   `[jobs.backup]` (url, endpoint_url, keep, snapshot_min_seconds)
- objects.py  the bucket through fsspec: atomic uploads, downloads, small documents
- manifest.py the per-job manifest (run, iteration, sha256, size, time)
- uploader.py the background thread that uploads (validation, backoff, status)
- restore.py  fetch + verify the newest checkpoint into the local run layout
- keeper.py   what the runner holds: uploads, and the launch's fetch, without blocking the tick
- doctor.py   `isaacd doctor`: target reachable, writable, credentials present
- render.py   the status line
"""

from .config import BackupConfig
from .keeper import Fetching, JobBackup
from .objects import BackupError
from .uploader import Run

__all__ = ["BackupConfig", "BackupError", "Fetching", "JobBackup", "Run"]
