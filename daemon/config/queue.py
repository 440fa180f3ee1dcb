"""[queue]: how the host's queue places and preempts the jobs that ask for GPUs instead of naming them (issue 31,
docs/queue.md). The decisions are scheduling/scheduler.py's."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class QueueConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    # a job runs this long before a higher priority may preempt it: no thrashing (a backfill, which started ahead
    # of a blocked job, gives its GPUs back at once)
    min_run_seconds: Annotated[float, Field(ge=0)] = 300.0
    # no new job is placed on a GPU this hot (NVML's GPU temperature); the jobs on it stay
    hot_celsius: Annotated[float, Field(gt=0, le=120)] = 85.0
