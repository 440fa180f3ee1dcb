"""isaacd: a host supervisor that keeps Isaac Lab / rsl_rl training alive and visible."""

__version__ = "0.1.0"
