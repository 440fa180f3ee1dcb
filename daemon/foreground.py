"""`isaacd run`: build the supervisor, start it or explain in one line why it cannot, run until stopped."""

from __future__ import annotations

import errno
import shlex
import sys
from typing import Any

from .config import locate


def _port(listen: str) -> str:
    return listen.rsplit(":", 1)[-1]


def metrics_busy_message(listen: str, config_path: str | None) -> str:
    """One line: which address, who holds it if it is another isaacd of this user, and the fix."""
    holder = next((e for e in locate.registered() if e.metrics == listen), None)
    who = f" by another isaacd supervisor ({holder.describe()})" if holder else ""
    port = _port(listen)
    use_that = "; use that one (`isaacd status` finds it from any directory) or stop it" if holder else \
        f"; stop what holds it (`ss -ltnp 'sport = :{port}'` shows it)"
    if config_path is None:
        fix = ("or run this one with a config that sets another port in [metrics] listen, e.g. "
               "`isaacd run --config FILE` with listen = \"127.0.0.1:9836\" (etc/isaacd.toml is an example)")
    else:
        fix = f"or set another port in [metrics] listen in {shlex.quote(config_path)}, e.g. \"127.0.0.1:9836\""
    return f"isaacd: metrics address {listen} is already in use{who}{use_that}, {fix}"


def _abandon(sup: Any) -> None:
    """Undo a start that failed half-way: no stale control socket, no threads; trainers are left alone
    (none was launched yet, and an adopted one belongs to whichever supervisor runs next)."""
    for ext in reversed(sup.extensions):
        try:
            ext.stop()
        except Exception:  # noqa: BLE001 - best effort: the process is about to exit anyway
            pass
    if sup.control is not None:
        sup.control.stop()


def run_supervisor(cfg: Any, path: str | None) -> int:
    from .app import MetricsUnavailable, build_supervisor
    from .control import ControlSocketError
    from .daemon_log import configure_logging
    from .supervisor import AlreadyRunning

    configure_logging(cfg.supervisor.log_level, cfg.supervisor.log_format)
    try:
        sup = build_supervisor(cfg, path)
    except AlreadyRunning as exc:
        print(f"isaacd: {exc}", file=sys.stderr)
        return 1
    sup.install_signal_handlers()  # before start(): a Ctrl-C during the first launch still stops cleanly
    try:
        sup.start()
    except MetricsUnavailable as exc:
        _abandon(sup)
        if exc.errno == errno.EADDRINUSE:
            print(metrics_busy_message(exc.listen, path), file=sys.stderr)
        else:
            print(f"isaacd: metrics: {exc}; set another address in [metrics] listen, or enabled = false",
                  file=sys.stderr)
        return 1
    except ControlSocketError as exc:  # [supervisor] socket_group names no group: one line naming the key
        _abandon(sup)
        print(f"isaacd: {path or 'config'}: {exc}", file=sys.stderr)
        return 2
    except BaseException:
        _abandon(sup)
        raise
    metrics = cfg.metrics.listen if cfg.metrics.enabled else None
    entry = locate.register(cfg.supervisor.control_socket, path, metrics)
    try:
        if path is None:
            print(f"isaacd: running the embedded default config (state in {cfg.supervisor.state_dir}); "
                  "`isaacd status` reaches it from any directory", file=sys.stderr)
        sup.run_forever()
    finally:
        locate.unregister(entry)
    return 0
