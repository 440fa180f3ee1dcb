"""Checkpoint discovery: the newest *complete* `model_<iter>.pt`.

rsl_rl saves with a plain `torch.save`, which is not atomic: a crash mid-save leaves a truncated
file with the newest name. A torch checkpoint is a zip archive whose central directory is written
last, so a file that opens as a zip, holds a `data.pkl` record and passes the CRC check is
complete. Validation results are cached by (size, mtime) so status polling stays cheap.
"""

from __future__ import annotations

import os
import re
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

# the shim's snapshot names (isaacd_snapshot_<N>.pt; its writer's temp files) are the shim protocol's
from isaacd_trainer.shim_protocol import SNAPSHOT_PREFIX, SNAPSHOT_TEMP_RE

# rsl_rl's own `model_<iter>.pt`, and the launcher shim's per-iteration `isaacd_snapshot_<iter>.pt` (the same
# format, written by the runner's own save(); the name stays clear of Isaac Lab's default `model_.*.pt`)
CHECKPOINT_RE = re.compile(r"^(?:model_|" + re.escape(SNAPSHOT_PREFIX) + r")(\d+)\.pt$")


def sweep_snapshot_temps(run_dir: Path) -> tuple[int, int]:
    """Remove the half-written snapshots a killed trainer left in its run dir: (files, bytes) removed.

    Only for a run dir whose trainer has exited: each run dir has one writer, so nothing is writing there.
    A kill -9 mid-write leaves one such file per crash, each the size of a checkpoint; nothing ever reads them.
    """
    files = size = 0
    try:
        entries = list(os.scandir(run_dir))
    except OSError:
        return 0, 0
    for entry in entries:
        if SNAPSHOT_TEMP_RE.match(entry.name):
            try:
                n = entry.stat(follow_symlinks=False).st_size
                os.unlink(entry.path)
            except OSError:
                continue
            files, size = files + 1, size + n
    return files, size


@dataclass(frozen=True)
class CheckpointLayout:
    """Where a workflow keeps its checkpoints inside a run dir, and how a name gives the iteration.

    rsl_rl: `<run>/model_<iter>.pt`; rl_games: `<run>/nn/last_<name>_ep_<epoch>_rew_<r>.pth`;
    skrl: `<run>/checkpoints/agent_<timestep>.pt`. Group 1 of `pattern` is the number in the name.

    `count` turns that number into the checkpoint's place in the *job's* count, for trainers whose numbering
    restarts with every run: `count(run_dir, number, offset)`, where `offset` is the iteration of the checkpoint
    the run resumed from (0 for a fresh run). None (rsl_rl, rl_games): the number already is the job's count.
    """

    subdir: str | None
    pattern: re.Pattern[str]
    count: Callable[[Path, int, int], int] | None = None

    def directory(self, run_dir: Path) -> Path:
        return run_dir / self.subdir if self.subdir else run_dir

    def iteration(self, run_dir: Path, number: int, offset: int) -> int:
        return number if self.count is None else self.count(run_dir, number, offset)


RSL_RL_LAYOUT = CheckpointLayout(None, CHECKPOINT_RE)
# Deep checks beyond "a complete zip": a workflow's validator returns a problem or None.
Validator = Callable[["Checkpoint"], "str | None"]


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    iteration: int
    mtime: float
    size: int

    def as_json(self) -> dict[str, object]:
        return {"iteration": self.iteration, "path": str(self.path), "time": self.mtime}


_cache: dict[tuple[str, int, int], str | None] = {}
_cache_lock = threading.Lock()


def checkpoint_problem(path: Path) -> str | None:
    """None if the file is a complete torch zip checkpoint, else why not."""
    try:
        st = path.stat()
    except OSError as exc:
        return f"cannot stat: {exc.strerror}"
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    problem = _inspect(path)
    with _cache_lock:
        if len(_cache) > 4096:
            _cache.clear()
        _cache[key] = problem
    return problem


def _inspect(path: Path) -> str | None:
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            if not any(n.endswith("/data.pkl") or n == "data.pkl" for n in names):
                return "zip archive without data.pkl: not a torch checkpoint"
            bad = zf.testzip()
            if bad is not None:
                return f"CRC mismatch in member {bad}"
    except zipfile.BadZipFile as exc:
        return f"not a complete zip archive (truncated or half-written?): {exc}"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    return None


def list_checkpoints(run_dir: Path, layout: CheckpointLayout = RSL_RL_LAYOUT, offset: int = 0) -> list[Checkpoint]:
    """All checkpoint files of a run dir, newest iteration first (not validated).

    `offset`: the iteration the run resumed from, for layouts whose numbering restarts per run (see `count`).
    """
    out = []
    try:
        entries = list(layout.directory(Path(run_dir)).iterdir())
    except OSError:
        return []
    for entry in entries:
        m = layout.pattern.match(entry.name)
        if not m:
            continue
        try:
            st = entry.stat()
        except OSError:
            continue
        out.append(Checkpoint(entry, layout.iteration(Path(run_dir), int(m.group(1)), offset), st.st_mtime, st.st_size))
    # newest first; at one iteration the trainer's own checkpoint before the shim's snapshot of it
    out.sort(key=lambda c: (c.iteration, not c.path.name.startswith(SNAPSHOT_PREFIX)), reverse=True)
    return out


def newest_complete(run_dir: Path, max_iteration: int | None = None,
                    rejected: list[tuple[Checkpoint, str]] | None = None,
                    layout: CheckpointLayout = RSL_RL_LAYOUT, validator: Validator | None = None,
                    offset: int = 0) -> Checkpoint | None:
    """Newest valid checkpoint in run_dir with iteration <= max_iteration; invalid ones go to `rejected`."""
    for ckpt in list_checkpoints(run_dir, layout, offset):
        if max_iteration is not None and ckpt.iteration > max_iteration:
            continue
        problem = checkpoint_problem(ckpt.path)
        if problem is None and validator is not None:
            problem = validator(ckpt)
        if problem is None:
            return ckpt
        if rejected is not None:
            rejected.append((ckpt, problem))
    return None


@dataclass(frozen=True)
class Lineage:
    """One attempt's place in the run's timeline, newest attempt last."""

    run_dir: Path | None
    resume_iteration: int | None  # the checkpoint iteration this attempt started from


def choose_resume(lineage: list[Lineage], before_iteration: int | None = None,
                  rejected: list[tuple[Checkpoint, str]] | None = None,
                  layout: CheckpointLayout = RSL_RL_LAYOUT, validator: Validator | None = None) -> Checkpoint | None:
    """Newest complete checkpoint on the current timeline.

    Walk attempts newest first. Each attempt's own run dir counts up to the current bound; once an
    attempt started from iteration N, its predecessors only count up to N, because anything they
    wrote after N was abandoned (a rollback, say). `before_iteration` starts the bound below a
    known-bad iteration (rollback). For a layout that numbers each run from 0 (skrl), a run's checkpoints
    count on from the iteration its attempt resumed from, so every Checkpoint here is in the job's count.
    """
    for run_dir, offset, bound in timeline(lineage, before_iteration):
        found = newest_complete(run_dir, bound, rejected, layout, validator, offset)
        if found is not None:
            return found
    return None


def timeline(lineage: list[Lineage], before_iteration: int | None = None) -> Iterator[tuple[Path, int, int | None]]:
    """The run dirs on the current timeline, newest attempt first: (run_dir, offset, bound), where `offset` is
    the iteration the attempt resumed from (0: fresh) and `bound` the newest iteration of that run still on the
    timeline (None: all of them). See choose_resume; the backup uploader walks the same timeline."""
    bound = None if before_iteration is None else before_iteration - 1
    for step in reversed(lineage):
        if step.run_dir is not None:
            yield step.run_dir, step.resume_iteration or 0, bound
        if step.resume_iteration is not None:
            bound = step.resume_iteration if bound is None else min(bound, step.resume_iteration)
