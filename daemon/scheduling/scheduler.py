"""The one scheduler of a shared GPU host (issue 31): which queued jobs start on which GPUs, and which running ones
give theirs back. Pure: `schedule(jobs, gpus, now, limits)` -> a `Schedule`; no I/O, no clock, no randomness, in the
style of jobs/machine.py. Its jobs are the jobs' queue entries as they are (jobs/queue_entry.py `QueueEntry`: the
one record of a job's request and place). The supervisor's queue hook (scheduling/hook.py) calls it each tick with
them and the GPU snapshot, and hands its answers to the jobs' state machines as commands (`Placed`, `Preempt`), so a
decision is saved with the job before it acts and a supervisor killed mid-preemption neither loses nor duplicates a
job.

The rules, each a scenario in tests/test_scheduler.py:
  * Order: priority (higher first), then submission time (earlier first), then name.
  * Packing: a job asks for `gpus` GPUs (its ranks, placed as one gang on distinct GPUs) with `memory_bytes` each, or
    the whole GPUs (`memory_bytes` None). It goes to the GPUs where it fits most tightly (best fit: least room left),
    so big holes stay for big jobs. A GPU's room: its total less what the jobs placed on it asked for (their spares'
    memory counted as theirs) and less what others use beyond that (NVML's used memory less the asks).
  * Never on a cordoned GPU (an XID, a watchdog) or a hot one; jobs already there stay.
  * A job that does not fit blocks the queue behind it, and gets a reservation (issue 42, EASY backfill): the time
    enough room frees by the placed jobs' run-time estimates (`QueueEntry.ends_at`, scheduling/estimates.py), and
    the GPUs it will take then. A later job that fits now may start ahead of it (backfill) when it runs beside that
    reservation (the room left with the blocked job placed on its reserved GPUs at that time), or its own estimate
    (`run_seconds`) ends before it, whether it is preemptible or not; a preemptible job may also start ahead with no
    estimate, and gives its GPUs back as soon as the blocked job could run (no minimum run time for it). A job whose
    estimate proved wrong (`overran`) is not started ahead on an estimate again. A job not preemptible, without an
    estimate that ends in time, waits.
  * A blocked job that would fit without the spares on the GPUs it needs drops those spares first.
  * Else it preempts the fewest jobs it outranks (lower priority, or a backfill behind it), lowest priority and most
    recently started first, among the preemptible ones past their minimum run time; each saves at its next iteration
    boundary and goes back to the queue. While victims stop, it waits for them and preempts no more.
  * A job backing off after a failed attempt holds no GPUs (issue 37): it keeps its place in line and is placed
    again, in its turn, once its backoff has passed; meanwhile it blocks nobody and preempts nobody.
  * Quotas (issue 32, quota.py): a job whose placement would take its owner (or a group of theirs) past a quota of
    GPUs or GPU memory held waits, saying so; it blocks nobody behind it and preempts nobody to get past it. Past a
    `queued` quota, an owner's later jobs wait behind everyone's.
  * Best fit within the quota (issue 42): where the tightest fit would take the owner past a quota but another place
    with room would not (a MIG instance counts its whole share of its GPU, an ask on a shared GPU only its own), the
    job goes to the best fit among the places within it, under the same rules as any placement (backfill, the
    reservation); it waits for its quota only when no such place has room. Preemption and reservations still take
    the tightest fit, as before. Scenario: tests/test_scheduler_mig.py.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from ..jobs.queue_entry import GiB, QueueEntry, Request  # noqa: F401 - Request re-exported (tests, bench)
from .quota import Ledger, Quotas
from .room import Gpu, PinnedJob, Place, Room, place_name

MAX_VICTIM_SETS = 20_000  # preemption search: subsets tried before the greedy fallback (the 40-job benchmark on 8
# GPUs: 998 searches, none reached it)


@dataclass(frozen=True)
class Limits:
    min_run_seconds: float = 300.0  # a job runs this long before a higher priority may preempt it (no thrashing)


@dataclass(frozen=True)
class Placement:
    job: str
    gpus: tuple[int, ...]
    backfill: bool  # placed ahead of a blocked job
    reason: str
    # started ahead of a reservation on its estimate: still running at this time (monotonic), its estimate proved
    # wrong (a preemptible one is preempted then, if the blocked job needs its room; one not preemptible overran)
    deadline: float | None = None


@dataclass(frozen=True)
class Preemption:
    victim: str
    by: str
    reason: str


@dataclass(frozen=True)
class SpareDrop:
    job: str
    by: str
    reason: str


@dataclass(frozen=True)
class Waiting:
    """A job left in the queue: its place (1 = next) and why, in words for `isaacd status` and `isaacd queue`."""

    job: str
    position: int
    reason: str
    starts_at: float | None = None  # the blocked job's reservation (monotonic): when it starts by the estimates


@dataclass(frozen=True)
class Reservation:
    """The blocked job's place in the future (issue 42): at `at` (monotonic) by the placed jobs' estimates, on
    `gpus`; `room`: what is left then with it placed (None: its room is already held for it now, on top of victims
    or spares that are going, and what is free now is all outside it)."""

    job: str
    at: float
    gpus: tuple[int, ...]
    room: "Room | None" = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Schedule:
    placements: tuple[Placement, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    spare_drops: tuple[SpareDrop, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    reservation: Reservation | None = None
    # until when (monotonic) the same inputs give this answer, as far as the estimates go: the next placed job's
    # expected end (past it, it is overdue and counted as ending now) or the reservation (stable_until adds the rest)
    valid_until: float = math.inf


# ---- the pass ---------------------------------------------------------------------------------------------------
def queue_order(jobs: Iterable[QueueEntry]) -> list[QueueEntry]:
    """Priority first (higher first), then submission, then name: the order `isaacd queue` lists."""
    return sorted(jobs, key=lambda j: (-j.priority, j.order, j.name))


def schedule(jobs: Sequence[QueueEntry], gpus: Sequence[Gpu], now: float, limits: Limits = Limits(),
             pinned: Sequence[PinnedJob] = (), quotas: Quotas = Quotas()) -> Schedule:
    room = Room.of(gpus, jobs, pinned)
    ledger = Ledger(quotas, gpus, jobs)  # what owners and groups hold (quota.py; an instance counts its GPU share)
    placements: list[Placement] = []
    preemptions: list[Preemption] = []
    drops: list[SpareDrop] = []
    waiting: list[Waiting] = []
    blocked: QueueEntry | None = None  # the first job that could not be placed
    victims_taken: set[str] = {j.name for j in jobs if j.preempting}
    # Only a job that holds GPUs can be a victim, a spare, a stopping job or "ahead" in a reason: the per-job steps
    # below look at these few, not at every job (1,000 queued jobs made each pass O(N^2): issue 39's scale goal).
    # Same order as `jobs`, so every tie is broken as before.
    placed = [j for j in jobs if j.placement]
    holders = list(placed)  # and the jobs placed in this pass, as holders with their estimates (reservations)
    reserved: Reservation | None = None  # the blocked job's reservation, once it has one
    in_line, behind = ledger.in_line(queue_order(j for j in jobs if j.waiting or j.not_before is not None))
    for job in in_line:
        if job.not_before is not None:  # its backoff: at its place, not yet to be placed
            waiting.append(Waiting(job.name, len(waiting) + 1, f"backing off after a failed attempt: its GPUs given "
                                                               f"back; in line again in {max(job.not_before - now, 0):.0f} s"))
            continue
        if not room.possible(job.request):  # could it ever fit this host, every place empty?
            waiting.append(Waiting(job.name, len(waiting) + 1, room.never(job.request)))
            continue
        if (over := ledger.refusal(job, None)) is not None:  # past a quota wherever it went: it blocks nobody
            waiting.append(Waiting(job.name, len(waiting) + 1, over))
            continue
        where = room.best_fit(job.request)
        if blocked is not None and not job.preemptible and where is None:
            waiting.append(Waiting(job.name, len(waiting) + 1, f"behind {blocked.name}, which waits for GPUs; "
                                                               "not preemptible, so it may not start ahead of it"))
            continue
        moved = ""  # why it is not on its tightest fit: that one would take its owner past a quota
        if where is not None and (over := ledger.refusal(job, where)) is not None:
            if (within := _within_quota(job, room, ledger)) is None:
                waiting.append(Waiting(job.name, len(waiting) + 1, over))
                continue
            tightest = ", ".join(place_name(i) for i in where)
            moved = f"; within its owner's quota (not on {tightest}: {over.split(';')[0]})"
            where = within
        ahead: tuple[str, float | None] | None = None
        if where is not None and blocked is not None:
            ahead = _ahead(job, where, blocked, reserved, now)
            if ahead is None:
                waiting.append(Waiting(job.name, len(waiting) + 1, _not_ahead(job, blocked, reserved)))
                continue
        if where is None and job.name in behind:  # past its `queued` quota: it waits, and moves nobody
            waiting.append(Waiting(job.name, len(waiting) + 1,
                                   f"{behind[job.name]}; {_short(job, room, placed, now, limits)}"))
            continue
        if where is not None:
            why, deadline = ahead if ahead is not None else ("fits", None)
            placements.append(Placement(job.name, where, blocked is not None, why + moved, deadline))
            room.take(job, where)
            ledger.take(job, where)
            holders.append(replace(job, placement=where, waiting=False, placed_at=now,
                                   ends_at=None if job.run_seconds is None else now + job.run_seconds))
            continue
        # it does not fit now: room the stopping victims will leave, then spares, then preemption
        stopping = [j for j in placed if j.name in victims_taken]
        held_now: tuple[int, ...] | None = None  # its room held for it now, on top of what is going
        if stopping and (after := room.without(stopping).best_fit(job.request)) is not None:
            names = ", ".join(sorted(j.name for j in stopping))
            reason = f"needs {job.request.describe()}; waiting for {names} to save and stop"
            # reserved on top of the victims, who still hold it while they save: nobody behind takes that room
            # (a backfill would be preempted again at once), nor is it counted free before they are gone
            room.take(job, after)
            held_now = after
        elif (spared := _spares_in_the_way(job, room, placed)) is not None:
            drops += [SpareDrop(s.name, job.name, f"its warm spare's GPU memory is needed by {job.name} "
                                                   f"({job.request.describe()})") for s in spared]
            reason = f"needs {job.request.describe()}; dropping the warm spares of {', '.join(s.name for s in spared)}"
            # reserved on top of the spares (they hold their memory until killed): nobody behind takes that room
            held_now = room.without((), spared).best_fit(job.request) or ()
            room.take(job, held_now)
        elif (chosen := _victims(job, placed, room, now, limits, victims_taken)) is not None and \
                (over := ledger.refusal(job, room.without(chosen).best_fit(job.request))) is not None:
            waiting.append(Waiting(job.name, len(waiting) + 1, over))  # no preemption to get past its quota
            continue
        elif chosen is not None:
            for v in chosen:
                preemptions.append(Preemption(v.name, job.name, _preempt_reason(v, job)))
                victims_taken.add(v.name)
            reason = f"needs {job.request.describe()}; preempting {', '.join(v.name for v in chosen)}"
            # reserved on top of the victims (they hold their memory until they saved): the rest of what they
            # will free is not handed to anyone else in this pass either
            held_now = room.without(chosen).best_fit(job.request) or ()
            room.take(job, held_now)
        else:
            reason = _short(job, room, placed, now, limits)
        starts_at = None
        if blocked is None:
            blocked = job
            if held_now is not None:
                reserved = Reservation(job.name, now, held_now)
            elif (reserved := _reserve(job, room, holders, now)) is not None:
                starts_at = reserved.at
                reason += f"; reserved: {_describe(reserved, holders, now)}"
        waiting.append(Waiting(job.name, len(waiting) + 1, reason, starts_at))
    return Schedule(tuple(placements), tuple(preemptions), tuple(drops), tuple(waiting), reserved,
                    _valid_until(placed, reserved, now))


# ---- reservations (issue 42) ---------------------------------------------------------------------------------------
def _end(j: QueueEntry, now: float) -> float | None:
    """When a placed job gives its room back by its estimate: a stopping one now; one past its estimate (overdue)
    now too, as the soonest it may; None: not known."""
    if j.preempting:
        return now
    return None if j.ends_at is None else max(j.ends_at, now)


def _reserve(job: QueueEntry, room: Room, holders: Sequence[QueueEntry], now: float) -> Reservation | None:
    """The blocked job's reservation: the earliest time enough room frees, releasing the placed jobs in the order
    their estimates end, and the GPUs it takes then; None when it needs the room of a job with no estimate."""
    ending = sorted(((e, j.name, j) for j in holders if (e := _end(j, now)) is not None), key=lambda t: t[:2])
    released: list[QueueEntry] = []
    for at, _, j in ending:
        released.append(j)
        future = room.without(released)
        if (gpus := future.best_fit(job.request)) is not None:
            future.take(job, gpus)
            return Reservation(job.name, at, gpus, future)
    return None


def _describe(r: Reservation, holders: Sequence[QueueEntry], now: float) -> str:
    """The reservation in words without a clock (a reason is compared pass to pass): whose estimated ends free it."""
    gone = sorted(j.name for j in holders if (e := _end(j, now)) is not None and e <= r.at and set(j.placement) &
                  set(r.gpus))
    where = ", ".join(place_name(i) for i in r.gpus)
    who = ", ".join(gone[:3]) + (" ..." if len(gone) > 3 else "")
    ends = f"{who} ends (by its estimate)" if len(gone) == 1 else f"{who or 'the jobs there'} end (by their estimates)"
    return f"{where} once {ends}; only jobs that end before then, or fit beside it, start ahead"


def _ahead(job: QueueEntry, where: tuple[int, ...], blocked: QueueEntry, r: Reservation | None,
           now: float) -> tuple[str, float | None] | None:
    """May `job`, which fits now on `where`, start ahead of the blocked job? (why, its deadline), or None."""
    if r is not None and (r.room is None or all(r.room.fits_on(i, job.request) for i in where)):
        if r.room is not None:
            r.room.take(job, where)  # it may run past the reservation: the room it keeps is not the blocked job's
        return f"ahead of {blocked.name} (blocked): beside the room reserved for it", None
    if r is not None and job.run_seconds is not None and not job.overran and now + job.run_seconds <= r.at:
        return (f"ahead of {blocked.name} (blocked): its estimate ({_dur(job.run_seconds)}) ends before "
                f"{blocked.name}'s reservation"), r.at
    if job.preemptible:
        return f"ahead of {blocked.name} (blocked), preemptible: gives the GPUs back when it could run", None
    return None


def _not_ahead(job: QueueEntry, blocked: QueueEntry, r: Reservation | None) -> str:
    head = f"behind {blocked.name}, which waits for GPUs; not preemptible, so it may not start ahead of it but " \
           f"beside its reservation or on an estimate that ends before it: "
    if r is None:
        return head + f"no estimate says when {blocked.name} can start"
    if job.overran:
        return head + "its estimate did not hold when it last started ahead (it ran past a reservation)"
    if job.run_seconds is None:
        return head + "no estimate of its run time (no earlier run of its task, library and num_envs here)"
    return head + f"its estimate ({_dur(job.run_seconds)}) ends after {blocked.name}'s reservation"


def _valid_until(placed: Sequence[QueueEntry], r: Reservation | None, now: float) -> float:
    """The answer's deadlines from the estimates: a placed job's expected end (past it, it counts as ending now)
    and the reservation's time."""
    times = [j.ends_at for j in placed if j.ends_at is not None and j.ends_at > now]
    if r is not None and r.at > now:
        times.append(r.at)
    return min(times, default=math.inf)


def _dur(seconds: float) -> str:
    m = round(seconds / 60)
    return f"about {m // 60}h{m % 60:02d}m" if m >= 60 else f"about {max(m, 1)} min"


def stable_until(jobs: Sequence[QueueEntry], now: float, limits: Limits = Limits()) -> float:
    """Until when (monotonic) a pass over these same entries, GPUs and quotas gives the same answer as at `now`: the
    pass reads the time only for a job still backing off (its countdown in the reason) and for a placed job that ran
    under min_run_seconds (not preemptible until then). The hook reuses its last answer until then (issue 39: a pass
    over 1,000 queued jobs five times a second when nothing changed)."""
    if any(j.not_before is not None for j in jobs):
        return now  # a countdown in its reason: every pass is new
    ends = [end for j in jobs if j.placed_at is not None and (end := j.placed_at + limits.min_run_seconds) > now]
    return min(ends, default=math.inf)


def _within_quota(job: QueueEntry, room: Room, ledger: Ledger) -> tuple[Place, ...] | None:
    """The best fit among the places within the owner's quotas, for a job whose tightest fit is past one (a MIG
    instance counts its whole share of its GPU: an 8 GiB job holds 0.125 of an H200 on a 1g.18gb, 0.06 beside others
    on a shared one). A place is within them when every rank there would be (its cost times the ranks): then any
    choice of such places is, as their sum is at most the ranks times the dearest. None: no such place has room."""
    ranks = max(1, job.request.gpus)
    return room.best_fit(job.request, lambda i: ledger.refusal(job, (i,) * ranks) is None)


def _spares_in_the_way(job: QueueEntry, room: Room, jobs: Sequence[QueueEntry]) -> list[QueueEntry] | None:
    """The fewest spares whose memory, once freed, lets `job` fit; None when dropping every spare is not enough."""
    with_spares = [j for j in jobs if j.spare_bytes and j.placement and not j.preempting]
    if not with_spares:
        return None
    freed = room.without((), with_spares).best_fit(job.request)
    if freed is None:
        return None
    return [j for j in with_spares if set(j.placement) & set(freed)]


def _outranks(job: QueueEntry, other: QueueEntry) -> bool:
    """`job` may take `other`'s GPUs: a higher priority, or `other` is a backfill that started ahead of it."""
    if other.priority < job.priority:
        return True
    return other.backfill and other.priority == job.priority and (other.order, other.name) > (job.order, job.name)


def _preemptible_by(job: QueueEntry, other: QueueEntry, now: float, limits: Limits) -> str | None:
    """Why `job` may not preempt `other`, or None if it may."""
    if not other.placement or other.waiting or other.preempting:
        return "not running"
    if not _outranks(job, other):
        return "not outranked"
    if not other.preemptible:
        return "preemptible = false"
    young = other.placed_at is not None and now - other.placed_at < limits.min_run_seconds
    if young and not other.backfill:
        return f"ran under min_run_seconds = {limits.min_run_seconds:g}"
    return None


def _victims(job: QueueEntry, jobs: Sequence[QueueEntry], room: Room, now: float, limits: Limits,
             taken: set[str]) -> list[QueueEntry] | None:
    """The fewest jobs to preempt so that `job` fits: among sets of one size, the lowest priorities, then the most
    recently started (the least work set back... none is lost either way: each saves first)."""
    candidates = [o for o in jobs if o.name not in taken and _preemptible_by(job, o, now, limits) is None]
    if not candidates:
        return None
    stopping = [j for j in jobs if j.name in taken and j.placement]
    base = room.without(stopping)
    if base.without(candidates).best_fit(job.request) is None:
        return None

    def cost(vs: Sequence[QueueEntry]) -> tuple[int, float]:
        return (sum(v.priority for v in vs), -sum(v.placed_at or 0.0 for v in vs))

    tried = 0
    for size in range(1, len(candidates) + 1):
        best: tuple[QueueEntry, ...] | None = None
        for combo in itertools.combinations(candidates, size):
            tried += 1
            if tried > MAX_VICTIM_SETS:
                return _greedy(job, candidates, base)
            if base.without(combo).best_fit(job.request) is not None and (best is None or cost(combo) < cost(best)):
                best = combo
        if best is not None:
            return sorted(best, key=lambda v: (v.priority, -(v.placed_at or 0.0), v.name))
    return None


def _greedy(job: QueueEntry, candidates: list[QueueEntry], base: Room) -> list[QueueEntry] | None:
    chosen: list[QueueEntry] = []
    for v in sorted(candidates, key=lambda v: (v.priority, -(v.placed_at or 0.0), v.name)):
        chosen.append(v)
        if base.without(chosen).best_fit(job.request) is not None:
            return chosen
    return None


def _preempt_reason(victim: QueueEntry, by: QueueEntry) -> str:
    if victim.priority < by.priority:
        why = f"priority {by.priority} over {victim.priority}"
    else:
        why = "it had started ahead of it while it waited (backfill)"
    return f"preempted by {by.name} ({why}): saving at the next iteration boundary, then queued again"


def _short(job: QueueEntry, room: Room, jobs: Sequence[QueueEntry], now: float, limits: Limits) -> str:
    """Why a job waits, in words: what it needs, what is free, what runs ahead of it."""
    usable = [i for i in room.gpus if room.gpus[i].unusable is None]
    if job.request.memory_bytes is None:
        free = sum(1 for i in usable if room.fits_on(i, job.request))
        have = f"{free} free"
    else:
        most = max((room.free(i) for i in usable), default=0)
        fitting = sum(1 for i in usable if room.fits_on(i, job.request))
        have = f"{fitting} with room, the most free {most / GiB:.1f} GiB"
    out = [f"needs {job.request.describe()}; {have}"]
    off = [f"{place_name(i)}: {g.unusable}" for i, g in room.gpus.items() if g.unusable]  # in place order (Room.of)
    if off:
        out.append("not placing on " + ", ".join(off))
    held = [o for o in jobs if o.placement and not o.waiting and _outranks(job, o)]
    guarded = sorted({f"{o.name} ({why})" for o in held if (why := _preemptible_by(job, o, now, limits))})
    if guarded:
        out.append("not preempting " + ", ".join(guarded))
    ahead = [o for o in queue_order(jobs) if o.placement and not o.waiting and not _outranks(job, o)]
    if ahead:
        out.append("next after " + ", ".join(o.name for o in ahead[:3]) + (" ..." if len(ahead) > 3 else ""))
    return "; ".join(out)
