#!/usr/bin/env python3
"""The supervisor's tick, in process: the CPU of each tick (the main thread's, `time.thread_time`) on a host that
`bench/job_scale.py --keep` left behind (1,000 queued `sleep` jobs, 4 running, a 100-trial sweep), after a warm-up.
What issue 39's rest-CPU goal is made of, without the 30 s sampling of /proc: medians differ by a few % run to run on
a VM, so compare checkouts alternately in one sitting.

    .venv/bin/python bench/job_scale.py --jobs 1000 --repeats 1 --rest 3 --keep  # leaves /tmp/isaacd-bench-scale-*
    .venv/bin/python bench/tick_cost.py /tmp/isaacd-bench-scale-1000-XXXX                 # this checkout
    PYTHONPATH=DIR .venv/bin/python bench/tick_cost.py /tmp/isaacd-bench-scale-1000-XXXX  # DIR/isaacd: a baseline

It runs the host in place (its files name it by absolute paths): its `sleep` jobs are started again and stopped at
the end. Ticks 0.2 s apart (the default tick_interval: back to back, each costs ~30 % less, its data in the CPU's
caches); prints the median, p10 and p90 CPU ms a tick, and that median at 5 ticks a second as % of a core."""

from __future__ import annotations

import os
import statistics
import sys
import time


def main(argv: list[str]) -> int:
    if not argv or not os.path.isfile(os.path.join(argv[0], "isaacd.toml")):
        print("usage: tick_cost.py KEPT_DIR [TICKS]: KEPT_DIR from bench/job_scale.py --keep", file=sys.stderr)
        return 2
    where, ticks = os.path.abspath(argv[0]), int(argv[1]) if len(argv) > 1 else 100
    os.chdir(where)
    import isaacd
    from isaacd.app import build_supervisor
    from isaacd.cli.main import _load
    from isaacd.daemon_log import configure_logging
    print(f"isaacd from {os.path.dirname(isaacd.__file__)}")
    cfg, path = _load(os.path.join(where, "isaacd.toml"))
    configure_logging("warning", "json")
    sup = build_supervisor(cfg, path)
    sup.start()
    try:
        for _ in range(30):  # warm-up: the queue's first passes, the caches' walk, the watchdogs asleep
            sup.tick()
            time.sleep(0.05)
        per = []
        for _ in range(ticks):
            t0 = time.thread_time()
            sup.tick()
            per.append(time.thread_time() - t0)
            time.sleep(0.2)  # the default tick_interval: between ticks caches go cold, as they do in a supervisor
        per.sort()
        med = statistics.median(per)
        print(f"{len(sup.runners)} jobs, {ticks} ticks: CPU a tick median {med * 1e3:.2f} ms, p10 "
              f"{per[len(per) // 10] * 1e3:.2f}, p90 {per[9 * len(per) // 10] * 1e3:.2f}; at 5 ticks a second "
              f"{med * 5 * 100:.2f} % of a core")
    finally:
        sup._stop.set()
        sup.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
