"""Deep checkpoint validation: can *this* job's trainer load it, and is it worth loading?

Beyond "a complete zip" (signals/checkpoints.py): the checkpoint's `iter` matches its name, its
tensors are finite, and for rsl_rl its key layout is the generation the trainer runs
(`model_state_dict` up to rsl_rl 3.x, `actor_state_dict` from 4.0: neither loads the other, so
moving a job from the Isaac Lab 2.3 image to 3.0 would otherwise crash-loop on every attempt).

Inspection reads the whole file, so results are cached by (path, size, mtime) and new
checkpoints are inspected on a worker thread as soon as the shim reports them (`prewarm`); a
launch asks synchronously and usually finds the answer waiting.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from ..observations.checkpoint_inspect import RSL_RL_2, RSL_RL_4, CheckpointInfo, InspectError, inspect_checkpoint
from ..observations.checkpoints import Checkpoint

def expected_rsl_rl_format(rsl_rl_version: str | None, generation_major: int, builtin: bool) -> str | None:
    """The key layout this job's trainer writes and loads; None when not known yet (accept either)."""
    if rsl_rl_version:
        try:
            return RSL_RL_4 if int(rsl_rl_version.split(".")[0]) >= 4 else RSL_RL_2
        except ValueError:
            pass
    if builtin or generation_major >= 3:  # isaacd's trainer pins rsl-rl-lib 5.x; Isaac Lab 3.0 needs >= 5.0.1
        return RSL_RL_4
    return None  # Isaac Lab 2.x runs rsl-rl-lib 2.x-3.x or a newer one a user installed: learn it from the shim


class CheckpointValidator:
    def __init__(self) -> None:
        self._cache: dict[tuple[str, int, int], CheckpointInfo | str] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-inspect")
        self._pending: dict[tuple[str, int, int], Future[CheckpointInfo | str]] = {}

    @staticmethod
    def _key(path: Path) -> tuple[str, int, int] | None:
        try:
            st = path.stat()
        except OSError:
            return None
        return (str(path), st.st_size, st.st_mtime_ns)

    def _inspect(self, path: Path, key: tuple[str, int, int]) -> CheckpointInfo | str:
        try:
            result: CheckpointInfo | str = inspect_checkpoint(path)
        except InspectError as exc:
            result = str(exc)
        with self._lock:
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = result
            self._pending.pop(key, None)
        return result

    def prewarm(self, path: Path) -> None:
        key = self._key(path)
        if key is None:
            return
        with self._lock:
            if key in self._cache or key in self._pending:
                return
            self._pending[key] = self._pool.submit(self._inspect, path, key)

    def info(self, path: Path) -> CheckpointInfo | str:
        key = self._key(path)
        if key is None:
            return "vanished"
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            fut = self._pending.get(key)
        return fut.result() if fut is not None else self._inspect(path, key)

    def problem(self, ckpt: Checkpoint, expected_format: str | None, library: str) -> str | None:
        info = self.info(ckpt.path)
        if isinstance(info, str):
            return f"unreadable: {info}"
        if library == "rsl_rl":
            found = info.rsl_rl_format
            if found is None:
                return f"not an rsl_rl checkpoint (keys: {', '.join(info.keys)})"
            if expected_format is not None and found != expected_format:
                return (f"incompatible: written by {found}, but this job's trainer runs {expected_format}; "
                        "the two do not load each other")
            if info.iteration is not None and info.iteration != ckpt.iteration:
                return f"its iter is {info.iteration}, not {ckpt.iteration} as its name says"
        if info.nonfinite:
            return f"holds NaN/inf in {', '.join(info.nonfinite)} (a diverged run)"
        return None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


VALIDATOR = CheckpointValidator()  # one per process: the cache is what makes it cheap
