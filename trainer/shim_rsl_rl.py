"""What the launcher shim reads off an rsl_rl runner, the same way for every rsl_rl generation it hooks (2.x - 5.x:
the run dir is ``runner.log_dir`` up to 4.x and ``runner.logger.log_dir`` in 5.x; the writer likewise). Stdlib only,
loaded with the shim (shim.py)."""

from __future__ import annotations

import os
import sys


def log_dir(runner) -> str | None:
    d = getattr(runner, "log_dir", None)
    if d is None:
        d = getattr(getattr(runner, "logger", None), "log_dir", None)
    return os.path.abspath(d) if d else None


def writer(runner):
    w = getattr(getattr(runner, "logger", None), "writer", None)
    return w if w is not None else getattr(runner, "writer", None)


def flush_writer(runner) -> None:
    w = writer(runner)
    if w is not None and hasattr(w, "flush"):
        try:
            w.flush()
        except Exception:
            pass


def logs_disabled(runner) -> bool:
    return bool(getattr(runner, "disable_logs", False) or getattr(getattr(runner, "logger", None), "disable_logs",
                                                                        False))


def rsl_rl_version() -> str | None:
    try:
        from importlib import metadata

        for dist in ("rsl-rl-lib", "rsl_rl"):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
    except Exception:
        pass
    return getattr(sys.modules.get("rsl_rl"), "__version__", None)
