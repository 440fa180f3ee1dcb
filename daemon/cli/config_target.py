"""Which config `isaacd check-config` and `isaacd doctor` read when no file is named (issue 39).

The config of the supervisor the command finds, as every command finds it (config/locate.py `find_socket`): with
`--socket S`, the file S's supervisor says it runs, never $ISAACD_CONFIG's nor this directory's embedded default; from
the registry, the registered supervisor's. Only a command with no supervisor to find reads the defaults
(`config_path`: $ISAACD_CONFIG, /etc/isaacd/isaacd.toml, else the embedded default here)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..config.locate import Found, config_path, supervisor_config, supervisor_cwd

Ask = Callable[[dict[str, Any]], Any]  # one request to the supervisor (cli/main.py Client)


@dataclass(frozen=True)
class Target:
    path: str | None  # the config file; None: the embedded default
    cwd: Path  # where the embedded default's relative paths (./var) lie
    how: str  # for the user: whose config this is


def target_config(found: Found, ask: Ask) -> Target:
    """The config the supervisor that `found` names runs. `ask` is only called for --socket (the socket is all that
    says which supervisor is meant); raises LookupError when its config cannot be located from here."""
    if found.how == "--socket":
        info = (ask({"cmd": "status"}) or {}).get("supervisor") or {}
        pid = info.get("pid") if isinstance(info.get("pid"), int) else None
        config = info.get("config_path") if isinstance(info.get("config_path"), str) else None
        path, cwd = supervisor_config(config, supervisor_cwd(pid, found.socket), found.socket)
        return Target(path, cwd, f"the config of the supervisor on {found.socket}")
    if found.entry is not None:  # the user's one registered supervisor: its registry entry says where it runs
        path, cwd = supervisor_config(found.entry.config, Path(found.entry.cwd), found.socket)
        return Target(path, cwd, f"the config of the registered supervisor (pid {found.entry.pid})")
    # a config file (--config, $ISAACD_CONFIG, /etc/isaacd/isaacd.toml) or the embedded default in this directory
    return Target(config_path(None), Path.cwd(), found.how)


def load_target(target: Target) -> tuple[Any, str | None]:
    """The config, validated (imports pydantic), and its path (None: the embedded default); raises ConfigError."""
    from ..config.schema import load_config, load_embedded_default

    return (load_embedded_default(target.cwd), None) if target.path is None else (load_config(target.path),
                                                                                   target.path)
