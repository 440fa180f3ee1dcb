"""GPUs and queued jobs per user in /metrics (issue 32, metrics/queue_collector.py): a hand-built status on a scripted
4-GPU host (80 GiB each), read back from the exposition a Prometheus would scrape."""

from __future__ import annotations

from isaacd.config.users import supervisor_user
from isaacd.status.types import JobStatus, QueueStatus, Status
from test_metrics_queue import GiB, NOW, by, host, scrape


def test_gpus_memory_and_queued_jobs_per_owner_counted_as_quotas_count():
    status = Status(jobs=(
        JobStatus("a-small", owner="alice", state="running", queue=QueueStatus(memory_bytes=20 * GiB, placement=(0,),
                                                                               submitted_at=NOW)),
        JobStatus("a-whole", owner="alice", state="stopping", queue=QueueStatus(placement=(2,), submitted_at=NOW)),
        JobStatus("a-next", owner="alice", state="queued", queue=QueueStatus(submitted_at=NOW)),
        JobStatus("b1", owner="bob", state="queued", queue=QueueStatus(memory_bytes=10 * GiB, submitted_at=NOW)),
        JobStatus("b2", owner="bob", state="queued", queue=QueueStatus(memory_bytes=10 * GiB, submitted_at=NOW)),
        JobStatus("host-job", state="running", queue=QueueStatus(memory_bytes=40 * GiB, placement=(0, 1),
                                                                 submitted_at=NOW)),
        JobStatus("pinned", owner="carol", state="running", gpus=["3"]),  # names its GPU: no queue series
    ))
    got = scrape(status, host())
    me = supervisor_user()  # a job without an owner is the supervisor's user's
    assert by(got["isaacd_user_gpus"], "user") == {"alice": 1.25, "bob": 0, me: 1.0}
    assert by(got["isaacd_user_gpu_memory_allocated_bytes"], "user") == {"alice": 100 * GiB, "bob": 0,
                                                                          me: 80 * GiB}
    assert by(got["isaacd_user_queued_jobs"], "user") == {"alice": 1, "bob": 2, me: 0}
    for name in ("isaacd_user_gpus", "isaacd_user_gpu_memory_allocated_bytes", "isaacd_user_queued_jobs"):
        assert {k for labels in got[name] for k, _ in labels} == {"user"}  # the name only, nothing of the job
