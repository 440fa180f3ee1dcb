"""The backup line of `isaacd status`: last upload (iteration, age), lag in iterations, any error, and who holds
the prefix when it is not this supervisor (backup/lease.py) with the fix."""

from __future__ import annotations

from .durations import age
from ..status.types import JobStatus


def backup_note(job: JobStatus, now: float) -> str | None:
    b = job.backup
    if b is None:
        return None
    last = b.last_upload
    parts = [f"last upload iteration {last.iteration} ({age(last.time, now)} ago)" if last
             else "no upload yet"]
    if b.lag_iterations is not None:
        parts.append(f"lag {b.lag_iterations} iteration{'' if b.lag_iterations == 1 else 's'}")
    if b.restoring:
        parts.append(f"fetching a checkpoint: {b.restoring}")
    line = f"  {job.name} backup {b.url}: {', '.join(parts)}"
    if b.blocked:  # another supervisor holds the prefix, or it holds another experiment: who, and the fix
        line += f"\n    backup PAUSED: {b.blocked}"
    elif b.lease is not None and b.lease.conditional is False:
        line += "\n    backup lease best-effort: this store ignores conditional writes (see `isaacd doctor`)"
    if b.error:
        retry = f"; retry in {max(0, int(b.retry_at - now))}s" if b.retry_at else ""
        line += f"\n    backup ERROR since {age(b.error_since, now)} ago: {b.error}{retry}"
    return line
