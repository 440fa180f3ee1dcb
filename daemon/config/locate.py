"""Where is my supervisor? Socket lookup for the `isaacd` client, without importing the config models.

Two jobs, both for the client's sake:

* `socket_from_file` reads the control socket path straight from a config file with `tomllib` (and, for a
  file that is mid-edit and not valid TOML, from the one `control_socket = "..."` line), so `isaacd status`
  starts in a few tens of milliseconds instead of paying for pydantic.
* A per-user registry of running supervisors (`$XDG_RUNTIME_DIR/isaacd/`, else `/tmp/isaacd-<uid>/`): each
  `isaacd run` drops `<pid>.json` there naming its socket, config, directory and metrics address. A client
  started in another directory with no config finds the user's supervisor through it; a supervisor that
  cannot bind its metrics port can say which other supervisor holds it.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..os_seam.oscalls import signal_pid

SYSTEM_CONFIG = Path("/etc/isaacd/isaacd.toml")
# Defined here, not in config.py (which imports both), so the client need not import pydantic for them:
# config.SupervisorConfig's default control socket, and the config name of a supervisor that runs the embedded
# default config (config.load_embedded_default), as `isaacd status`, `isaacd reload` and the registry show it.
DEFAULT_SOCKET = Path("/run/isaacd/isaacd.sock")
EMBEDDED_DEFAULT_NAME = "<embedded default>"
_SOCKET_LINE = re.compile(r'^\s*control_socket\s*=\s*["\']([^"\']+)["\']', re.M)


def config_path(arg: str | None) -> str | None:
    """The config file a command uses: --config, else $ISAACD_CONFIG, else the system file if present."""
    if arg:
        return arg
    env = os.environ.get("ISAACD_CONFIG")
    if env:
        return env
    return str(SYSTEM_CONFIG) if SYSTEM_CONFIG.exists() else None


def _resolve(sock: str, base: Path) -> Path:
    p = Path(sock)
    return p if p.is_absolute() else (base / p).resolve()


def socket_from_file(path: str) -> Path:
    """The control socket a config file names (relative to the file), else the built-in default."""
    base = Path(path).resolve().parent
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return DEFAULT_SOCKET
    try:
        sock = tomllib.loads(text).get("supervisor", {}).get("control_socket")
    except tomllib.TOMLDecodeError:
        # An editor is mid-write or the file is broken: the supervisor still runs on the old file, so
        # the one line that matters is enough to reach it (`isaacd reload` then reports the error).
        m = _SOCKET_LINE.search(text)
        sock = m.group(1) if m else None
    return _resolve(sock, base) if isinstance(sock, str) else DEFAULT_SOCKET


def embedded_default_socket(cwd: Path) -> Path:
    """The socket of a supervisor running the embedded default config in directory `cwd`."""
    text = (Path(__file__).parents[1] / "default.toml").read_text(encoding="utf-8")  # isaacd/default.toml
    sock = tomllib.loads(text)["supervisor"]["control_socket"]
    return _resolve(sock, cwd)


# ---- the per-user registry ----------------------------------------------------------------------
def registry_dir(create: bool = False) -> Path | None:
    """This user's registry directory, or None when it is missing or not safely ours.

    Under /tmp another user could have created the directory first; a directory we do not own, or that
    others can write, is ignored rather than trusted."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "isaacd" if runtime and Path(runtime).is_dir() else Path(f"/tmp/isaacd-{os.getuid()}")
    try:
        if create:
            base.mkdir(mode=0o700, parents=False, exist_ok=True)
        st = os.lstat(base)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        return None
    return base


@dataclass(frozen=True)
class Registered:
    pid: int
    socket: Path
    config: str
    cwd: str
    metrics: str | None

    def describe(self) -> str:
        return f"pid {self.pid}, config {self.config}, started in {self.cwd}, socket {self.socket}"


def _alive(pid: int) -> bool:
    try:
        signal_pid(pid, 0)  # signal 0: only asks whether the pid exists (through the OS seam)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def register(socket: Path, config: str | None, metrics: str | None) -> Path | None:
    """Announce this supervisor; returns the file to pass to `unregister`. Best effort: never fatal."""
    d = registry_dir(create=True)
    if d is None:
        return None
    entry = {"pid": os.getpid(), "socket": str(socket), "config": config or EMBEDDED_DEFAULT_NAME,
             "cwd": os.getcwd(), "metrics": metrics}
    path = d / f"{os.getpid()}.json"
    tmp = d / f".{os.getpid()}.json.tmp"
    try:
        tmp.write_text(json.dumps(entry), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def unregister(path: Path | None) -> None:
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass


def registered() -> list[Registered]:
    """Supervisors of this user that are alive and still have their socket; stale entries are removed."""
    d = registry_dir()
    if d is None:
        return []
    out = []
    for f in sorted(d.glob("*.json")):
        try:
            raw: dict[str, Any] = json.loads(f.read_text(encoding="utf-8"))
            entry = Registered(int(raw["pid"]), Path(raw["socket"]), str(raw.get("config")), str(raw.get("cwd")),
                               raw.get("metrics"))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if entry.pid != os.getpid() and _alive(entry.pid) and entry.socket.exists():
            out.append(entry)
        elif not _alive(entry.pid):
            unregister(f)  # left by a supervisor that was killed
    return out


class Ambiguous(LookupError):
    pass


@dataclass(frozen=True)
class Found:
    socket: Path
    how: str  # for hints: how the socket was chosen
    entry: Registered | None = None  # the registered supervisor it is, when the registry chose it
    unread: str | None = None  # the config file that names the socket could not be read: why (the default was taken)


def find_socket(socket_arg: str | None, config_arg: str | None, cwd: Path | None = None) -> Found:
    """The control socket a client command talks to: the one lookup of every command that talks to a supervisor
    (cli/main.py Client; `isaacd logs` too, which then asks that supervisor where the files are). Only looks: it
    creates nothing, here or anywhere.

    --socket, then the config file (--config, $ISAACD_CONFIG, /etc/isaacd/isaacd.toml); with none of those,
    the embedded default's ./var/isaacd.sock when it exists here, else the user's one registered supervisor."""
    if socket_arg:
        return Found(Path(socket_arg), "--socket")
    path = config_path(config_arg)
    if path is not None:
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:  # another user's 0600 config: its control_socket is unknown here, the default a guess
            return Found(DEFAULT_SOCKET, f"config {path}", unread=f"{path}: {exc.strerror}")
        return Found(socket_from_file(path), f"config {path}")
    here = embedded_default_socket(cwd or Path.cwd())
    if here.exists():
        return Found(here, "embedded default in this directory")
    live = registered()
    if len(live) == 1:
        return Found(live[0].socket, f"registered supervisor ({live[0].describe()})", live[0])
    if len(live) > 1:
        raise Ambiguous("several isaacd supervisors run for this user:\n"
                        + "\n".join(f"  {e.describe()}" for e in live)
                        + "\npick one with --socket PATH (or --config FILE), or run isaacd in its directory")
    return Found(here, "none")


def denied(socket: Path) -> bool:
    """The socket is there but connecting to it is refused us (its mode, its group, or its directory's): a supervisor
    runs that we may not ask, so no config read here stands in for its answer."""
    try:
        os.lstat(socket)
    except PermissionError:  # its directory is not ours to search (run/ of mode 0750): it may well be there
        return True
    except OSError:
        return False
    return not os.access(socket, os.W_OK)  # connect(2) needs write permission on the socket file


def not_running_hint(found: Found) -> str:
    """What to do when nothing answers on the socket `find_socket` chose."""
    if found.unread is not None:
        return (f"cannot read the config that names the supervisor's socket ({found.unread}), and nothing answers on "
                f"the default one, {found.socket}; give the socket its [supervisor] control_socket names: "
                "--socket PATH")
    if found.how != "none":
        return ""
    where = registry_dir()
    return ("no supervisor runs for this user: none in this directory (./var/isaacd.sock) and none registered"
            + (f" in {where}" if where else "")
            + "; start one with `isaacd run` (or `isaacd run --config FILE`), "
              "or reach another user's with --socket PATH / --config FILE")



# ---- the config a found supervisor runs (issue 39) -----------------------------------------------------------
def supervisor_cwd(pid: int | None, socket: Path | None = None) -> Path | None:
    """The directory a supervisor was started in, where its relative config path and the embedded default's ./var
    lie: the registry's word for a supervisor of this user, else /proc/PID/cwd (its owner's or root's to read), else,
    for a supervisor on the embedded default's socket, the directory above that socket's ./var. None: unknown."""
    if pid is None:
        return None
    for entry in registered():
        if entry.pid == pid:
            return Path(entry.cwd)
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        pass
    if socket is not None:
        above = Path(os.path.abspath(socket)).parent.parent
        if embedded_default_socket(above) == Path(os.path.abspath(socket)):
            return above
    return None


def supervisor_config(config: str | None, cwd: Path | None, socket: Path) -> tuple[str | None, Path]:
    """The config file a supervisor runs, from its own word (status's config_path, or its registry entry's config,
    either as it was given to `isaacd run`) and the directory it was started in: (an absolute path, or None for the
    embedded default; the directory the embedded default's relative paths are under). Raises LookupError, saying
    what to give instead, when that cannot be known from here."""
    if config and config != EMBEDDED_DEFAULT_NAME and os.path.isabs(config):
        return config, cwd or Path(config).parent
    if cwd is None:
        what = "the embedded default config" if not config or config == EMBEDDED_DEFAULT_NAME else \
            f"config {config!r}, a path relative to the directory it was started in"
        raise LookupError(f"the supervisor on {socket} runs {what}, and which directory that is cannot be read from "
                          "here; give the file with --config FILE")
    if not config or config == EMBEDDED_DEFAULT_NAME:
        return None, cwd
    return str(cwd / config), cwd
