from .base import ExitStatus, Handle, LaunchSpec, Runtime

__all__ = ["ExitStatus", "Handle", "LaunchSpec", "Runtime"]
