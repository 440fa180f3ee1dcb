"""Wires a Supervisor together with its optional parts (GPU sampler, metrics, watchdogs)."""

from __future__ import annotations

from .config import Config
from .supervisor import Supervisor
from .watchdogs.engine import WatchdogEngine


def build_supervisor(cfg: Config, config_path: str | None) -> Supervisor:
    sup = Supervisor(cfg, config_path)
    sup.extensions.append(WatchdogEngine(sup))
    return sup
