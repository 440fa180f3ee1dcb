"""bench/queue_trace.py's diagnosis of the makespan's tail (issue 42's utilisation goal): which jobs end last under
isaacd's queue and why they started when they did, and the bound of a queue that knew every job's length and ran the
longest first within a priority class. Hand-made traces on one scripted H200, each a few jobs long."""

from __future__ import annotations

from test_bench_queue_trace import qt


def job(name: str, cls: str, submit_s: float, iterations: int, preemptible: bool = True):  # noqa: ANN201
    # a whole-GPU job of a kind with no history: isaacd has no estimate of it while it waits (a new experiment)
    return qt.TraceJob(name=name, kind="whole", submit_s=submit_s, ranks=1, memory_bytes=None,
                       footprint_bytes=100 * qt.GiB, cls=cls, iterations=iterations, iteration_s=1.0,
                       startup_s=20.0, preemptible=preemptible)


def test_the_tail_names_the_job_that_ends_last_and_the_later_higher_class_job_that_started_before_it():
    # first holds the GPU (not preemptible); late (low) was submitted before urgent (normal), which goes first
    trace = [job("first", "low", 0.0, 1000, preemptible=False), job("late", "low", 10.0, 1000),
             job("urgent", "normal", 20.0, 100)]
    isaacd, fifo = (qt.QueueSim(trace, p, gpus=1).run() for p in ("isaacd", "fifo"))
    [row] = qt.tail(trace, isaacd, fifo, 1)
    assert row["job"] == "late" and row["class"] == "low" and row["whole_gpu"]
    assert row["later_higher_started_before"] == ["urgent"]
    assert row["estimate_while_waiting"] is False  # a new experiment: nothing to order it by
    assert row["fifo_start_s"] == fifo.jobs["first"][2]  # FIFO starts it as soon as first ends
    assert row["isaacd_start_s"] > row["fifo_start_s"]  # isaacd only after urgent too
    assert row["isaacd_end_s"] == isaacd.makespan_s and row["preempted"] == 0


def test_knowing_every_length_the_longest_job_of_a_class_starts_first_and_the_makespan_shrinks():
    # two GPUs held until 1020 s and 2020 s; short (1000 iterations) was submitted before long (3000), both low
    trace = [job("held1", "low", 0.0, 1000, preemptible=False), job("held2", "low", 0.0, 2000, preemptible=False),
             job("short", "low", 5.0, 1000), job("long", "low", 10.0, 3000)]
    runs = {p: qt.QueueSim(trace, p, gpus=2).run() for p in ("isaacd", qt.LONGEST)}
    first_free = runs["isaacd"].jobs["held1"][2]
    assert runs["isaacd"].jobs["short"][0] == first_free  # isaacd's queue: submission order within a class
    assert runs[qt.LONGEST].jobs["long"][0] == first_free  # the bound: the longest first
    assert runs[qt.LONGEST].makespan_s < runs["isaacd"].makespan_s
    assert all(r.iterations_lost == 0 and not r.incomplete for r in runs.values())
