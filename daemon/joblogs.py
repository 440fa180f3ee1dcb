"""`isaacd logs JOB`: the trainer's output, wherever the job's runtime put it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import deque

from .config import Config
from .messages import no_such_job


def show_logs(cfg: Config, job: str, follow: bool = False, lines: int = 50) -> int:
    job_cfg = cfg.job(job)
    if job_cfg is None:
        print(f"isaacd: {no_such_job(job, [j.name for j in cfg.jobs])}", file=sys.stderr)
        return 1
    if job_cfg.runtime == "systemd":
        from .runtimes.systemd import unit_name

        cmd = ["journalctl", "--no-pager", "-n", str(lines), "-u", unit_name(job)] + (["-f"] if follow else [])
        return subprocess.call(cmd)
    if job_cfg.runtime == "podman":
        from .runtimes.podman import container_name

        cmd = ["podman", "logs", "--tail", str(lines)] + (["-f"] if follow else []) + [container_name(job)]
        return subprocess.call(cmd)
    path = cfg.supervisor.state_dir / "logs" / f"{job}.log"
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        print(f"isaacd: no log yet at {path}", file=sys.stderr)
        return 1
    with fh:
        for line in deque(fh, maxlen=lines):
            sys.stdout.buffer.write(line)
        sys.stdout.flush()
        while follow:
            chunk = fh.read()
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
            else:
                time.sleep(0.5)
                if os.stat(path).st_size < fh.tell():
                    fh.seek(0)  # truncated/rotated
    return 0
