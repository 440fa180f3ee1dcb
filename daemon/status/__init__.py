"""What `isaacd status` shows, as typed values: a job's status, the supervisor's, and their JSON.

Only the values are imported here (stdlib only): `isaacd status` and the metrics read them, and the CLI
must start fast. The builders that read a runner: `attempt/job_status.py` (a job's status, one of the runner's
parts) and `status.signals` (what the watchdogs read each tick).
"""

from .types import (
    BackupStatus,
    BackupUpload,
    CheckpointStatus,
    JobStatus,
    SpareStatus,
    Status,
    SupervisorInfo,
    WatchdogStatus,
    WatchdogTripCount,
)

__all__ = [
    "BackupStatus", "BackupUpload", "CheckpointStatus", "JobStatus", "SpareStatus", "Status", "SupervisorInfo",
    "WatchdogStatus", "WatchdogTripCount",
]
