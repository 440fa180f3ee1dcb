"""The scheduler of a shared GPU host (daemon/scheduling/scheduler.py, issue 31): one scenario each, named after
what a user of the host would notice."""

from __future__ import annotations

from isaacd.scheduling.quota import Quota, Quotas
from isaacd.scheduling.scheduler import (GiB, Gpu, Limits, PinnedJob, QueueEntry, Request, queue_order, schedule)

H200 = 140 * GiB


def host(n: int = 8, total: int = H200, **unusable: str) -> list[Gpu]:
    return [Gpu(i, total, 0, unusable.get(f"g{i}")) for i in range(n)]


def wants(name: str, mem_gib: float | None = 10, gpus: int = 1, priority: int = 0, order: float = 0.0,
          **kw) -> QueueEntry:  # noqa: ANN003
    mem = None if mem_gib is None else int(mem_gib * GiB)
    return QueueEntry(name, Request(gpus, mem), priority, order, waiting=True, **kw)


def holds(name: str, gpus: tuple[int, ...], mem_gib: float | None = 10, priority: int = 0, order: float = 0.0,
          since: float = 0.0, **kw) -> QueueEntry:  # noqa: ANN003
    mem = None if mem_gib is None else int(mem_gib * GiB)
    return QueueEntry(name, Request(len(gpus), mem), priority, order, placement=gpus, placed_at=since, **kw)


def placed(s) -> dict[str, tuple[int, ...]]:  # noqa: ANN001
    return {p.job: p.gpus for p in s.placements}


def test_fifo_within_a_priority_the_first_submitted_starts_first():
    jobs = [wants("b", None, order=2), wants("a", None, order=1), wants("c", None, order=3)]
    s = schedule(jobs, host(2), now=1000)
    assert placed(s) == {"a": (0,), "b": (1,)}
    assert [(w.job, w.position) for w in s.waiting] == [("c", 1)]
    assert s.waiting[0].reason.startswith("needs 1 GPU (a whole GPU); 0 free")


def test_a_higher_priority_goes_first_whatever_its_submission_time():
    jobs = [wants("old", None, order=1), wants("urgent", None, priority=10, order=5)]
    s = schedule(jobs, host(1), now=1000)
    assert placed(s) == {"urgent": (0,)}
    assert [w.job for w in s.waiting] == ["old"]
    assert [j.name for j in queue_order(jobs)] == ["urgent", "old"]


def test_jobs_pack_by_memory_onto_the_fewest_gpus_best_fit():
    # GPU 0 has 100 GiB asked for already, GPU 1 nothing: a 30 GiB job goes where it fits most tightly
    jobs = [holds("big", (0,), 100), wants("small", 30, order=1), wants("tiny", 5, order=2)]
    s = schedule(jobs, host(2), now=1000)
    assert placed(s) == {"small": (0,), "tiny": (0,)}  # 100 + 30 + 5 <= 140: GPU 1 stays empty for a big job


def test_three_isaac_lab_jobs_share_one_gpu_and_a_fourth_does_not_fit():
    jobs = [wants(n, 40, order=i) for i, n in enumerate(["a", "b", "c", "d"])]
    s = schedule(jobs, host(1), now=1000)
    assert placed(s) == {"a": (0,), "b": (0,), "c": (0,)}
    assert s.waiting[0].job == "d" and "0 with room, the most free 20.0 GiB" in s.waiting[0].reason


def test_memory_other_processes_use_is_not_given_away():
    s = schedule([wants("a", 40)], [Gpu(0, H200, used_bytes=120 * GiB)], now=0)
    assert placed(s) == {} and "the most free 20.0 GiB" in s.waiting[0].reason


def test_a_gang_of_two_ranks_goes_on_two_distinct_gpus_or_not_at_all():
    jobs = [holds("x", (0,), 130), wants("gang", 40, gpus=2, order=1)]
    s = schedule(jobs, host(3), now=1000)
    assert placed(s) == {"gang": (1, 2)}
    s = schedule(jobs, host(2), now=1000)  # one GPU with room is not enough for two ranks
    assert placed(s) == {} and s.waiting[0].reason.startswith("needs 2 GPUs (40 GiB each)")


def test_a_job_no_gpu_here_can_hold_says_it_can_never_start():
    s = schedule([wants("huge", 200)], host(2), now=0)
    assert "it can never start here" in s.waiting[0].reason
    s = schedule([wants("wide", None, gpus=4)], host(2), now=0)
    assert "it can never start here" in s.waiting[0].reason


def test_cordoned_and_hot_gpus_get_no_new_job_and_say_why():
    s = schedule([wants("a", None), wants("b", None, order=1)], host(3, g0="XID 79 (fell off the bus)", g1="hot: 91 °C"),
                 now=0)
    assert placed(s) == {"a": (2,)}
    assert "not placing on GPU 0: XID 79 (fell off the bus), GPU 1: hot: 91 °C" in s.waiting[0].reason


def test_a_pinned_job_holds_its_gpus_whole():
    s = schedule([wants("a", 10)], host(2), now=0, pinned=[PinnedJob("legacy", (0,))])
    assert placed(s) == {"a": (1,)}


def test_backfill_a_preemptible_job_starts_ahead_of_a_blocked_one():
    jobs = [holds("running", (0,), None, order=0), wants("wide", None, gpus=2, order=1),
            wants("small", 10, order=2, preemptible=True), wants("stubborn", 10, order=3, preemptible=False)]
    s = schedule(jobs, host(2), now=1000)
    assert [(p.job, p.backfill) for p in s.placements] == [("small", True)]
    assert [w.job for w in s.waiting] == ["wide", "stubborn"]
    assert "not preemptible, so it may not start ahead of it" in s.waiting[1].reason


def test_then_the_backfill_gives_its_gpu_back_the_moment_the_blocked_job_could_run():
    # "running" ended; the backfilled job holds GPU 1, started a second ago (no minimum run time for a backfill)
    jobs = [wants("wide", None, gpus=2, order=1), holds("small", (1,), 10, order=2, since=999, backfill=True)]
    s = schedule(jobs, host(2), now=1000)
    assert [(p.victim, p.by) for p in s.preemptions] == [("small", "wide")]
    assert "started ahead of it while it waited (backfill)" in s.preemptions[0].reason
    assert s.waiting[0].reason == "needs 2 GPUs (whole); preempting small"
    # next pass: small is saving; wide waits for it and preempts nobody else
    jobs = [wants("wide", None, gpus=2, order=1), holds("small", (1,), 10, order=2, backfill=True, preempting=True)]
    s = schedule(jobs, host(2), now=1001)
    assert s.preemptions == () and s.waiting[0].reason.endswith("waiting for small to save and stop")


def test_preemption_takes_the_fewest_lowest_priority_most_recently_started():
    jobs = [holds("low-old", (0,), 70, priority=1, since=100), holds("low-new", (0,), 70, priority=1, since=500),
            holds("mid", (1,), 140, priority=5, since=100), wants("urgent", 60, priority=10, order=9)]
    s = schedule(jobs, host(2), now=2000)
    assert [(p.victim, p.by) for p in s.preemptions] == [("low-new", "urgent")]
    assert "priority 10 over 1" in s.preemptions[0].reason


def test_preemption_needs_a_higher_priority():
    jobs = [holds("a", (0,), None, priority=5, order=0), wants("b", None, priority=5, order=1)]
    s = schedule(jobs, host(1), now=5000)
    assert s.preemptions == () and "next after a" in s.waiting[0].reason


def test_no_preemption_before_the_minimum_run_time():
    jobs = [holds("low", (0,), None, priority=0, since=900), wants("urgent", None, priority=10)]
    s = schedule(jobs, host(1), now=1000, limits=Limits(min_run_seconds=300))
    assert s.preemptions == () and "not preempting low (ran under min_run_seconds = 300)" in s.waiting[0].reason
    s = schedule(jobs, host(1), now=1200, limits=Limits(min_run_seconds=300))
    assert [p.victim for p in s.preemptions] == ["low"]


def test_a_job_that_is_not_preemptible_is_never_preempted():
    jobs = [holds("keep", (0,), None, priority=0, preemptible=False), wants("urgent", None, priority=10)]
    s = schedule(jobs, host(1), now=10_000)
    assert s.preemptions == () and "not preempting keep (preemptible = false)" in s.waiting[0].reason


def test_spares_are_dropped_before_any_job_is_preempted():
    jobs = [holds("a", (0,), 65, spare_bytes=65 * GiB, since=0), wants("urgent", 15, priority=10)]
    s = schedule(jobs, host(1), now=10_000)
    assert s.preemptions == ()
    assert [(d.job, d.by) for d in s.spare_drops] == [("a", "urgent")]
    assert "dropping the warm spares of a" in s.waiting[0].reason
    s = schedule([holds("a", (0,), 65, since=0), wants("urgent", 15, priority=10)], host(1), now=10_000)
    assert placed(s) == {"urgent": (0,)}  # the spare gone, it fits beside the job


def test_a_preempted_job_goes_back_to_its_old_place_in_the_queue():
    jobs = [wants("preempted", None, priority=1, order=1), wants("later", None, priority=1, order=5),
            holds("urgent", (0,), None, priority=10, order=9)]
    s = schedule(jobs, host(2), now=0)
    assert placed(s) == {"preempted": (1,)} and s.waiting[0].job == "later"


def test_a_job_waiting_for_its_victims_keeps_their_room_from_backfills():
    # wide waits for small to save; a preemptible backfill behind it must not take the GPU small frees
    jobs = [wants("wide", None, gpus=2, priority=10, order=1), holds("small", (1,), 10, preempting=True),
            wants("filler", 10, order=5)]
    s = schedule(jobs, host(2), now=1000)
    assert placed(s) == {} and s.preemptions == ()
    assert s.waiting[0].reason == "needs 2 GPUs (whole); waiting for small to save and stop"


def test_the_room_a_saving_victim_will_free_goes_to_nobody_else_in_the_same_pass():
    # urgent preempts big (130 GiB); the 110 GiB big frees beyond urgent's 20 are still big's until it has saved
    jobs = [holds("big", (0,), 130, since=0), wants("urgent", 20, priority=10, order=1), wants("next", 50, order=2)]
    s = schedule(jobs, host(1), now=10_000)
    assert [p.victim for p in s.preemptions] == ["big"] and placed(s) == {}


def test_the_room_a_dropped_spare_frees_is_kept_for_the_job_it_was_dropped_for():
    jobs = [holds("a", (0,), 65, spare_bytes=65 * GiB, since=0), wants("urgent", 15, priority=10, order=5),
            wants("c", 70, order=6)]
    s = schedule(jobs, host(1), now=10_000)
    assert [d.job for d in s.spare_drops] == ["a"] and placed(s) == {}  # c is not booked on the spare's memory


def test_a_job_held_whole_is_preempted_for_memory_its_own_process_uses():
    jobs = [holds("whole", (0,), None, since=0), wants("sized", 40, priority=10)]
    s = schedule(jobs, [Gpu(0, H200, used_bytes=110 * GiB)], now=1000)
    assert [p.victim for p in s.preemptions] == ["whole"]


# ---- quotas (issue 32): per owner and per group; past one a job waits, blocks nobody and preempts nobody ----------
def test_at_her_gpu_quota_alices_next_job_waits_saying_so_and_bobs_starts_past_it():
    quotas = Quotas(users={"alice": Quota(gpus=2)})
    jobs = [holds("a1", (0,), None, owner="alice"), holds("a2", (1,), None, owner="alice"),
            wants("a3", None, order=1, owner="alice"), wants("b1", None, order=2, owner="bob", preemptible=False)]
    s = schedule(jobs, host(4), now=1000, quotas=quotas)
    assert [(p.job, p.backfill) for p in s.placements] == [("b1", False)]  # not blocked behind a3: no backfill
    assert [(w.job, w.reason) for w in s.waiting] == [
        ("a3", "alice's quota: 2 of 2 GPUs in use (this job needs 1); it starts when enough of them is free")]
    # one of hers ends: the next one starts
    s = schedule([holds("a1", (0,), None, owner="alice"), wants("a3", None, order=1, owner="alice")], host(4),
                 now=1000, quotas=quotas)
    assert placed(s) == {"a3": (1,)}


def test_a_gpu_memory_job_counts_its_share_of_the_gpu():
    quotas = Quotas(users={"alice": Quota(gpus=1)})
    jobs = [holds("a1", (0,), 70, owner="alice"), wants("a2", 70, order=1, owner="alice"),
            wants("a3", 35, order=2, owner="alice")]
    s = schedule(jobs, host(2), now=0, quotas=quotas)  # 70/140 + 70/140 = 1 GPU: the third is past it
    assert placed(s) == {"a2": (0,)}
    assert s.waiting[0].reason.startswith("alice's quota: 1 of 1 GPUs in use (this job needs 0.25)")


def test_a_gpu_memory_quota_counts_a_whole_gpu_as_all_of_its_memory():
    quotas = Quotas(users={"alice": Quota(gpu_memory_bytes=160 * GiB)})
    jobs = [holds("whole", (0,), None, owner="alice"), wants("a2", 30, order=1, owner="alice"),
            wants("a3", 20, order=2, owner="alice")]
    s = schedule(jobs, host(2), now=0, quotas=quotas)
    assert placed(s) == {"a3": (1,)}  # 140 + 30 > 160; 140 + 20 fits
    assert s.waiting[0].reason.startswith("alice's quota: 140 of 160 GiB of GPU memory in use (this job needs 30 GiB)")


def test_a_group_quota_counts_its_members_together():
    quotas = Quotas(groups={"lab": Quota(gpus=2)})
    jobs = [holds("a1", (0,), None, owner="alice", groups=("lab",)), holds("c1", (1,), None, owner="carol",
                                                                             groups=("lab",)),
            wants("a2", None, order=1, owner="alice", groups=("lab",)), wants("d1", None, order=2, owner="dave")]
    s = schedule(jobs, host(4), now=0, quotas=quotas)
    assert placed(s) == {"d1": (2,)}
    assert s.waiting[0].reason.startswith("group lab's quota: 2 of 2 GPUs in use")


def test_a_job_past_its_quota_never_preempts_to_get_around_it():
    quotas = Quotas(users={"alice": Quota(gpus=1)})
    jobs = [holds("a1", (0,), None, priority=5, owner="alice"), holds("b-low", (1,), None, priority=0, owner="bob"),
            wants("a-urgent", None, priority=10, order=1, owner="alice")]
    s = schedule(jobs, host(2), now=10_000, quotas=quotas)
    assert s.preemptions == () and s.waiting[0].reason.startswith("alice's quota: 1 of 1 GPUs in use")
    # under her quota on the GPUs it would take, a priority still preempts as before
    s = schedule(jobs, host(2), now=10_000, quotas=Quotas(users={"alice": Quota(gpus=2)}))
    assert [(p.victim, p.by) for p in s.preemptions] == [("b-low", "a-urgent")]


def test_past_her_queued_quota_alices_later_jobs_wait_behind_everyones():
    quotas = Quotas(users={"alice": Quota(queued=1)})
    jobs = [holds("x", (0,), None, owner="bob", preemptible=False), wants("a1", None, priority=5, order=1,
                                                                         owner="alice"),
            wants("a2", None, priority=5, order=2, owner="alice"), wants("b1", None, order=3, owner="bob")]
    s = schedule(jobs, host(1), now=0, quotas=quotas)
    assert [(w.job, w.position) for w in s.waiting] == [("a1", 1), ("b1", 2), ("a2", 3)]
    assert s.waiting[2].reason.startswith("alice's quota: 1 jobs waiting in line (queued = 1); this one waits "
                                          "behind everyone's")
    # a1 placed: a2 is in line again, ahead of bob's later submission
    later = [j for j in jobs if j.name not in ("x", "a1")] + [holds("a1", (0,), None, owner="alice")]
    s = schedule(later, host(2), now=0, quotas=quotas)
    assert placed(s) == {"a2": (1,)}


# ---- issue 37: a job backing off holds no GPUs ----------------------------------------------------------------
def test_a_job_backing_off_keeps_its_place_but_its_gpu_goes_to_the_next_in_line_meanwhile():
    # "crashy" (submitted first) crashed and gave its GPU back for its backoff: "next" starts on it meanwhile
    jobs = [QueueEntry("crashy", Request(1, None), submitted_at=1, not_before=1030), wants("next", None, order=2)]
    s = schedule(jobs, host(1), now=1000)
    assert placed(s) == {"next": (0,)} and not s.preemptions
    assert [(w.job, w.position) for w in s.waiting] == [("crashy", 1)]
    assert s.waiting[0].reason.startswith("backing off after a failed attempt") and "in line again in 30 s" in \
        s.waiting[0].reason


def test_a_backing_off_gang_preempts_nobody_even_at_a_higher_priority():
    jobs = [QueueEntry("gang", Request(2, None), priority=10, submitted_at=1, not_before=1030),
            holds("low1", (0,), None, order=2), holds("low2", (1,), None, order=3)]
    s = schedule(jobs, host(2), now=5000)
    assert not s.preemptions and not s.placements
    assert [w.job for w in s.waiting] == ["gang"]


def test_back_from_its_backoff_a_job_is_placed_again_ahead_of_those_submitted_after_it():
    jobs = [wants("later", None, order=2), wants("crashy", None, order=1)]  # the machine queued it again
    assert placed(schedule(jobs, host(1), now=2000)) == {"crashy": (0,)}


def test_a_failed_job_holds_nothing_and_blocks_nobody():
    failed = QueueEntry("failed", Request(2, None), priority=10, submitted_at=0)  # at rest: no placement, not waiting
    s = schedule([failed, wants("a", None, order=1), wants("b", None, order=2)], host(2), now=1000)
    assert placed(s) == {"a": (0,), "b": (1,)} and not s.waiting and not s.preemptions
