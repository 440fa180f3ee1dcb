"""A sweep's trial as a job file (issue 39): the `[[jobs]]` table a trial runs as, and its TOML text.

`trial_table` is the trial's job table as the sweep file wrote its base job (not JobConfig's dump: a default stays
unwritten, `gpu_memory = "6 GB"` stays as written), so a trial's file reads like one a user would write and
`isaacd submit` / the drop-in directory read it back as `spec.trial_job` makes it. `toml_job_file` writes one such
table as TOML that `config.jobs_dir.parse_drop_in` reads back to exactly the table (no TOML writer is a dependency:
this one writes only what a job table holds). `best_job_file` is the best trial as a job to submit on its own.

Pure: stdlib and isaacd imports, no I/O.
"""

from __future__ import annotations

import datetime
import math
import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..config.jobs_dir import with_paths_under
from .sampler import as_override, trial_name
from .spec import SweepSpec, is_job_key
from .toml_string import toml_string
from .space import Value

BEST_SUFFIX = "-best"  # the best trial's job: <sweep>-best, beside the trial jobs (<sweep>-t007) without clashing

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_COMMENT_UNSAFE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # a comment may hold a tab, not a line break


# ------------------------------------------------------------------------------------------------ TOML text

def toml_job_file(table: dict[str, Any], header: str | None = None) -> str:
    """`table` as a job file: one `[[jobs]]` table, its plain keys first, then each nested table as `[jobs.x]`
    (`[jobs.x.y]` under it); a list's tables inline. `header`: comment lines above it (each line prefixed `# `).
    TypeError for what TOML cannot hold (None, an object), naming the key."""
    lines: list[str] = []
    if header:
        lines += [f"# {_COMMENT_UNSAFE.sub(' ', line)}".rstrip() for line in header.splitlines()]
    lines.append("[[jobs]]")
    _table_body(table, ("jobs",), lines)
    return "\n".join(lines) + "\n"


def _table_body(table: dict[str, Any], path: tuple[str, ...], lines: list[str]) -> None:
    nested = []
    for key, value in table.items():
        if isinstance(value, dict):
            nested.append((key, value))  # after the plain keys: a key below a [header] belongs to that table
        else:
            lines.append(f"{_key(key, path)} = {_value(value, path + (key,))}")
    for key, value in nested:
        sub = path + (key,)
        lines.append("")
        lines.append(f"[{'.'.join(_key(k, path) for k in sub)}]")
        _table_body(value, sub, lines)


def _key(key: Any, path: tuple[str, ...]) -> str:
    if not isinstance(key, str):
        raise TypeError(f"{'.'.join(path)}: key {key!r} is not a string; TOML keys are strings")
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def _value(v: Any, path: tuple[str, ...]) -> str:
    if isinstance(v, bool):  # (before int: True is an int)
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)  # the shortest text that reads back as this float: 0.1, 1e-05, 1e+16 are all TOML floats
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()  # as tomllib reads them (offset or local)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x, path + (f"[{i}]",)) for i, x in enumerate(v)) + "]"
    if isinstance(v, dict):
        items = ", ".join(f"{_key(k, path)} = {_value(x, path + (str(k),))}" for k, x in v.items())
        return "{ " + items + " }" if items else "{}"
    raise TypeError(f"{'.'.join(path)} = {v!r}: TOML has no {type(v).__name__} (a string, number, true/false, "
                    "list or table)")


# ------------------------------------------------------------------------------------------------ trial tables

def trial_table(text: str, base_dir: Path, spec: SweepSpec, number: int, values: dict[str, Value],
                autostart: bool = False) -> dict[str, Any]:
    """Trial `number`'s job table: the sweep file `text`'s `[job]` as written (a relative path made absolute under
    `base_dir`, as parse_sweep does), named <sweep>-tNNN, `autostart` (false: the sweep starts a trial when ASHA
    launches it), each searched job key set and each searched Hydra override appended to extra_args as
    `key=<as_override(value)>`, in the sweep file's order. `JobConfig.model_validate` of it is
    `spec.trial_job(spec, number, values)` but for autostart. `text` is the file `spec` was parsed from."""
    if set(values) != set(spec.space):
        raise ValueError(f"trial values for {sorted(values)}, the sweep searches {sorted(spec.space)}")
    raw = tomllib.loads(text).get("job")
    if not isinstance(raw, dict):
        raise ValueError(f"{spec.source or 'the sweep file'} has no [job] table")
    job: dict[str, Any] = {"name": trial_name(spec.name, number, spec.trials)}
    job.update((k, v) for k, v in with_paths_under(raw, base_dir).items() if k not in ("name", "autostart"))
    job["autostart"] = autostart
    overrides = [f"{key}={as_override(values[key])}" for key in spec.space if not is_job_key(key)]
    if overrides or "extra_args" in job:
        job["extra_args"] = list(job.get("extra_args", [])) + overrides
    for key in spec.space:
        if is_job_key(key):
            job[key] = values[key]
    return job


def best_job_file(text: str, base_dir: Path, spec: SweepSpec, number: int, values: dict[str, Value]) -> str:
    """The best trial as a job file to submit on its own (`isaacd sweep best NAME > best.toml`): the trial's table
    named <sweep>-best (the trial's own name is taken while the sweep's jobs exist; rename it freely), autostart left
    to its default (true: it starts once submitted), with a header comment naming the sweep, the trial and its
    values."""
    table = trial_table(text, base_dir, spec, number, values)
    trial = table["name"]
    del table["autostart"]
    table["name"] = f"{spec.name}{BEST_SUFFIX}"
    said = ", ".join(f"{k}={as_override(values[k])}" for k in spec.space)
    header = (f"the best trial of sweep {spec.name}: trial {number} of {spec.trials} ({trial})"
              + (f": {said}" if said else "") + "\n"
              f"named {table['name']} so it can be submitted beside the sweep's trials; rename it as you like\n"
              f"submit it: isaacd submit best.toml")
    return toml_job_file(table, header)


def trial_header(spec: SweepSpec, number: int, values: dict[str, Value]) -> str:
    """A trial file's comment line: `trial 7 of sweep cartpole-lr: agent.algorithm.learning_rate=0.00031, ...`."""
    said = ", ".join(f"{k}={as_override(values[k])}" for k in spec.space)
    return f"trial {number} of sweep {spec.name}" + (f": {said}" if said else "")
