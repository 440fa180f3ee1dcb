"""The runtimes' worker thread (daemon/runtimes/worker.py): a task that must look again later comes back with
`submit_after` instead of sleeping on the worker, so the other jobs' tasks run meanwhile."""

from __future__ import annotations

import threading
import time

from isaacd.runtimes.worker import Worker


def test_a_task_submitted_after_a_delay_runs_on_the_worker_once_the_delay_has_passed():
    w = Worker("t")
    ran: list[tuple[str, float, str]] = []
    done = threading.Event()
    t0 = time.monotonic()

    def later() -> None:
        ran.append(("later", time.monotonic() - t0, threading.current_thread().name))
        done.set()

    w.submit_after(0.3, "later", later)
    w.submit("now", lambda: ran.append(("now", time.monotonic() - t0, threading.current_thread().name)))
    assert done.wait(5)
    assert [r[0] for r in ran] == ["now", "later"]  # what was queued meanwhile was not held up
    assert ran[1][1] >= 0.3
    assert {r[2] for r in ran} == {"isaacd-t-worker"}  # both on the worker: the runtime's caches have one writer


def test_a_task_that_looks_again_later_leaves_the_worker_free_between_looks():
    w = Worker("t")
    looks: list[float] = []
    others: list[float] = []
    finished = threading.Event()
    t0 = time.monotonic()

    def look() -> None:  # a unit still stopping: one look, then again in 0.2 s, three times
        looks.append(time.monotonic() - t0)
        if len(looks) < 3:
            w.submit_after(0.2, "look", look)
        else:
            finished.set()

    w.submit("look", look)
    time.sleep(0.05)
    w.submit("other job", lambda: others.append(time.monotonic() - t0))
    assert finished.wait(5)
    assert len(others) == 1 and others[0] < looks[1]  # another job's task ran between two looks
    assert looks[2] - looks[0] >= 0.4
