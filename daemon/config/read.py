"""Reading a config file that someone may be saving right now.

Editors and `echo > file` rewrite files in place: truncate, then write, possibly in several
pieces. A reload that reads in between sees an empty or cut-off file, and a cut-off file can be
valid TOML that simply lacks the later jobs. So a reload reads only a file that has been unchanged
for SETTLE seconds, and reads it twice: the bytes it parsed must still be the file's bytes after.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from .schema import Config, ConfigError, ConfigIssue, parse_config, tomllib

SETTLE = 0.5  # seconds a file must be unchanged before it is read
MAX_WAIT = 5.0  # a file that keeps changing longer than this is reported, not read


def quiet_for(path: str | Path, settle: float = SETTLE) -> float | None:
    """Seconds since the file last changed if at least `settle`, else None (a missing file is quiet)."""
    try:
        st = os.stat(path)
    except OSError:
        return settle
    age = time.time() - max(st.st_mtime, st.st_ctime)
    return age if age >= settle or age < -1.0 else None  # a future mtime (clock step) counts as quiet


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(str(path), [ConfigIssue("", f"cannot read: {exc.strerror}")]) from None


def read_settled_config(path: str | Path, settle: float = SETTLE,
                        max_wait: float = MAX_WAIT) -> tuple[Config, dict[str, Any]]:
    """(validated config, raw TOML table) of a file that stood still while it was read."""
    path = Path(path)
    give_up = time.monotonic() + max_wait
    while True:
        while quiet_for(path, settle) is None:
            if time.monotonic() > give_up:
                raise ConfigError(str(path), [ConfigIssue("", f"the file kept changing for {max_wait:g} s; "
                                                               "not reloaded (reload again once it is saved)")])
            time.sleep(min(settle / 4, 0.1))
        data = _read(path)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(str(path), [ConfigIssue("", "not UTF-8 text")]) from None
        cfg = parse_config(text, str(path), path.resolve().parent)  # raises ConfigError, naming the file
        raw = tomllib.loads(text)
        if _read(path) == data and quiet_for(path, settle) is not None:
            return cfg, raw
        if time.monotonic() > give_up:
            raise ConfigError(str(path), [ConfigIssue("", f"the file kept changing for {max_wait:g} s; "
                                                           "not reloaded (reload again once it is saved)")])
