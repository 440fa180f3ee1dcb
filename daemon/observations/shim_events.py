"""What the launcher shim tells the supervisor: one JSON object per line, appended by the trainer.

The file is per attempt (`state_dir/shim/<job>/attempt-<n>.jsonl`, named by ISAACD_SHIM_EVENTS in
the trainer's environment). The shim writes each line with one O_APPEND write, so a reader sees
whole lines except, at worst, a torn last one after a crash: that one is left for the next poll
and skipped once a newer line follows it. The event names and the variable are the shim protocol's
(isaacd_trainer/shim_protocol.py, which the shim itself loads); folded here: shim_started, checkpoint_loaded,
runner_started, checkpoint_saved, stop_requested, stopped, learn_finished, first_iteration, and a spare's spare_go.

Their meaning is read here once: `poll` folds each event into the attempt's `report` (everything said so far)
and into `news` (what arrived since `take_news`), so readers look at typed fields, never at event names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isaacd_trainer.shim_protocol import ShimEvent


@dataclass
class ShimReport:
    """Everything the shim said so far, folded (rank 0 only: the rank that owns the run dir)."""

    run_dir: str | None = None
    start_iteration: int | None = None
    loaded: str | None = None  # checkpoint path the trainer actually loaded
    loaded_iteration: int | None = None
    checkpoints: list[tuple[int, str]] = field(default_factory=list)
    stop_signal: str | None = None
    stop_requested: bool = False  # the trainer saw the stop (SIGINT): never signal it twice
    stopped_checkpoint: str | None = None
    finished: bool = False
    rsl_rl_version: str | None = None
    boot_phase: str | None = None  # how far the boot got (BOOT_PHASES), until the first iteration
    boot_phase_since: float | None = None  # the trainer's wall time of the event that began it
    first_iteration: int | None = None  # the first iteration of this process's learn() is done
    go_time: float | None = None  # a spare's events: the wall time it acknowledged the go line (spare_go)


# What a boot is doing, by the event that began it (in boot order; a phase never goes back): the train script's
# imports, the environment (the first gymnasium.make: Isaac Lab's scene), the runner's construction and checkpoint
# load, the first iteration (learn() called; Isaac Lab compiles its Warp kernels in the first steps).
BOOT_PHASES = {ShimEvent.SHIM_STARTED.value: "imports", ShimEvent.ENV_CREATING.value: "environment",
               ShimEvent.ENV_CREATED.value: "runner", ShimEvent.RUNNER_STARTED.value: "first iteration"}
_BOOT_ORDER = list(BOOT_PHASES.values())


@dataclass(frozen=True)
class TrainerStopped:
    """The trainer stopped on request, having saved `checkpoint` (trainer's path) at `iteration`."""

    iteration: int | None
    checkpoint: str | None
    exit_now: bool = False  # the process ends right after the event (the shim's quick exit, or a stop while booting)
    cleanup: str | None = None  # else why the train script's own cleanup runs first (trainer/shim_exit.py's refusal)


@dataclass
class ShimNews:
    """What the shim said since the last `take_news`, for the supervisor to act on once."""

    saved: list[str] = field(default_factory=list)  # checkpoint paths as the trainer sees them
    loaded: list[str] = field(default_factory=list)  # the checkpoint the trainer loaded (one per start)
    stopped: list[TrainerStopped] = field(default_factory=list)


class ShimEvents:
    def __init__(self, path: Path):
        self.path = path
        self._offset = 0
        self.report = ShimReport()
        self.news = ShimNews()
        self.bad_lines = 0

    def poll(self) -> list[dict[str, Any]]:
        """New complete events since the last poll, folded into `report` as well."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self._offset += end + 1
        out = []
        for line in data[:end].split(b"\n"):
            try:
                ev = json.loads(line)
            except ValueError:
                self.bad_lines += 1  # a line torn by a crash, then appended past: skip it
                continue
            if isinstance(ev, dict) and int(ev.get("rank") or 0) == 0:
                self._fold(ev)
                out.append(ev)
        return out

    def take_news(self) -> ShimNews:
        """What arrived since the last call (after `poll`), handed over once."""
        news, self.news = self.news, ShimNews()
        return news

    def _fold(self, ev: dict[str, Any]) -> None:
        r, news, kind = self.report, self.news, ev.get("event")
        phase = BOOT_PHASES.get(str(kind))
        if phase is not None and (r.boot_phase is None or _BOOT_ORDER.index(phase) > _BOOT_ORDER.index(r.boot_phase)):
            t = ev.get("time")
            r.boot_phase, r.boot_phase_since = phase, float(t) if isinstance(t, (int, float)) else None
        if kind == ShimEvent.RUNNER_STARTED:
            r.run_dir = ev.get("run_dir") or r.run_dir
            r.start_iteration = ev.get("start_iteration")
            r.rsl_rl_version = ev.get("rsl_rl_version") or r.rsl_rl_version
        elif kind == ShimEvent.CHECKPOINT_LOADED:
            r.loaded, r.loaded_iteration = ev.get("path"), ev.get("iteration")
            news.loaded.append(str(ev.get("path")))
        elif kind == ShimEvent.CHECKPOINT_SAVED and ev.get("path"):
            r.checkpoints.append((int(ev.get("iteration") or 0), str(ev["path"])))
            news.saved.append(str(ev["path"]))
        elif kind == ShimEvent.STOP_REQUESTED:
            r.stop_signal, r.stop_requested = ev.get("signal"), True
        elif kind == ShimEvent.STOPPED:
            r.stopped_checkpoint = ev.get("checkpoint")
            saved = ev.get("checkpoint")
            cleanup = ev.get("cleanup")
            # a stop while booting exits at once too (before_first_iteration); a shim before session 17 says neither
            news.stopped.append(TrainerStopped(ev.get("iteration"), str(saved) if saved else None,
                                               exit_now=bool(ev.get("exit_now") or ev.get("before_first_iteration")),
                                               cleanup=str(cleanup) if cleanup else None))
        elif kind == ShimEvent.LEARN_FINISHED:
            r.finished = True
        elif kind == ShimEvent.FIRST_ITERATION:
            r.first_iteration = ev.get("iteration")
        elif kind == ShimEvent.SPARE_GO:
            r.go_time = ev.get("time") if isinstance(ev.get("time"), (int, float)) else 0.0
        elif kind == ShimEvent.SHIM_STARTED:
            r.rsl_rl_version = ev.get("rsl_rl_version") or r.rsl_rl_version
