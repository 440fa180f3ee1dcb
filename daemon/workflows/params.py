"""What a run's own `params/*.yaml` and the job's Hydra overrides say, read without a YAML library.

Isaac Lab dumps the agent and env configs of every run as block-style YAML (`dump_yaml`); the daemon has no YAML
library, so the few scalars it needs (rl_games' horizon_length, score_to_win, ...; skrl's rollouts) are read by
indentation. A job's own `key=value` Hydra overrides in extra_args are the fallback before a run has params.
"""

from __future__ import annotations

import math
import re
import threading
from pathlib import Path

from ..config import JobConfig

_yaml_cache: dict[tuple[str, int, int, tuple[str, ...]], str | None] = {}
_yaml_lock = threading.Lock()
_KEY_LINE_RE = re.compile(r"^(\s*)([A-Za-z_][\w.\-]*)\s*:\s*(.*?)\s*$")


def yaml_scalar(path: Path, keys: tuple[str, ...]) -> str | None:
    """The scalar text at `keys` (nested mappings) of a block-style YAML file (Isaac Lab's dump_yaml), or None.

    Read without a YAML library (the daemon has none): mapping keys are followed by their indentation; list items
    and anything that is not `key: <scalar>` at the exact path are ignored.
    """
    try:
        st = path.stat()
    except OSError:
        return None
    ck = (str(path), st.st_size, st.st_mtime_ns, keys)
    with _yaml_lock:
        if ck in _yaml_cache:
            return _yaml_cache[ck]
    value = None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        lines = []
    stack: list[tuple[int, str]] = []
    for line in lines:
        if not line.strip() or line.lstrip().startswith(("#", "-")):
            continue
        m = _KEY_LINE_RE.match(line)
        if not m:
            continue
        indent, key, rest = len(m.group(1)), m.group(2), m.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        if tuple(k for _, k in stack) == keys:
            value = rest or None
            break
    with _yaml_lock:
        if len(_yaml_cache) > 4096:
            _yaml_cache.clear()
        _yaml_cache[ck] = value
    return value


def yaml_int(path: Path, keys: tuple[str, ...]) -> int | None:
    text = yaml_scalar(path, keys)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def yaml_float(path: Path, keys: tuple[str, ...]) -> float | None:
    text = yaml_scalar(path, keys)
    try:
        v = float(text) if text is not None else None
    except ValueError:
        return None
    return v if v is not None and math.isfinite(v) else None


def override_int(job: JobConfig, key: str) -> int | None:
    """The job's own `key=N` (or `++key=N`) Hydra override in extra_args, if N is a whole number > 0."""
    for arg in job.extra_args:
        k, sep, v = arg.partition("=")
        if sep and k.lstrip("+") == key:
            try:
                n = int(v)
            except ValueError:
                return None
            return n if n > 0 else None
    return None
