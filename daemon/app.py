"""Wires a Supervisor together with its optional parts (GPU sampler, metrics, watchdogs)."""

from __future__ import annotations

from .config import Config
from .supervisor import Supervisor


def build_supervisor(cfg: Config, config_path: str | None) -> Supervisor:
    return Supervisor(cfg, config_path)
