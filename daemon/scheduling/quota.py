"""Quotas on a shared GPU host (issue 32): how much of it one user, or one group's members together, may hold, and how
many of their jobs count as waiting in line. Pure, like the scheduler that asks it (scheduler.py); the queue's hook
(hook.py) builds the `Quotas` from `[access]`.

What counts, per owner and per group of theirs that has a quota:
  * GPUs held by their placed jobs (running, starting, saving after a preemption): a whole GPU counts 1, a
    `gpu_memory` job its share of each GPU it is on (asked / the GPU's total), a job on a MIG instance the
    instance's share of its GPU (the instance's memory / the GPU's: it holds the instance whole, room.Gpu.holds);
  * GPU memory held: a whole GPU its total, a `gpu_memory` job what it asked for on each GPU, a job on a MIG
    instance the instance's memory;
  * jobs waiting: only the first `queued` of them (in the queue's order) wait in line; the rest wait behind everyone.
A job whose placement would take its owner or one of their groups past a quota waits, saying so; it is never refused,
it blocks nobody behind it, and it preempts no one to get around its quota.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..jobs.queue_entry import QueueEntry
from .room import Gpu, Place, held_on

GiB = 2**30
SLACK = 1e-9  # float shares (1/3 + 1/3 + 1/3): a quota met exactly is not exceeded


@dataclass(frozen=True)
class Quota:
    """How much one user (or one group's members together) may hold; None: no limit of that kind."""

    gpus: float | None = None
    gpu_memory_bytes: int | None = None
    queued: int | None = None  # jobs that count as waiting in line


@dataclass(frozen=True)
class Quotas:
    users: Mapping[str, Quota] = field(default_factory=dict)  # by owner name
    groups: Mapping[str, Quota] = field(default_factory=dict)  # by group name: its members together


@dataclass
class Held:
    gpus: float = 0.0
    memory_bytes: int = 0


class Ledger:
    """What each owner and group holds, as the decisions of one scheduling pass take it."""

    def __init__(self, quotas: Quotas, places: Sequence[Gpu], jobs: Sequence[QueueEntry]):
        self.quotas = quotas
        self.places = {g.index: g for g in places}  # this pass's places (room.py): their memory, an instance's GPU's
        self.held: dict[tuple[str, str], Held] = {}  # ("user", name) / ("group", name) -> held
        for j in jobs:
            if j.placement and not j.waiting:
                self.take(j, j.placement)

    def _holders(self, job: QueueEntry) -> list[tuple[tuple[str, str], Quota]]:
        out = []
        if job.owner is not None and job.owner in self.quotas.users:
            out.append((("user", job.owner), self.quotas.users[job.owner]))
        out += [(("group", g), self.quotas.groups[g]) for g in job.groups if g in self.quotas.groups]
        return out

    def cost(self, job: QueueEntry, gpus: Sequence[Place] | None) -> Held:
        """What placing `job` on `gpus` holds; `gpus` None: the least it could hold anywhere on this host."""
        mem = job.request.memory_bytes
        if gpus is None:
            return self._least(job)
        held = Held()
        for i in gpus:  # a GPU gone from the inventory: counted whole
            n, b = held_on(self.places.get(i), mem)
            held.gpus += n
            held.memory_bytes += b
        return held

    def _least(self, job: QueueEntry) -> Held:
        """The least `job` could hold anywhere here, each kind apart: its ranks on the places that could take one
        (a MIG instance only one rank of a `gpu_memory` job that fits it: it then holds the instance whole)."""
        n, mem = job.request.gpus, job.request.memory_bytes
        takes_mig = n == 1 and mem is not None
        can = [g for g in self.places.values() if (takes_mig or not g.mig) and (mem is None or g.total_bytes >= mem)]
        if not can:
            return Held()
        costs = [g.holds(mem) for g in can]
        shares = sorted(c[0] for c in costs)
        sizes = sorted(c[1] for c in costs)
        return Held(sum(shares[:n]), sum(sizes[:n]))

    def take(self, job: QueueEntry, gpus: Sequence[Place]) -> None:
        cost = self.cost(job, gpus)
        for key, _ in self._holders(job):
            h = self.held.setdefault(key, Held())
            h.gpus += cost.gpus
            h.memory_bytes += cost.memory_bytes

    def refusal(self, job: QueueEntry, gpus: Sequence[Place] | None) -> str | None:
        """Why placing `job` on `gpus` (None: anywhere) would take its owner or a group of theirs past a quota."""
        holders = self._holders(job)
        if not holders:
            return None
        need = self.cost(job, gpus)
        for key, quota in holders:
            h = self.held.get(key, Held())
            who = _who(key)
            if quota.gpus is not None and h.gpus + need.gpus > quota.gpus + SLACK:
                return (f"{who} quota: {_n(h.gpus)} of {_n(quota.gpus)} GPUs in use (this job needs {_n(need.gpus)}); "
                        "it starts when enough of them is free")
            if quota.gpu_memory_bytes is not None and h.memory_bytes + need.memory_bytes > quota.gpu_memory_bytes:
                return (f"{who} quota: {_n(h.memory_bytes / GiB)} of {_n(quota.gpu_memory_bytes / GiB)} GiB of GPU "
                        f"memory in use (this job needs {_n(need.memory_bytes / GiB)} GiB); it starts when enough of "
                        "it is free")
        return None

    def in_line(self, waiting: Sequence[QueueEntry]) -> tuple[list[QueueEntry], dict[str, str]]:
        """The waiting jobs (in the queue's order) with those past a `queued` quota moved behind everyone's, and why
        each of those waits there."""
        counted: dict[tuple[str, str], int] = {}
        front: list[QueueEntry] = []
        back: list[QueueEntry] = []
        why: dict[str, str] = {}
        for job in waiting:
            over = next(((key, q) for key, q in self._holders(job)
                         if q.queued is not None and counted.get(key, 0) >= q.queued), None)
            if over is None:
                front.append(job)
                for key, _ in self._holders(job):
                    counted[key] = counted.get(key, 0) + 1
            else:
                key, q = over
                back.append(job)
                why[job.name] = (f"{_who(key)} quota: {q.queued} jobs waiting in line (queued = {q.queued}); this one "
                                 "waits behind everyone's")
        return front + back, why


def _who(key: tuple[str, str]) -> str:
    kind, name = key
    return f"{name}'s" if kind == "user" else f"group {name}'s"


def _n(x: float) -> str:
    return f"{round(x, 2):g}"
