"""structlog setup: JSON lines for the journal, a readable console format on a terminal."""

from __future__ import annotations

import sys
from typing import Any

_SECRET_WORDS = ("token", "password", "secret", "api_key", "apikey", "credential")


def _redact(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    """Never log secrets: environment-like dicts and args passed to trainers may carry them."""

    def scrub(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: ("***" if any(w in str(k).lower() for w in _SECRET_WORDS) else scrub(v))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        return value

    return {k: ("***" if any(w in k.lower() for w in _SECRET_WORDS) else scrub(v)) for k, v in event.items()}


class _Sink:
    """stderr for log lines, minus its failure mode: when whoever reads it is gone (`isaacd run 2>&1 | grep`,
    then Ctrl-C; a closed journal stream), a write raises BrokenPipeError in whatever thread logged, and one in
    the shutdown path left trainers unstopped. Losing log lines is better than losing supervision."""

    def __init__(self, stream: Any):
        self.stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return int(self.stream.write(text))
            except (OSError, ValueError):  # EPIPE, or a closed file
                self.broken = True
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.stream.flush()
            except (OSError, ValueError):
                self.broken = True


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    import logging

    import structlog

    use_console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: Any = structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _redact,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=_Sink(sys.stderr)),
        cache_logger_on_first_use=False,
    )


class _LazyLogger:
    """structlog's logger, imported on first use: client commands (`isaacd status`) import modules that
    log only on the server side, and structlog's import alone costs them ~30 ms."""

    def __getattr__(self, name: str) -> Any:
        import structlog

        return getattr(structlog.get_logger("isaacd"), name)


log: Any = _LazyLogger()
