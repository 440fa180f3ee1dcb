"""Training progress read from rsl_rl's TensorBoard event files as they grow.

Each event file is read incrementally (`tfrecord.EventFileReader` keeps its offset), and a damaged
record is skipped and reported instead of stopping the reading for good.
Tags are normalised across rsl_rl versions (4.0 renamed `Loss/value_function` to `Loss/value`,
3.0 wrote `Perf/collection time` with a space).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ..daemon_log import log
from .tfrecord import EventFileReader

REWARD_TAGS = ("Train/mean_reward",)
FPS_TAGS = ("Perf/total_fps",)
TAG_ALIASES = {"Perf/collection time": "Perf/collection_time", "Perf/learning time": "Perf/learning_time"}


@dataclass(frozen=True)
class ScalarPoint:
    step: int
    tag: str
    value: float
    wall_time: float


@dataclass
class RunProgress:
    """Everything seen so far in one run dir."""

    last_step: int | None = None
    first_step: int | None = None
    latest: dict[str, float] = field(default_factory=dict)
    last_new_step_at: float | None = None  # our clock, when a new step arrived

    @property
    def mean_reward(self) -> float | None:
        return next((self.latest[t] for t in REWARD_TAGS if t in self.latest), None)

    @property
    def fps(self) -> float | None:
        return next((self.latest[t] for t in FPS_TAGS if t in self.latest), None)


def _scalar_value(value) -> float | None:  # type: ignore[no-untyped-def]
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor":
        t = value.tensor
        if t.float_val:
            return float(t.float_val[0])
        if t.double_val:
            return float(t.double_val[0])
    return None


class TensorBoardTail:
    """Follows every event file in one run dir; `poll()` returns the new scalar points."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self._loaders: dict[Path, EventFileReader] = {}
        self.progress = RunProgress()
        self._damage: list[dict[str, Any]] = []

    def take_damage(self) -> list[dict[str, Any]]:
        """Damaged stretches found since the last call: for a `tensorboard_damaged` event."""
        out, self._damage = self._damage, []
        return out

    def _event_files(self) -> Iterator[Path]:
        try:
            yield from sorted(self.run_dir.glob("events.out.tfevents.*"))
            # rl_games writes its SummaryWriter into <run>/summaries/
            yield from sorted((self.run_dir / "summaries").glob("events.out.tfevents.*"))
        except OSError:
            return

    def poll(self, now: float | None = None) -> list[ScalarPoint]:
        now = time.time() if now is None else now
        points: list[ScalarPoint] = []
        for path in self._event_files():
            loader = self._loaders.get(path)
            if loader is None:
                loader = self._loaders[path] = EventFileReader(path)
            try:
                for event in loader.read():
                    if not event.HasField("summary"):
                        continue
                    for value in event.summary.value:
                        v = _scalar_value(value)
                        if v is None:
                            continue
                        tag = TAG_ALIASES.get(value.tag, value.tag)
                        if tag.endswith("/time"):
                            # rsl_rl's `Train/mean_reward/time` is stepped by elapsed seconds, not iterations
                            continue
                        points.append(ScalarPoint(int(event.step), tag, v, float(event.wall_time)))
            except Exception:  # noqa: BLE001 - never let one file stop the others
                log.exception("tensorboard_read_failed", path=str(path))
                continue
            for note in loader.take_damage():
                log.warning("tensorboard_damaged", **note, detail="skipped; reading goes on after it")
                self._damage.append(note)
        prog = self.progress
        for p in points:
            prog.latest[p.tag] = p.value
            if prog.first_step is None:
                prog.first_step = p.step
            if prog.last_step is None or p.step > prog.last_step:
                prog.last_step = p.step
                prog.last_new_step_at = now
        return points


def finite_or_none(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None
