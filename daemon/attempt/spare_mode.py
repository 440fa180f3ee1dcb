"""Which warm spare a job gets (booted, imports-only or none), and the go of a booted spare (issue 21). Pure.

A *booted* spare has run the job's train script with its fresh-start command line through environment creation
and runner construction and waits at the runner's ``learn()`` (trainer/shim.py, "booted spare"). It holds a second
environment, so it costs about what the trainer holds on the env's device. An *imports-only* spare (issue 11) holds
torch, rsl_rl and a CUDA context only.

The rule for ``spare = "auto"`` (the default; ``true`` means the same):

* booted for upstream rsl_rl jobs (``workflow = "rsl_rl"``) when the device has room for a second environment:
  free memory there >= what the job's trainer holds there now + 10 % of the device's total (at least 1 GiB);
  * a GPU job reads both from the GPU collector (NVML: device memory and per-process memory, attributed to jobs);
  * a CPU job reads host RAM (``MemAvailable``) and the trainer's resident memory (its process tree);
* imports-only otherwise, and where the figures are unknown (no GPU collector, no process memory): a second
  environment on a GPU whose free memory isaacd cannot see could push the trainer itself into a CUDA out-of-memory,
  which costs far more than the boot the booted spare saves;
* imports-only for the built-in trainer (it boots in about a second), skrl and rl_games (no runner hook to park
  at: README "warm spare").

``spare = "booted"`` skips the room check (the operator decided); it still needs the rsl_rl hook. After a booted
spare died during its boot, or could not take an attempt, the keeper falls back to imports-only (daemon/attempt/spare.py).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from ..config.schema import JobConfig
from ..gpu.assign import assigned_keys, status_gpus
from ..gpu.snapshot import GpuSnapshot

Mode = Literal["booted", "imports"]
GiB = 2**30
HEADROOM_SHARE = 0.10  # of the device's total: what stays free with the spare booted
HEADROOM_MIN = 1 * GiB
# a booted spare loads a checkpoint as rsl_rl's own default `load` does (everything); these change what a cold
# resume would load, so such a job keeps the imports-only spare
BOOTED_INCOMPATIBLE_ARGS = ("--no-resume_optimizer_state",)


def spare_setting(value: bool | str | None) -> str:
    """The `spare` key as one of "auto", "booted", "imports", "off" (None and true are "auto", false "off")."""
    if value is None or value is True:
        return "auto"
    if value is False:
        return "off"
    return str(value)


@dataclass(frozen=True)
class Room:
    """Memory on the device where a second environment would live (bytes; None = not known)."""

    where: str  # "GPU 0", "host RAM"
    free: int | None
    trainer_uses: int | None
    total: int | None


def room_problem(rooms: list[Room] | None) -> str | None:
    """Why a second environment does not fit (or its fit is unknown), or None when it fits on every device."""
    if not rooms:
        return "the memory of the job's device is not known (no GPU collector figures): imports-only"
    for r in rooms:
        if r.free is None or r.total is None or r.trainer_uses is None:
            return f"{r.where}: free memory or the trainer's share not known: imports-only"
        need = r.trainer_uses + max(int(r.total * HEADROOM_SHARE), HEADROOM_MIN)
        if r.free < need:
            return (f"{r.where}: {r.free / GiB:.1f} GiB free, a booted spare needs about {need / GiB:.1f} GiB (the "
                    f"trainer's {r.trainer_uses / GiB:.1f} GiB + {HEADROOM_SHARE:.0%} of {r.total / GiB:.1f} GiB): "
                    "imports-only")
    return None


WANDB_LOGGER_ARGS = ("agent.logger=wandb", "agent.logger='wandb'", 'agent.logger="wandb"', "--logger=wandb")


def choose_mode(setting: str, job: JobConfig, rsl_rl_hook: bool, rooms: list[Room] | None,
                fallback: str | None = None) -> tuple[Mode, str | None]:
    """(mode, why not booted) for a job whose spare fits at all (daemon/attempt/spare.py `spare_fits`).

    `rsl_rl_hook`: the trainer runs through the shim with rsl_rl's runner hooked (not a plain skrl/rl_games spare);
    `fallback`: why the keeper turned booted spares off for this job (a boot that failed, a refused hand-over)."""
    if setting == "imports":
        return "imports", None
    if not rsl_rl_hook:
        return "imports", "a booted spare parks at rsl_rl's learn(): skrl and rl_games have no such hook here"
    bad = [a for a in job.extra_args if a in BOOTED_INCOMPATIBLE_ARGS]
    if bad:
        return "imports", f"extra_args has {bad[0]}: a booted spare loads checkpoints as rsl_rl's default load does"
    if fallback is not None:
        return "imports", fallback
    if setting == "booted":
        return "booted", None
    if any(a.replace(" ", "") in WANDB_LOGGER_ARGS for a in job.extra_args):
        # upstream pins a W&B run at boot (isaaclab_rl/utils/wandb.py announce_new_run); the spare boots with a
        # placeholder id the go replaces (spare.py), but no booted W&B run is tested end to end yet: auto stays
        # imports-only here (spare = "booted" still boots)
        return "imports", "the W&B logger (agent.logger=wandb): auto keeps the spare imports-only"
    if job.workflow != "rsl_rl":
        return "imports", "the built-in trainer boots in about a second: imports-only (spare = booted boots it)"
    problem = room_problem(rooms)
    return ("imports", problem) if problem is not None else ("booted", None)


def gpu_rooms(job: JobConfig, trainer_pids: Collection[int], snap: GpuSnapshot | None) -> list[Room] | None:
    """The job's GPUs from the GPU sampler's snapshot, or None when unknown: those its gpus/device claim
    (gpu/assign.py) and those its trainer's processes (host pids) hold memory on; what the trainer holds there."""
    if snap is None or not snap.up:
        return None
    claimed = set(assigned_keys(status_gpus(job), snap))
    rooms = []
    for key in snap.gpus:
        s = snap.samples.get(key)
        mine = [p.used_bytes for p in ((s.processes or ()) if s is not None else ()) if p.pid in trainer_pids]
        if key not in claimed and not mine:
            continue
        used, total = (s.memory_used_bytes, s.memory_total_bytes) if s is not None else (None, None)
        trainer = None if any(m is None for m in mine) else sum(m or 0 for m in mine)
        rooms.append(Room(f"GPU {key}", None if used is None or total is None else total - used, trainer, total))
    return rooms or None


def host_room(meminfo: str, trainer_rss: int | None) -> list[Room] | None:
    """Host RAM from /proc/meminfo's text and the trainer's resident memory."""
    fields: dict[str, int] = {}
    for line in meminfo.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    if "MemAvailable" not in fields or "MemTotal" not in fields:
        return None
    return [Room("host RAM", fields["MemAvailable"], trainer_rss, fields["MemTotal"])]


# ---- the go of a booted spare --------------------------------------------------------------------------------
# the flags in which an attempt may differ from the fresh start a spare was booted with (flag + value), and the
# bare resume flag of Isaac Lab 2.1+ (2.0: `--resume True`)
ATTEMPT_FLAGS = ("--seed", "--max_iterations", "--checkpoint", "--load_run")


def split_attempt_flags(args: list[str]) -> tuple[list[str], dict[str, str | bool]]:
    """(args without the attempt's own flags, those flags' values)."""
    rest: list[str] = []
    values: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a in ATTEMPT_FLAGS and i + 1 < len(args):
            values[a] = args[i + 1]
            i += 2
        elif a == "--resume":
            values[a] = True
            i += 2 if i + 1 < len(args) and args[i + 1] == "True" else 1
        else:
            rest.append(a)
            i += 1
    return rest, values


def booted_resume(boot_args: list[str], attempt_args: list[str], checkpoint: str | None,
                  set_after_load: Collection[str] = ()) -> dict[str, Any] | str:
    """The go's ``resume`` {checkpoint, max_iterations, seed} for a spare booted with `boot_args`, or why the
    attempt cannot be handed to it (its command line differs in more than checkpoint, seed and iterations: a
    num_envs step-down, a changed config).

    `set_after_load`: the ``agent.algorithm.<name>`` the shim sets on the algorithm after the checkpoint's load
    (a PBT exploit's new values, launch/exploit.py, ISAACD_ALGORITHM_SET in the go's env): their overrides may
    differ from the boot's, as the member's job file was rewritten with them after its spare booted."""
    booted, _ = split_attempt_flags(_without_algorithm(boot_args, set_after_load))
    wanted, values = split_attempt_flags(_without_algorithm(attempt_args, set_after_load))
    if booted != wanted:
        return f"the attempt's command line differs from the booted spare's: {_first_difference(booted, wanted)}"
    raw = values.get("--max_iterations")
    try:
        n = int(raw) if isinstance(raw, str) else None
    except ValueError:
        n = None
    if n is None:
        return "the attempt's command line has no --max_iterations"
    seed_raw = values.get("--seed")
    try:
        seed = int(seed_raw) if isinstance(seed_raw, str) else None
    except ValueError:
        return f"--seed {seed_raw!r} is not an integer"
    resumes = "--checkpoint" in values or "--resume" in values
    if resumes and checkpoint is None:
        return "the attempt resumes but its checkpoint file is not known"
    return {"checkpoint": checkpoint if resumes else None, "max_iterations": n, "seed": seed}


ALGORITHM_OVERRIDE = "agent.algorithm."


def _without_algorithm(args: list[str], names: Collection[str]) -> list[str]:
    """`args` without the Hydra overrides ``[+]agent.algorithm.<name>=...`` of `names`."""
    def settable(a: str) -> bool:
        key, sep, _ = a.lstrip("+").partition("=")
        return bool(sep) and key.startswith(ALGORITHM_OVERRIDE) and key[len(ALGORITHM_OVERRIDE):] in names

    return [a for a in args if not settable(a)] if names else args


def set_after_load(algorithm_set: str | None, checkpoint: str | None) -> frozenset[str]:
    """The names an ISAACD_ALGORITHM_SET value (launch/exploit.py) sets after the load of `checkpoint`: none when
    it names another file (the shim sets nothing then) or is no such JSON object."""
    try:
        spec = json.loads(algorithm_set or "")
    except ValueError:
        return frozenset()
    if not isinstance(spec, dict) or not isinstance(spec.get("values"), dict) or checkpoint is None:
        return frozenset()
    which = spec.get("checkpoint")
    if not isinstance(which, str) or "/".join(checkpoint.split("/")[-2:]) != which:
        return frozenset()
    return frozenset(spec["values"])


def _first_difference(booted: list[str], wanted: list[str]) -> str:
    """`--num_envs 8` instead of `--num_envs 16`: the first token that differs, with its flag."""
    i = next((k for k, (a, b) in enumerate(zip(booted, wanted)) if a != b), min(len(booted), len(wanted)))
    start = i - 1 if i > 0 and (wanted[i - 1:i] or [""])[0].startswith("--") else i
    have, want = " ".join(booted[start:i + 1]) or "nothing", " ".join(wanted[start:i + 1]) or "nothing"
    return f"{want} instead of {have}"
