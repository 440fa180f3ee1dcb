"""Control API: JSON over a Unix socket (one request line, one response line).

The socket file is created with the configured mode (default 0600, root only) inside a directory
only its owner can enter; `isaacd status|events|stop|start|restart|reload` are its clients.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .logs import log
from .messages import UnknownJob

if TYPE_CHECKING:
    from .supervisor import Supervisor

MAX_REQUEST_BYTES = 64 * 1024


class NotRunning(RuntimeError):
    pass


class _Handler(socketserver.StreamRequestHandler):
    server: "_Server"

    def handle(self) -> None:
        line = self.rfile.readline(MAX_REQUEST_BYTES)
        try:
            req = json.loads(line)
            resp = {"ok": True, "result": self.server.dispatch(req)}
        except (KeyError, ValueError, TypeError) as exc:
            resp = {"ok": False, "error": str(exc).strip("'\"")}
        except Exception as exc:  # noqa: BLE001
            log.exception("control_request_failed")
            resp = {"ok": False, "error": f"internal error: {exc}"}
        self.wfile.write(json.dumps(resp, default=str).encode() + b"\n")


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    supervisor: "Supervisor"

    def dispatch(self, req: dict[str, Any]) -> Any:
        sup = self.supervisor
        cmd = req.get("cmd")
        if cmd == "status":
            return sup.status()
        if cmd in ("events", "stop", "start", "restart") and req.get("job") not in sup.runners:
            raise UnknownJob(str(req.get("job")), list(sup.runners))  # one wording for every command
        if cmd == "events":
            return sup.events(req["job"], req.get("limit"))
        if cmd in ("stop", "start", "restart"):
            return sup.command(cmd, req["job"])
        if cmd == "reload":
            return sup.reload()
        if cmd == "ping":
            return {"pid": os.getpid()}
        raise ValueError(f"unknown command {cmd!r}")


class ControlServer:
    def __init__(self, supervisor: "Supervisor", path: Path, mode: int):
        self.path = Path(path)
        self.mode = mode
        self.supervisor = supervisor
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        dir_mode = 0o700 | (0o050 if self.mode & 0o060 else 0)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=dir_mode)
        if self.path.exists() or self.path.is_socket():
            try:
                request(self.path, {"cmd": "ping"}, timeout=1.0)
            except NotRunning:
                self.path.unlink()  # stale socket from a crashed supervisor
            else:
                raise RuntimeError(f"another supervisor answers on {self.path}")
        old = os.umask(0o777 & ~self.mode)
        try:
            self._server = _Server(str(self.path), _Handler)
        finally:
            os.umask(old)
        os.chmod(self.path, self.mode)
        self._server.supervisor = self.supervisor
        self._thread = threading.Thread(target=self._server.serve_forever, name="control", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass


def request(path: Path, req: dict[str, Any], timeout: float = 10.0) -> Any:
    """Send one request; raises NotRunning when no supervisor listens, RuntimeError on a refused command."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(json.dumps(req).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                buf += chunk
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise NotRunning(f"no isaacd supervisor is listening on {path} ({exc.strerror}); "
                         "start it with `isaacd run --config FILE` or `systemctl start isaaclab-supervisor`") from None
    except PermissionError:
        raise NotRunning(f"permission denied on {path}: the control socket is root-only by default "
                         "(run as root, or set [supervisor] socket_mode)") from None
    resp = json.loads(buf)
    if not resp.get("ok"):
        raise RuntimeError(resp.get("error", "request failed"))
    return resp["result"]
