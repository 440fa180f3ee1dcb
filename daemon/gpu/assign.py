"""Which GPUs does a job use? The one answer, for config validation, the launch check, CDI devices,
the watchdogs and GPU attribution.

A job names its GPUs with two keys, ``gpus`` and ``device``. :func:`job_gpus` reads them once:

``gpus`` (when set, it is the claim; ``device`` then only picks the device *within* those GPUs)
  * ``"all"``: every GPU on the host (and every MIG device on it).
  * ``[0, 2]``: physical GPUs 0 and 2 (NVML / nvidia-smi index order, the order CDI uses). A
    physical GPU includes its MIG devices.
  * ``["GPU-8f1c..."]``, ``["MIG-1c2d..."]``: a GPU or a MIG device by UUID (compared case-insensitively).
  * ``["0:1"]``: MIG device 1 of GPU 0 (the key the GPU layer and CDI use). It overlaps GPU ``0``
    itself, but not ``"0:2"``.
  * ``["nvidia.com/gpu=2"]``: a CDI name. ``nvidia.com/gpu=<ref>`` is read as ``<ref>`` (``=all`` as
    ``"all"``); another vendor's name is opaque: isaacd passes it to the container, it conflicts
    only with the same name, and it is never "missing" (isaacd cannot see it).

``gpus`` empty (``[]``, the default)
  * ``device = "cpu"``: no GPU.
  * ``device = "cuda:N"``: physical GPU N.
  * ``device = "cuda"``: physical GPU 0 (CUDA's default device; what torch uses for "cuda").
  * A job with several ranks (``nproc_per_node = R``) and no ``gpus`` runs rank r on ``cuda:r``:
    GPUs 0 .. R-1, whatever ``device`` says (except ``cpu``).

Containers see exactly the job's GPUs (:func:`cdi_devices`) renumbered from 0, so
:func:`container_device` rewrites ``device`` to match. ``CUDA_VISIBLE_DEVICES`` in a job's
``environment`` is not interpreted: use ``gpus``.

With and without an inventory. ``job_gpus(job)`` with no inventory (config check time, the GPU
collector down or not started) returns the claim as the config spells it (:attr:`JobGpus.refs`);
overlaps are then decided on spelling alone: ``"all"`` overlaps every GPU claim, an index overlaps the
same index and its MIG devices (``"0"`` vs ``"0:1"``), a UUID only the same UUID. An index and a
UUID of the same GPU are only seen to collide with an inventory (``job_gpus(job, snapshot)``): then
every ref is resolved to the GPUs that are there (:attr:`JobGpus.devices`) and refs the inventory
does not know are listed in :attr:`JobGpus.missing`. An inventory that is down or empty counts as
no inventory: unknown is never a reason to refuse a launch.

Two jobs whose claims overlap are rejected unless *both* set ``share_gpus = true``
(:func:`gpu_conflicts`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .types import GpuInfo

_CDI_NVIDIA = "nvidia.com/gpu="
_MIG_KEY = re.compile(r"(\d+):(\d+)")
_CUDA_N = re.compile(r"cuda:(\d+)")


class GpuClaim(Protocol):
    """What this module reads of a job: the keys that name its GPUs. config.JobConfig is one; config imports
    this module to validate them, so this module knows the shape and not the config."""

    @property
    def name(self) -> str: ...

    @property
    def runtime(self) -> str: ...

    @property
    def device(self) -> str: ...

    @property
    def gpus(self) -> list[int | str] | str | int: ...  # a list of refs, "all", or a count the queue places

    @property
    def share_gpus(self) -> bool: ...

    @property
    def ranks(self) -> int: ...  # processes per node


# ------------------------------------------------------------------------------------------- model
@dataclass(frozen=True)
class JobGpus:
    """A job's GPUs. ``key``: the config key the claim comes from (``"gpus"``, ``"device"``,
    ``"nproc_per_node"``) or None for a CPU job. ``refs``: the claim, normalised (``"all"``, ``"0"``,
    ``"0:1"``, ``"GPU-..."``/``"MIG-..."`` lower-case hex, or an opaque CDI name). ``inventory_known``:
    ``devices``/``missing`` were computed against a live inventory."""

    key: str | None
    refs: tuple[str, ...] = ()
    devices: tuple[GpuInfo, ...] = ()
    missing: tuple[str, ...] = ()
    inventory_known: bool = False

    @property
    def all(self) -> bool:
        return "all" in self.refs

    def __bool__(self) -> bool:
        return bool(self.refs)

    @property
    def keys(self) -> list[str]:
        """GPU keys (``"0"``, ``"0:1"``) of the resolved devices; [] without an inventory."""
        return [d.key for d in self.devices]

    @property
    def physical_indices(self) -> set[int]:
        """Physical GPU indices: resolved devices (a MIG device counts for its parent); without an
        inventory, what the spelling says (indices, ``N:M`` -> N; UUIDs cannot be placed)."""
        if self.inventory_known:
            return {_physical(d) for d in self.devices}
        out: set[int] = set()
        for r in self.refs:
            if r.isdigit():
                out.add(int(r))
            elif (m := _MIG_KEY.fullmatch(r)):
                out.add(int(m.group(1)))
        return out

    def describe(self) -> str:
        return ", ".join(self.refs) if self.refs else "no GPU"


def _physical(info: GpuInfo) -> int:
    return info.parent_index if info.is_mig and info.parent_index is not None else info.index


def normalize_ref(ref: Any) -> str:
    """One spelling per GPU ref: 0 -> "0", "GPU-8F.." -> "GPU-8f..", "nvidia.com/gpu=1" -> "1"."""
    if isinstance(ref, bool):
        raise TypeError(f"not a GPU: {ref!r}")
    if isinstance(ref, int):
        return str(ref)
    s = str(ref).strip()
    s = s.removeprefix(_CDI_NVIDIA)
    if s[:4].upper() in ("GPU-", "MIG-"):
        return s[:4].upper() + s[4:].lower()
    return s


def _is_opaque(ref: str) -> bool:
    """A CDI name of another kind than nvidia.com/gpu: isaacd cannot map it to a GPU."""
    return "=" in ref


def claim_refs(job: GpuClaim) -> tuple[str | None, tuple[str, ...]]:
    """(key, refs) of a job's claim from its config alone; see the module docstring."""
    if job.runtime == "ray":
        return None, ()  # the GPUs are on the Ray node the job is placed on, picked by Ray, not this host's
    if isinstance(job.gpus, int):
        return None, ()  # a count (issue 31): no GPU until the queue places it (the placed copy names them)
    if job.gpus == "all":
        return "gpus", ("all",)
    if job.gpus:
        return "gpus", tuple(dict.fromkeys(normalize_ref(g) for g in job.gpus))
    if getattr(job, "gpu_memory", None) is not None:
        return None, ()  # likewise: gpu_memory asks the queue for room on a GPU it picks
    if job.device == "cpu" or not job.device.startswith("cuda"):
        return None, ()
    if job.ranks > 1:
        return "nproc_per_node", tuple(str(i) for i in range(job.ranks))
    m = _CUDA_N.fullmatch(job.device)
    return "device", (m.group(1) if m else "0",)


# --------------------------------------------------------------------------------------- inventory
def _inventory(inventory: Any) -> Mapping[str, GpuInfo] | None:
    """A GpuSnapshot, a GpuMap / mapping of key -> GpuInfo, or an iterable of GpuInfo; None when unknown."""
    if inventory is None:
        return None
    if hasattr(inventory, "gpus") and hasattr(inventory, "up"):  # a GpuSnapshot
        if not inventory.up:
            return None
        inventory = inventory.gpus
    if isinstance(inventory, Mapping):
        infos = list(inventory.values())
    else:
        infos = list(inventory)
    if not infos:
        return None
    return {i.key: i for i in infos}


def _resolve(ref: str, inv: Mapping[str, GpuInfo]) -> list[GpuInfo] | None:
    """The devices a ref names (a physical GPU brings its MIG devices); None if not on this host."""
    if ref == "all":
        return list(inv.values())
    if _is_opaque(ref):
        return []
    hits: list[GpuInfo] = []
    if ref.isdigit() or _MIG_KEY.fullmatch(ref):
        if ref in inv:
            hits.append(inv[ref])
    else:
        hits += [i for i in inv.values() if i.uuid.lower() == ref.lower()]
    if not hits:
        return None
    for h in list(hits):
        if not h.is_mig:
            hits += [i for i in inv.values() if i.is_mig and i.parent_index == h.index]
    return hits


def job_gpus(job: GpuClaim, inventory: Any = None) -> JobGpus:
    """The GPUs ``job`` uses (see the module docstring). ``inventory``: a GpuSnapshot (down = unknown),
    a mapping of GPU key -> GpuInfo, an iterable of GpuInfo, or None (unknown)."""
    key, refs = claim_refs(job)
    inv = _inventory(inventory)
    if inv is None or not refs:
        return JobGpus(key, refs)
    devices: dict[str, GpuInfo] = {}
    missing: list[str] = []
    for r in refs:
        hit = _resolve(r, inv)
        if hit is None:
            missing.append(r)
        else:
            devices.update((h.key, h) for h in hit)
    order = list(inv)
    return JobGpus(key, refs, tuple(sorted(devices.values(), key=lambda i: order.index(i.key))),
                   tuple(missing), True)


# --------------------------------------------------------------------------------------- conflicts
def _ref_overlap(a: str, b: str) -> bool:
    if a == b:
        return True
    if "all" in (a, b):
        return not (_is_opaque(a) or _is_opaque(b))
    ma, mb = _MIG_KEY.fullmatch(a), _MIG_KEY.fullmatch(b)
    if ma and b.isdigit():
        return ma.group(1) == b
    if mb and a.isdigit():
        return mb.group(1) == a
    return False


def shared_gpus(a: JobGpus, b: JobGpus) -> list[str]:
    """The GPUs both claims use, in words ([] = none). Resolved devices when both have them,
    else the spelling rules of the module docstring."""
    if not a or not b:
        return []
    if a.inventory_known and b.inventory_known:
        keys_b = {d.key for d in b.devices}  # a physical GPU's devices include its MIG devices
        placed = [d.key for d in a.devices if d.key in keys_b]
        # refs isaacd cannot place (not on this host, another vendor's CDI name): by spelling
        unplaced = [r for r in a.refs if r in b.refs and (r in a.missing or _is_opaque(r))]
        return placed + unplaced
    out: list[str] = []
    for ra in a.refs:
        for rb in b.refs:
            if _ref_overlap(ra, rb):
                # the narrower of the two: a GPU over "all", a MIG device over its GPU
                word = rb if ra == "all" or _MIG_KEY.fullmatch(rb) else ra
                if word == "all":
                    word = "all GPUs"
                if word not in out:
                    out.append(word)
    return out


@dataclass(frozen=True)
class GpuConflict:
    first: int  # index into the job list
    second: int
    first_name: str
    second_name: str
    first_key: str
    second_key: str
    gpus: tuple[str, ...]

    def message(self, jobs: list[GpuClaim] | None = None) -> str:
        def where(i: int, name: str, key: str) -> str:
            val = ""
            if jobs is not None:
                v = getattr(jobs[i], "gpus" if key == "gpus" else "device" if key == "device" else key)
                val = f" = {_toml(v)}"
            return f'jobs[{i}] (name = "{name}").{key}{val}'
        return (f"{where(self.first, self.first_name, self.first_key)} and "
                f"{where(self.second, self.second_name, self.second_key)} both use GPU {', '.join(self.gpus)}; "
                f'give each job its own GPUs (gpus = [...] or device = "cuda:N"), '
                f"or set share_gpus = true on both jobs")


def _toml(v: Any) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return str(v)


def gpu_conflicts(jobs: Iterable[GpuClaim], inventory: Any = None) -> list[GpuConflict]:
    """Pairs of jobs that would share a GPU where not both set ``share_gpus``."""
    jobs = list(jobs)
    claims = [job_gpus(j, inventory) for j in jobs]
    out: list[GpuConflict] = []
    # only jobs that name GPUs can share one (shared_gpus of an empty claim is []): the pairs of those few, not of
    # every job (1,000 queued jobs asking gpu_memory were 500,000 pairs a reload: issue 39's scale goal)
    named = [i for i, c in enumerate(claims) if c]
    for n, i in enumerate(named):
        for k in named[n + 1:]:
            if jobs[i].share_gpus and jobs[k].share_gpus:
                continue
            shared = shared_gpus(claims[i], claims[k])
            if shared:
                out.append(GpuConflict(i, k, jobs[i].name, jobs[k].name, claims[i].key or "device",
                                       claims[k].key or "device", tuple(shared)))
    return out


def device_outside_gpus(job: GpuClaim) -> str | None:
    """A process-runtime job with one rank and a GPU index list runs on host GPU ``cuda:N`` as written
    (no CUDA_VISIBLE_DEVICES is set): N must then be one of its ``gpus``, or it would run on a GPU
    it did not claim. Returns why not, or None."""
    if job.runtime != "process" or job.ranks != 1 or not isinstance(job.gpus, list) or not job.gpus:
        return None
    m = _CUDA_N.fullmatch(job.device)
    if not m or not all(isinstance(g, int) or str(g).isdigit() for g in job.gpus):
        return None
    if int(m.group(1)) in {int(g) for g in job.gpus}:
        return None
    return (f'device = "{job.device}" is not one of gpus = {_toml(list(job.gpus))}: a process job runs on host '
            f'GPU {m.group(1)}, which it did not claim; set device = "cuda:{job.gpus[0]}"')


# ------------------------------------------------------------------------------------ launch check
def missing_gpus(job: GpuClaim, snapshot: Any) -> str | None:
    """Why a job's GPUs are not on this host, or None. Unknown (collector down, no inventory yet) is
    not a reason to refuse."""
    claim = job_gpus(job, snapshot)
    if not claim.inventory_known or not claim.missing:
        return None
    have = ", ".join(f"{k} ({i.uuid})" for k, i in snapshot.gpus.items()) or "none"
    return (f"GPU {', '.join(claim.missing)} is not on this host (GPUs here: {have}); "
            f"fix the job's {claim.key or 'gpus/device'}")


# -------------------------------------------------------------------------------------- watchdogs
def job_gpu_indices(job: GpuClaim, readings: Iterable[Any], procs_by_gpu: Mapping[int, set[int]],
                    pids: Iterable[int], inventory: Any = None) -> set[int]:
    """Physical GPU indices the watchdogs watch for ``job``: its claim, plus every GPU one of its
    processes (``pids``) is seen on (``procs_by_gpu``: physical index -> host PIDs).

    ``readings`` (watchdogs.base.GpuReading: ``index``, ``uuid``) place UUID refs; pass the GPU
    snapshot (or its ``gpus``) as ``inventory`` to also place MIG UUIDs."""
    readings = list(readings)
    inv = _inventory(inventory)
    if inv is None and readings:
        inv = {str(r.index): GpuInfo(index=r.index, uuid=r.uuid or "", model="", pci_bus_id="") for r in readings}
    claim = job_gpus(job, inv)
    # resolved devices, plus what the spelling places (a MIG key "0:1" is GPU 0 even when only
    # physical GPUs are in the readings)
    out = claim.physical_indices | JobGpus(claim.key, claim.refs).physical_indices
    if not claim.inventory_known and claim.all:
        out.update(r.index for r in readings)
    pids = set(pids)
    out.update(i for i, p in procs_by_gpu.items() if p & pids)
    return out


# ----------------------------------------------------------------------------------- status, metrics
def status_gpus(job: GpuClaim) -> list[str] | str:
    """The ``"gpus"`` value of a job's status: its claim as refs (``"all"`` for every GPU)."""
    _, refs = claim_refs(job)
    return "all" if "all" in refs else list(refs)


def assigned_keys(gpus: Any, snapshot: Any) -> list[str]:
    """GPU keys for a status ``"gpus"`` value (a list of refs or ``"all"``): resolved through the
    snapshot when it is up (an unknown ref is kept as written), else the normalised refs
    (``"all"`` stays ``"all"``)."""
    if gpus == "all":
        refs = ["all"]
    elif isinstance(gpus, (list, tuple)):
        refs = [normalize_ref(g) for g in gpus if not isinstance(g, bool)]
    else:
        return []
    if not refs:  # no claim (a queued job, a CPU job): nothing to resolve, and no inventory to build per job
        return []
    inv = _inventory(snapshot)
    if inv is None:
        return list(dict.fromkeys(refs))
    out: list[str] = []
    for r in refs:
        hit = _resolve(r, inv)
        if hit is None or _is_opaque(r):
            out.append(r)  # not on this host, or a CDI name isaacd cannot place: as written
        elif r == "all":
            out += [h.key for h in hit]
        else:
            out.append(hit[0].key)  # the GPU itself, not the MIG devices it brings
    return list(dict.fromkeys(out))


# -------------------------------------------------------------------------------------- containers
def cdi_devices(job: GpuClaim) -> list[str]:
    """CDI names for a container job's GPUs, from its claim: ``nvidia.com/gpu=<index|N:M|uuid|all>``,
    another vendor's CDI name as written; none for a CPU job. Raises ValueError for a name that
    starts with "-" (Quadlet would read AddDevice=-x as an optional path and drop it)."""
    out: list[str] = []
    raw = ["all"] if job.gpus == "all" else [str(g).strip() for g in job.gpus] if isinstance(job.gpus, list) else []
    for s in raw:
        if s.startswith("-"):
            raise ValueError(f"job {job.name}: gpus entry {s!r}: a CDI device name cannot start with '-'")
    _, refs = claim_refs(job)
    for r in refs:
        out.append(r if _is_opaque(r) else f"{_CDI_NVIDIA}{r}")
    return list(dict.fromkeys(out))


def container_device(job: GpuClaim) -> str:
    """``device`` inside the container. CDI passes the job's GPUs renumbered from 0 in the order of
    :func:`cdi_devices` (host index order for index lists): ``device = "cuda:2"`` with ``gpus = [2, 3]``
    is ``cuda:0`` inside, and ``device = "cuda:2"`` with no ``gpus`` (CDI passes GPU 2 alone) too.
    A ``cuda:N`` that names no listed index is taken as already counted inside the container."""
    m = _CUDA_N.fullmatch(job.device)
    if not m:
        return job.device
    key, refs = claim_refs(job)
    if key == "device":
        return "cuda:0"
    if key != "gpus" or "all" in refs:
        return job.device
    k = int(m.group(1))
    if all(r.isdigit() for r in refs):
        ints = sorted({int(r) for r in refs})
        if k in ints:
            return f"cuda:{ints.index(k)}"
    return job.device


__all__ = [
    "GpuConflict", "JobGpus", "assigned_keys", "cdi_devices", "claim_refs", "container_device",
    "device_outside_gpus", "gpu_conflicts", "job_gpu_indices", "job_gpus", "missing_gpus", "normalize_ref",
    "shared_gpus", "status_gpus",
]
