"""An evaluation's result JSON (eval-design.md B), read and checked: an `EvalResult`, or one line saying why not.

The evaluation process writes `<checkpoint>.eval.json` (temp, fsync, rename) and exits 0; on a failure it knows (the
checkpoint does not load, the task's play config differs) it writes `{"version": 1, ..., "error": "<reason>"}` and
exits nonzero; after a crash or a kill there is none. Whatever the file holds, the keeper gets either a result it can
record and publish (every number finite, the iteration the one it asked for) or a reason fit for an event: it never
raises on a bad file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .types import EvalResult

VERSION = 1
SUFFIX = ".eval.json"
REASON_CHARS = 300  # an error the trainer wrote, as it goes into an event and a status line


def result_path(checkpoint: str | Path) -> Path:
    """Where the evaluation of `checkpoint` writes its result: beside it, `model_400.pt.eval.json`."""
    return Path(f"{checkpoint}{SUFFIX}")


def one_line(text: str, limit: int = REASON_CHARS) -> str:
    """A reason as one line of at most `limit` characters (whitespace runs, newlines included, become one space)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def read_result(path: str | Path, finished_at: float, iteration: int | None = None) -> EvalResult | str:
    """The result at `path` (finished_at: the keeper's wall time as it reads it), or why there is none to use.
    `iteration`: the one the keeper asked for; a result of another (a stale file) is refused."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return f"no result at {path}: the evaluation wrote none"
    except (OSError, UnicodeDecodeError) as exc:
        return one_line(f"result {path} cannot be read: {getattr(exc, 'strerror', None) or exc}")
    return parse_result(text, finished_at, iteration, source=str(path))


def parse_result(text: str, finished_at: float, iteration: int | None = None,
                 source: str = "the result") -> EvalResult | str:
    try:
        raw = json.loads(text)
    except ValueError as exc:
        return one_line(f"{source} is not JSON ({exc})")
    if not isinstance(raw, Mapping):
        return f"{source} is not a JSON object"
    version = raw.get("version")
    if version != VERSION or isinstance(version, bool):
        return one_line(f"{source} has version {json.dumps(version)}; this isaacd reads version {VERSION} (the "
                        "trainer's shim and the supervisor are of different isaacd versions)")
    if "error" in raw and raw["error"] is not None:
        return one_line(str(raw["error"])) or f"{source} says the evaluation failed, without a reason"
    try:
        result = _result(raw, finished_at)
    except _Bad as exc:
        return one_line(f"{source}: {exc}")
    if iteration is not None and result.iteration != iteration:
        return f"{source} is of iteration {result.iteration}, not {iteration}: a stale result"
    return result


class _Bad(ValueError):
    pass


def _int(raw: Mapping[str, Any], key: str, least: int | None = None) -> int:
    v = raw.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise _Bad(f"{key} is {json.dumps(v)}, not a whole number")
    if least is not None and v < least:
        raise _Bad(f"{key} is {v}, below {least}")
    return v


def _number(raw: Mapping[str, Any], key: str, optional: bool = False, least: float | None = None) -> float | None:
    v = raw.get(key)
    if v is None and optional:
        return None
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise _Bad(f"{key} is {json.dumps(v)}, not a number")
    if not math.isfinite(v):
        raise _Bad(f"{key} is {v}, not a finite number (a diverged policy or a broken count)")
    if least is not None and v < least:
        raise _Bad(f"{key} is {v}, below {least}")
    return float(v)


def _text(raw: Mapping[str, Any], key: str, optional: bool = False) -> str | None:
    v = raw.get(key)
    if v is None and optional:
        return None
    if not isinstance(v, str) or not v:
        raise _Bad(f"{key} is {json.dumps(v)}, not a string")
    return v


def _result(raw: Mapping[str, Any], finished_at: float) -> EvalResult:
    success = _number(raw, "success_rate", optional=True, least=0.0)
    if success is not None and success > 1:
        raise _Bad(f"success_rate is {success}, above 1")
    return EvalResult(
        iteration=_int(raw, "iteration", least=0),
        checkpoint=_text(raw, "checkpoint") or "",
        episodes=_int(raw, "episodes", least=1),
        return_mean=_number(raw, "return_mean") or 0.0,
        return_std=_number(raw, "return_std", least=0.0) or 0.0,
        length_mean=_number(raw, "length_mean", least=0.0) or 0.0,
        length_std=_number(raw, "length_std", least=0.0) or 0.0,
        success_rate=success,
        seed=_int(raw, "seed"),
        num_envs=_int(raw, "num_envs", least=1),
        device=_text(raw, "device") or "",
        duration_seconds=_number(raw, "duration_seconds", least=0.0) or 0.0,
        finished_at=finished_at,
        video=_text(raw, "video", optional=True),
        gif=_text(raw, "gif", optional=True),
    )


def video_reason(path: str | Path) -> str | None:
    """The result's `video_reason` (why no video was recorded on this host: "no renderer: ..."), None where it gives
    none or cannot be read: the keeper says it once in the status (`EvalsStatus.video_unavailable`)."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    reason = raw.get("video_reason") if isinstance(raw, Mapping) else None
    return one_line(reason) if isinstance(reason, str) and reason.strip() else None
