"""Room on the GPUs as one scheduling pass takes it (scheduling/scheduler.py): each place's total, what the jobs placed
there asked for, who holds it whole, and what others use beyond the asks. Pure, like the scheduler."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..jobs.queue_entry import QueueEntry, Request


@dataclass(frozen=True)
class Gpu:
    """One physical GPU as placement sees it."""

    index: int
    total_bytes: int
    used_bytes: int | None = None  # NVML's used memory; None: unknown (only the asks count)
    unusable: str | None = None  # why no new job may go here ("XID 79", "84 °C"): jobs on it stay


@dataclass(frozen=True)
class PinnedJob:
    """A job that names its GPUs in the config: it holds them whole while it may run, outside the queue."""

    name: str
    gpus: tuple[int, ...]



# ---- room on the GPUs ----------------------------------------------------------------------------------------------
@dataclass
class Room:
    """What each GPU has left, as the decisions of this pass take it."""

    gpus: dict[int, Gpu]
    asked: dict[int, int] = field(default_factory=dict)  # bytes the holders asked for (spares included)
    whole: dict[int, str] = field(default_factory=dict)  # GPU -> the job that holds it whole
    holders: dict[int, set[str]] = field(default_factory=dict)
    foreign: dict[int, int] = field(default_factory=dict)  # bytes used beyond the asks (other processes, overuse)

    @classmethod
    def of(cls, gpus: Sequence[Gpu], jobs: Sequence[QueueEntry], pinned: Sequence[PinnedJob]) -> "Room":
        room = cls({g.index: g for g in gpus})
        for p in pinned:
            for i in p.gpus:
                if i in room.gpus:
                    room.whole.setdefault(i, p.name)
                    room.holders.setdefault(i, set()).add(p.name)
        for j in jobs:
            if j.placement:
                room.take(j, j.placement, with_spare=True)
        queued_whole = {i for j in jobs if j.placement and j.request.memory_bytes is None for i in j.placement}
        for g in gpus:
            # what is used beyond the asks is others' memory; on a GPU a queued job holds whole, all of it is that
            # job's (preempting it frees the GPU)
            if g.used_bytes is not None and g.index not in queued_whole:
                room.foreign[g.index] = max(0, g.used_bytes - room.asked.get(g.index, 0))
        return room

    def take(self, job: QueueEntry, gpus: Iterable[int], with_spare: bool = False) -> None:
        for i in gpus:
            if i not in self.gpus:
                continue  # a GPU gone from the inventory: nothing to count it against
            self.holders.setdefault(i, set()).add(job.name)
            if job.request.memory_bytes is None:
                self.whole[i] = job.name
            else:
                self.asked[i] = self.asked.get(i, 0) + job.request.memory_bytes + (job.spare_bytes if with_spare
                                                                                     else 0)

    def without(self, jobs: Iterable[QueueEntry], spares_of: Iterable[QueueEntry] = ()) -> "Room":
        """The room if these jobs gave their GPUs back (and these spares went)."""
        new = Room(self.gpus, dict(self.asked), dict(self.whole), {k: set(v) for k, v in self.holders.items()},
                    dict(self.foreign))
        for j in jobs:
            for i in j.placement:
                if i not in new.gpus:
                    continue
                new.holders.get(i, set()).discard(j.name)
                if new.whole.get(i) == j.name:
                    del new.whole[i]
                elif j.request.memory_bytes is not None:
                    new.asked[i] = new.asked.get(i, 0) - j.request.memory_bytes - j.spare_bytes
        for j in spares_of:
            if j.request.memory_bytes is not None and j.spare_bytes:
                for i in j.placement:
                    if i in new.gpus:
                        new.asked[i] = new.asked.get(i, 0) - j.spare_bytes
        return new

    def free(self, i: int) -> int:
        g = self.gpus[i]
        if i in self.whole:
            return 0
        return g.total_bytes - self.asked.get(i, 0) - self.foreign.get(i, 0)

    def fits_on(self, i: int, req: Request) -> bool:
        if self.gpus[i].unusable is not None or i in self.whole:
            return False
        if req.memory_bytes is None:  # a whole GPU: nobody else on it
            return not self.holders.get(i) and self.asked.get(i, 0) <= 0
        return self.free(i) >= req.memory_bytes

    def best_fit(self, req: Request) -> tuple[int, ...] | None:
        """The `req.gpus` GPUs it fits on most tightly (least room left after it), or None."""
        fits = [i for i in sorted(self.gpus) if self.fits_on(i, req)]
        if len(fits) < req.gpus:
            return None
        need = req.memory_bytes or 0
        fits.sort(key=lambda i: (self.free(i) - need, i))
        return tuple(sorted(fits[:req.gpus]))
