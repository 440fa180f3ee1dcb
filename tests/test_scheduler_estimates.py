"""Backfill by reservation (issue 42, daemon/scheduling/scheduler.py): the blocked job's reservation from the placed
jobs' run-time estimates, and who may start ahead of it. One scenario each, named after what a user would notice.

The host in most: GPU 0 held whole by `long` (ends in an hour), GPU 1 by `short`'s 100 GiB (ends in 10 min), both
not preemptible; `big` (a whole GPU) waits for GPU 1."""

from __future__ import annotations

from isaacd.scheduling.scheduler import schedule

from test_scheduler import H200, holds, host, placed, wants

NOW = 10_000.0


def busy_host(short_ends: float | None = NOW + 600, long_ends: float | None = NOW + 3600) -> list:
    return [holds("long", (0,), None, preemptible=False, ends_at=long_ends),
            holds("short", (1,), 100, preemptible=False, ends_at=short_ends),
            wants("big", None, order=1)]


def test_the_blocked_job_is_reserved_the_gpu_whose_job_ends_first_by_its_estimate():
    s = schedule(busy_host(), host(2), now=NOW)
    assert placed(s) == {}
    assert s.reservation is not None and (s.reservation.job, s.reservation.at, s.reservation.gpus) == \
        ("big", NOW + 600, (1,))
    w = s.waiting[0]
    assert w.job == "big" and w.starts_at == NOW + 600
    assert "reserved: GPU 1 once short ends (by its estimate)" in w.reason
    assert s.valid_until == NOW + 600  # the pass's answer may change when short's estimate runs out


def test_a_job_not_preemptible_starts_ahead_when_its_estimate_ends_before_the_reservation():
    jobs = busy_host() + [wants("quick", 30, order=2, preemptible=False, run_seconds=300)]
    s = schedule(jobs, host(2), now=NOW)
    assert placed(s) == {"quick": (1,)}
    p = s.placements[0]
    assert p.backfill and p.deadline == NOW + 600
    assert "its estimate (about 5 min) ends before big's reservation" in p.reason


def test_one_whose_estimate_ends_after_the_reservation_is_refused_and_says_why():
    jobs = busy_host() + [wants("slow", 30, order=2, preemptible=False, run_seconds=900)]
    s = schedule(jobs, host(2), now=NOW)
    assert placed(s) == {}
    assert [w.job for w in s.waiting] == ["big", "slow"]
    assert "its estimate (about 15 min) ends after big's reservation" in s.waiting[1].reason


def test_one_without_an_estimate_is_refused_unless_preemptible_which_starts_as_before():
    jobs = busy_host() + [wants("unknown", 30, order=2, preemptible=False),
                          wants("willing", 5, order=3)]  # preemptible, no estimate
    s = schedule(jobs, host(2), now=NOW)
    assert placed(s) == {"willing": (1,)}
    assert "no estimate of its run time" in s.waiting[1].reason
    assert "preemptible: gives the GPUs back when it could run" in s.placements[0].reason


def test_a_job_that_runs_beside_the_reservation_starts_ahead_whatever_its_estimate():
    # 3 GPUs: GPU 2 has 100 GiB free and the reservation (GPU 1) does not need it
    jobs = busy_host() + [holds("third", (2,), 40, preemptible=False, ends_at=NOW + 7200),
                          wants("side", 60, order=2, preemptible=False)]  # no estimate at all
    s = schedule(jobs, host(3), now=NOW)
    assert placed(s) == {"side": (2,)}
    assert "beside the room reserved for it" in s.placements[0].reason and s.placements[0].deadline is None


def test_no_reservation_while_the_room_it_needs_is_held_by_a_job_with_no_estimate():
    jobs = busy_host(short_ends=None, long_ends=None) + [wants("quick", 30, order=2, preemptible=False, run_seconds=60)]
    s = schedule(jobs, host(2), now=NOW)
    assert s.reservation is None and placed(s) == {}
    assert "reserved" not in s.waiting[0].reason
    assert "no estimate says when big can start" in s.waiting[1].reason


def test_an_overdue_job_counts_as_ending_now_so_nothing_starts_ahead_on_an_estimate():
    jobs = busy_host(short_ends=NOW - 60) + [wants("quick", 30, order=2, preemptible=False, run_seconds=60)]
    s = schedule(jobs, host(2), now=NOW)
    assert s.reservation is not None and s.reservation.at == NOW
    assert placed(s) == {} and "ends after big's reservation" in s.waiting[1].reason


def test_a_preemptible_backfill_still_running_past_the_reservation_is_preempted_with_a_save():
    # short ended; quick started ahead at NOW on a 5-minute estimate and still runs at NOW + 700
    jobs = [holds("long", (0,), None, preemptible=False, ends_at=NOW + 3600),
            holds("quick", (1,), 30, order=2, since=NOW, backfill=True, ends_at=NOW + 300),
            wants("big", None, order=1)]
    s = schedule(jobs, host(2), now=NOW + 700)
    assert [(p.victim, p.by) for p in s.preemptions] == [("quick", "big")]  # no minimum run time for a backfill
    assert "saving at the next iteration boundary" in s.preemptions[0].reason


def test_a_job_not_preemptible_whose_estimate_proved_wrong_is_not_started_ahead_on_it_again():
    ok = schedule(busy_host() + [wants("quick", 30, order=2, preemptible=False, run_seconds=300)], host(2), now=NOW)
    assert placed(ok) == {"quick": (1,)}
    again = busy_host() + [wants("quick", 30, order=2, preemptible=False, run_seconds=300, overran=True)]
    s = schedule(again, host(2), now=NOW)
    assert placed(s) == {}
    assert "its estimate did not hold when it last started ahead" in s.waiting[1].reason


def test_a_job_placed_in_the_same_pass_counts_for_the_reservation_by_its_own_estimate():
    # GPU 1 empty: first takes it (its estimate: 20 min); then big finds no GPU and is reserved GPU 1 at +20 min
    jobs = [holds("long", (0,), None, preemptible=False, ends_at=NOW + 3600),
            wants("first", 100, priority=5, preemptible=False, run_seconds=1200),
            wants("big", None, order=1), wants("quick", 30, order=2, preemptible=False, run_seconds=600)]
    s = schedule(jobs, host(2), now=NOW)
    assert placed(s) == {"first": (1,), "quick": (1,)}
    assert s.reservation is not None and s.reservation.at == NOW + 1200 and s.reservation.gpus == (1,)


def test_without_any_estimate_the_queue_behaves_as_before():
    jobs = [holds("long", (0,), None, preemptible=False), holds("short", (1,), 100, preemptible=False),
            wants("big", None, order=1), wants("strict", 30, order=2, preemptible=False), wants("willing", 5, order=3)]
    s = schedule(jobs, host(2), now=NOW)
    assert placed(s) == {"willing": (1,)} and s.reservation is None and s.valid_until == float("inf")
    assert H200 > 0
