from .base import ExitStatus, Handle, LaunchSpec, Runtime, make_runtime

__all__ = ["ExitStatus", "Handle", "LaunchSpec", "Runtime", "make_runtime"]
