"""Room on the GPUs as one scheduling pass takes it (scheduling/scheduler.py): each place's total, what the jobs placed
there asked for, who holds it whole, and what others use beyond the asks. Pure, like the scheduler.

A place is where the queue puts one rank of a job (issue 42):
  * a physical GPU not in MIG mode, by its index (an int, as before MIG): shared by `gpu_memory` jobs packed by
    memory, or held whole by a job asking for whole GPUs;
  * a MIG instance, by the GPU layer's key "p:j" (a str: MIG device j of GPU p, the same spelling as CDI's
    `nvidia.com/gpu=p:j`). A GPU in MIG mode is never a place itself: its instances are. An instance takes one
    `gpu_memory` job of one rank that fits its memory, and that job holds it whole: a job on an instance never shares
    it (isolation is what MIG is for). A job asking for whole GPUs, or a gang of several ranks (CUDA shows a process
    one MIG device, and NCCL does not run across instances), goes only on GPUs not in MIG mode.
Best fit treats instances and shared GPUs alike: the place with the least room left after the job, so a job goes to
the smallest instance that holds it and big instances stay for big jobs. Where that place would take the job's owner
past a quota (an instance counts its whole share of its GPU), the scheduler asks for the best fit among the places
within the quota (`best_fit(req, accept)`), so a job that fits its quota somewhere does not wait for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..gpu.snapshot import GpuSnapshot
from ..jobs.queue_entry import GiB, QueueEntry, Request

Place = int | str  # a physical GPU's index, or a MIG instance's key "p:j"


def place_order(p: Place) -> tuple[int, int]:
    """The order places are listed and tried in: by physical GPU, its instances after it (an int and a key compare)."""
    if isinstance(p, int):
        return (p, -1)
    gpu, _, mig = str(p).partition(":")
    try:
        return (int(gpu), int(mig))
    except ValueError:
        return (2**31, 0)  # not a key this module makes: last


def place_name(p: Place) -> str:
    """A place in words: "GPU 1", "MIG 0:2"."""
    return f"MIG {p}" if isinstance(p, str) else f"GPU {p}"


@dataclass(frozen=True)
class Gpu:
    """One place as placement sees it: a physical GPU not in MIG mode, or a MIG instance (`parent` set)."""

    index: Place
    total_bytes: int
    used_bytes: int | None = None  # NVML's used memory; None: unknown (only the asks count)
    unusable: str | None = None  # why no new job may go here ("XID 79", "84 °C"): jobs on it stay
    parent: int | None = None  # a MIG instance's physical GPU; None: a GPU not in MIG mode
    parent_total_bytes: int | None = None  # a MIG instance's physical GPU's memory; None: not read (or no instance)

    @property
    def mig(self) -> bool:
        return self.parent is not None

    def holds(self, ask: int | None) -> tuple[float, int]:
        """What a rank asking `ask` bytes here (None: a whole GPU) holds, as the quotas, isaacd_user_gpus and a
        sweep's GPU-seconds count it: (GPUs, bytes). A whole GPU: 1 and its memory; a `gpu_memory` rank on a shared
        GPU: its share (ask / the GPU's memory) and what it asked. A rank on a MIG instance holds the instance whole
        (nobody else may use it), so it counts the instance, not its ask: the instance's share of its GPU (its memory
        / the GPU's, a 1g.18gb of an H200 about 0.13) and the instance's memory. An instance whose GPU's memory was
        not read counts 1, as any place without a reading does (never less than it may hold)."""
        if self.mig:
            share = self.total_bytes / self.parent_total_bytes if self.parent_total_bytes else 1.0
            return min(share, 1.0), self.total_bytes
        if ask is None:
            return 1.0, self.total_bytes
        return (ask / self.total_bytes if self.total_bytes else 1.0), ask


@dataclass(frozen=True)
class PinnedJob:
    """A job that names its GPUs in the config: it holds them whole while it may run, outside the queue."""

    name: str
    gpus: tuple[Place, ...]


def places(snap: GpuSnapshot | None, hot_celsius: float) -> list[Gpu]:
    """The places of this snapshot: total and used memory from NVML (a MIG instance's own, as NVML reports it on the
    instance's handle), and why one takes no new job: marked unhealthy by an XID or a watchdog, or hot (an instance
    by its GPU's: NVML gives no temperature on an instance, and an XID is its GPU's). A GPU with MIG devices is not a
    place (nor one in MIG mode with no instance); its instances are. No memory reading this pass: not placed on until
    there is one."""
    if snap is None or not snap.up:
        return []
    in_mig = {info.parent_index for info in snap.gpus.values() if info.is_mig}
    out = []
    for key, info in snap.gpus.items():
        if not info.is_mig and (info.mig_mode or info.index in in_mig):
            continue  # in MIG mode: never a place, even with no instance yet (CUDA would see no device)
        sample = snap.samples.get(key)
        if sample is None or not sample.memory_total_bytes:
            continue
        gpu = str(info.parent_index) if info.is_mig else key
        unusable = snap.unhealthy.get(key) or (snap.unhealthy.get(gpu) if info.is_mig else None)
        of_gpu = snap.samples.get(gpu)
        temp = of_gpu.temperature_celsius if of_gpu is not None else None
        if unusable is None and temp is not None and temp >= hot_celsius:
            unusable = f"hot ({temp:.0f} °C, [queue] hot_celsius = {hot_celsius:g})"
        parent_total = (of_gpu.memory_total_bytes or None) if info.is_mig and of_gpu is not None else None
        out.append(Gpu(key if info.is_mig else info.index, sample.memory_total_bytes, sample.memory_used_bytes,
                       unusable, info.parent_index if info.is_mig else None, parent_total))
    return sorted(out, key=lambda g: place_order(g.index))


def held_on(place: Gpu | None, ask: int | None) -> tuple[float, int]:
    """What a rank asking `ask` bytes (None: a whole GPU) holds on `place` (Gpu.holds); a place without a reading this
    pass (None): a whole GPU, and its ask or nothing in bytes."""
    return place.holds(ask) if place is not None else (1.0, ask or 0)


def mig_layout(snap: GpuSnapshot) -> list[Gpu] | None:
    """The queue's places on a host with GPUs in MIG mode, or None while its layout is being made: a GPU in MIG mode
    with no instance yet, or a place with no memory reading (an instance appears at isaacd's restart). What a submit
    may refuse by (scheduling/submit.py, sweeps/submit.py): without a whole layout nothing is refused, the job waits
    saying why."""
    in_mig = {info.parent_index for info in snap.gpus.values() if info.is_mig}
    if any(info.mig_mode and not info.is_mig and info.index not in in_mig for info in snap.gpus.values()):
        return None
    expected = sum(1 for info in snap.gpus.values() if info.is_mig or not (info.mig_mode or info.index in in_mig))
    where = places(snap, float("inf"))
    return where if len(where) == expected else None


def no_place(snap: GpuSnapshot) -> str:
    """Why a snapshot that is up has no place: no GPU, or GPUs in MIG mode without instances (or readings)."""
    bare = sorted(i.index for i in snap.gpus.values() if i.mig_mode and not any(
        m.is_mig and m.parent_index == i.index for m in snap.gpus.values()))
    if not bare:
        return "no GPU on this host"
    return (f"no place on this host: GPU {', '.join(map(str, bare))} in MIG mode with no MIG instance; create instances "
            f"(`nvidia-smi mig -i {bare[0]} -cgi <profiles> -C`) and restart isaacd, or turn MIG off")


def pinned_places(keys: Iterable[str], physical: Iterable[int]) -> tuple[Place, ...]:
    """A pinned job's places from its claim: its resolved devices' keys (a MIG device's "p:j"; a GPU brings its
    instances, gpu/assign.py) and the physical GPUs its spelling names."""
    out: set[Place] = set(physical)
    out.update(int(k) if k.isdigit() else k for k in keys)
    return tuple(sorted(out, key=place_order))


# ---- room on the GPUs ----------------------------------------------------------------------------------------------
@dataclass
class Room:
    """What each place has left, as the decisions of this pass take it."""

    gpus: dict[Place, Gpu]  # in place order
    asked: dict[Place, int] = field(default_factory=dict)  # bytes the holders asked for (spares included)
    whole: dict[Place, str] = field(default_factory=dict)  # place -> the job that holds it whole
    holders: dict[Place, set[str]] = field(default_factory=dict)
    foreign: dict[Place, int] = field(default_factory=dict)  # bytes used beyond the asks (other processes, overuse)

    @classmethod
    def of(cls, gpus: Sequence[Gpu], jobs: Sequence[QueueEntry], pinned: Sequence[PinnedJob]) -> "Room":
        room = cls({g.index: g for g in sorted(gpus, key=lambda g: place_order(g.index))})
        for p in pinned:
            for i in p.gpus:
                if i in room.gpus:
                    room.whole.setdefault(i, p.name)
                    room.holders.setdefault(i, set()).add(p.name)
        for j in jobs:
            if j.placement:
                room.take(j, j.placement, with_spare=True)
        queued_whole = {i for j in jobs if j.placement for i in j.placement
                        if j.request.memory_bytes is None or room.is_mig(i)}
        for g in gpus:
            # what is used beyond the asks is others' memory; on a place a queued job holds whole (a whole GPU, an
            # instance), all of it is that job's (preempting it frees the place)
            if g.used_bytes is not None and g.index not in queued_whole:
                room.foreign[g.index] = max(0, g.used_bytes - room.asked.get(g.index, 0))
        return room

    def is_mig(self, i: Place) -> bool:
        g = self.gpus.get(i)
        return g is not None and g.mig

    def take(self, job: QueueEntry, gpus: Iterable[Place], with_spare: bool = False) -> None:
        for i in gpus:
            if i not in self.gpus:
                continue  # a GPU gone from the inventory: nothing to count it against
            self.holders.setdefault(i, set()).add(job.name)
            if job.request.memory_bytes is None or self.gpus[i].mig:
                self.whole[i] = job.name  # an instance is held whole, whatever its job asked (isolation)
            else:
                self.asked[i] = self.asked.get(i, 0) + job.request.memory_bytes + (job.spare_bytes if with_spare
                                                                                     else 0)

    def without(self, jobs: Iterable[QueueEntry], spares_of: Iterable[QueueEntry] = ()) -> "Room":
        """The room if these jobs gave their places back (and these spares went)."""
        new = Room(self.gpus, dict(self.asked), dict(self.whole), {k: set(v) for k, v in self.holders.items()},
                   dict(self.foreign))
        for j in jobs:
            for i in j.placement:
                if i not in new.gpus:
                    continue
                new.holders.get(i, set()).discard(j.name)
                if new.whole.get(i) == j.name:
                    del new.whole[i]
                elif j.request.memory_bytes is not None and not new.gpus[i].mig:
                    new.asked[i] = new.asked.get(i, 0) - j.request.memory_bytes - j.spare_bytes
        for j in spares_of:
            if j.request.memory_bytes is not None and j.spare_bytes:
                for i in j.placement:
                    if i in new.gpus and not new.gpus[i].mig:  # a spare on an instance is inside its job's hold
                        new.asked[i] = new.asked.get(i, 0) - j.spare_bytes
        return new

    def free(self, i: Place) -> int:
        g = self.gpus[i]
        if i in self.whole:
            return 0
        return g.total_bytes - self.asked.get(i, 0) - self.foreign.get(i, 0)

    def fits_on(self, i: Place, req: Request) -> bool:
        g = self.gpus[i]
        if g.unusable is not None or i in self.whole:
            return False
        if g.mig:  # one rank of a gpu_memory job, alone on the instance
            return (req.gpus == 1 and req.memory_bytes is not None and not self.holders.get(i)
                    and self.free(i) >= req.memory_bytes)
        if req.memory_bytes is None:  # a whole GPU: nobody else on it
            return not self.holders.get(i) and self.asked.get(i, 0) <= 0
        return self.free(i) >= req.memory_bytes

    def best_fit(self, req: Request, accept: Callable[[Place], bool] | None = None) -> tuple[Place, ...] | None:
        """The `req.gpus` places it fits on most tightly (least room left after it), or None; `accept`: only among the
        places it says yes to (the scheduler's places within the owner's quotas)."""
        fits = [i for i in self.gpus if self.fits_on(i, req) and (accept is None or accept(i))]
        if len(fits) < req.gpus:
            return None
        need = req.memory_bytes or 0
        fits.sort(key=lambda i: (self.free(i) - need, place_order(i)))
        return tuple(sorted(fits[:req.gpus], key=place_order))

    # ---- could it ever fit? ------------------------------------------------------------------------------------
    def _could_hold(self, req: Request) -> list[Gpu]:
        """The places that could hold one of its ranks on an empty host."""
        takes_mig = req.gpus == 1 and req.memory_bytes is not None
        return [g for g in self.gpus.values() if (takes_mig or not g.mig)
                and (req.memory_bytes is None or g.total_bytes >= req.memory_bytes)]

    def possible(self, req: Request) -> bool:
        """Could this request ever fit this host (every place empty)?"""
        return len(self._could_hold(req)) >= req.gpus

    def never(self, req: Request, queued: bool = True) -> str:
        """Why a request can never fit this host, and what to change (`queued` False: said to `isaacd submit`, which
        refuses it: nothing to cancel)."""
        whole = [g for g in self.gpus.values() if not g.mig]
        migs = [g for g in self.gpus.values() if g.mig]
        fix = "; or `isaacd cancel` it" if queued else ""
        if migs and (req.memory_bytes is None or req.gpus > 1) and len(whole) < req.gpus:
            largest = max(migs, key=lambda g: (g.total_bytes, -place_order(g.index)[0]))
            mig_gpus = ", ".join(str(p) for p in sorted({g.parent for g in migs if g.parent is not None}))
            on_mig = (f"ask gpu_memory (at most {largest.total_bytes / GiB:.1f} GiB, {place_name(largest.index)}) "
                      "with one rank to run on a MIG instance")
            off = f"or turn MIG off on a GPU (`nvidia-smi -i {mig_gpus.split(',')[0]} -mig 0`, then reset it)"
            if req.gpus > 1:
                why = ("several ranks run only on GPUs not in MIG mode (CUDA shows a process one MIG device, and "
                       "NCCL does not run across MIG instances)")
                return (f"needs {req.describe()}; {why}, and this host has {len(whole)} GPU(s) not in MIG mode "
                        f"(GPU {mig_gpus} in MIG mode): lower gpus to {len(whole) or 1}" +
                        ("" if whole else f" and {on_mig}") + f", {off}{fix}")
            return (f"needs {req.describe()}; a GPU in MIG mode is never placed on whole (GPU {mig_gpus} in MIG mode, "
                    f"no other GPU here): {on_mig}, {off}{fix}")
        if not migs:
            biggest = max((g.total_bytes for g in self.gpus.values()), default=0)
            return (f"needs {req.describe()}; this host has {len(self.gpus)} GPU(s), the largest {biggest / GiB:.1f} "
                    "GiB: it can never start here; lower gpus or gpu_memory" + (", or `isaacd cancel` it" if queued
                                                                                else ""))
        largest = max(self.gpus.values(), key=lambda g: (g.total_bytes, -place_order(g.index)[0]))
        return (f"needs {req.describe()}; the largest place here is {place_name(largest.index)} with "
                f"{largest.total_bytes / GiB:.1f} GiB ({len(whole)} GPU(s) not in MIG mode, {len(migs)} MIG "
                f"instance(s)): it can never start here; lower gpus or gpu_memory{fix}")
