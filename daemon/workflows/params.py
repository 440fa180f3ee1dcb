"""What a run's own `params/*.yaml` and the job's Hydra overrides say.

Isaac Lab dumps the agent and env configs of every run as YAML (`isaaclab.utils.io.dump_yaml`: `yaml.dump` of the
config made a dict by `class_to_dict`); the daemon reads the few numbers it needs from them (rl_games'
horizon_length, score_to_win, ...; skrl's rollouts) with PyYAML. `yaml.dump` is not `safe_dump`: what
`class_to_dict` leaves as Python values comes out with Python tags (`!!python/tuple` for every tuple,
`!!python/object/apply:...`, `!!python/name:...`), which `safe_load` refuses. `ParamsLoader` reads those as the
plain list, mapping or string they are written as, and never builds a Python object. A job's own `key=value` Hydra
overrides in extra_args are the fallback before a run has params.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

import yaml

from ..config.schema import JobConfig

# the C parser when PyYAML has libyaml (Isaac Lab's env.yaml runs to thousands of lines), else the pure-Python one
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ParamsLoader(_SafeLoader):
    """`yaml.SafeLoader` that reads tags it does not know (the `!!python/...` of `yaml.dump`) as plain values."""


def _plain(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


ParamsLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, _suffix, node: _plain(loader, node))
ParamsLoader.add_constructor(None, _plain)  # any other unknown tag: still one unreadable value, not a lost file

_CACHE_MAX = 256  # parsed files; a file is parsed again only when its size or mtime changes
_cache: dict[tuple[str, int, int], Any] = {}
_cache_lock = threading.Lock()


def load_params(path: Path) -> Any:
    """The parsed YAML document at `path`, or None when it is missing, unreadable or not YAML."""
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path), st.st_size, st.st_mtime_ns)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=ParamsLoader)  # noqa: S506 - a SafeLoader
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        doc = None
    with _cache_lock:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[key] = doc
    return doc


def yaml_value(path: Path, keys: tuple[str, ...]) -> Any:
    """The value at `keys` (nested mappings, no list indices) of a params YAML file, or None."""
    value = load_params(path)
    for k in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(k)
    return value


def yaml_int(path: Path, keys: tuple[str, ...]) -> int | None:
    """A whole number at `keys` (a YAML int; not a bool, a float or a string)."""
    v = yaml_value(path, keys)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def yaml_float(path: Path, keys: tuple[str, ...]) -> float | None:
    """A finite number at `keys`. A string is tried as a number too: YAML 1.1 (PyYAML) reads `1e6`, which has no
    dot, as a string."""
    v = yaml_value(path, keys)
    if isinstance(v, bool):
        return None
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return None
    if not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


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
