"""NVML's return codes as the kinds of error isaacd counts and raises, and NVML's byte strings as text."""

from __future__ import annotations

from typing import Any

from .types import GpuError, GpuLostError, GpuNotSupportedError, GpuPermissionError

_NOT_SUPPORTED = {3, 13}  # NOT_SUPPORTED, FUNCTION_NOT_FOUND
_LOST = {15, 16}  # GPU_IS_LOST, RESET_REQUIRED
_NO_PERMISSION = 4
_TIMEOUT = 10
NO_INSTANCE = 0xFFFFFFFF  # an XID event's GPU or compute instance id when it has none


def text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def kind(err: Exception) -> str:
    v = getattr(err, "value", None)
    if v in _NOT_SUPPORTED:
        return "not_supported"
    if v in _LOST:
        return "gpu_lost"
    if v == _NO_PERMISSION:
        return "no_permission"
    if v == _TIMEOUT:
        return "timeout"
    return "error"


def power_error(e: Exception, gpu_key: str, verb: str) -> GpuError:
    """A failed power-limit read (``verb`` "read") or write ("set") as the error the caller can act on."""
    k = kind(e)
    if k == "no_permission":
        return GpuPermissionError(f"GPU {gpu_key}: cannot {verb} the power limit: {e} "
                                  "(setting power limits needs root)")
    if k == "not_supported":
        return GpuNotSupportedError(f"GPU {gpu_key}: power limit {verb} not supported: {e}")
    if k == "gpu_lost":
        return GpuLostError(f"GPU {gpu_key}: {e}")
    return GpuError(f"GPU {gpu_key}: cannot {verb} the power limit: {e}")
