"""Control API: JSON over a Unix socket (one request line, one response line).

The socket file is created with the configured mode (default 0600, root only) inside a directory
only its owner can enter; `isaacd status|events|stop|start|restart|reset|reload|nodes|cordon|uncordon` are its
clients. The server sees the supervisor through `Controlled` and the ray runtime through `Fleet`, and imports
neither: the clients import this module, and must not pay for pydantic (tests/test_cli.py).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

from .daemon_log import log
from .status.types import Status
from .wording import no_such_job

MAX_REQUEST_BYTES = 64 * 1024
# Bounds that keep a flood of clients from costing the supervisor more than a few fds and threads:
# supervision (saving history, launching trainers) needs fds too, and must never wait on a client.
MAX_CLIENTS = 16  # connections served at once; more get an immediate "busy" reply and retry
BACKLOG = 256  # the kernel queues this many before connect() says EAGAIN; clients retry that too
REQUEST_DEADLINE = 5.0  # a client has this long to send its request line (a silent client is cut off)
REPLY_DEADLINE = 10.0  # and to take its reply
CLIENT_RETRY_FOR = 5.0  # how long a client keeps retrying a full backlog / busy server


class NotRunning(RuntimeError):
    pass


class RequestError(ValueError):
    """A request the supervisor refuses; the message is shown to the operator as is."""


class _Busy(Exception):
    pass


class Cordoning(Protocol):
    """The nodes a fleet keeps new attempts off, by name, until an operator clears them."""

    def get(self) -> dict[str, dict[str, Any]]:
        """Node name -> why and since when it is cordoned."""

    def add(self, node: str, reason: str, node_id: str | None = None) -> bool:
        """False when it already was."""

    def remove(self, node: str) -> bool:
        """False when it was not cordoned."""


class FleetView(Protocol):
    """What `isaacd nodes` answers (runtimes/ray_fleet.FleetStatus), seen from here without importing the runtime:
    its nodes, and its JSON for the socket."""

    @property
    def nodes(self) -> Sequence[object]: ...

    def to_json(self) -> dict[str, Any]: ...


@runtime_checkable
class Fleet(Protocol):
    """A runtime that places jobs on a cluster of nodes (runtimes/ray.RayRuntime): what the operator may see of
    the nodes and do to them (`isaacd nodes|cordon|uncordon`). Called from the control socket's threads: cached
    data only. Defined here, not beside the Runtime interface: this module stays light for the clients."""

    @property
    def cordons(self) -> Cordoning: ...

    def nodes_status(self) -> FleetView:
        """The nodes as last observed, with their cordons and jobs, and the jobs waiting for room."""

    def refresh_for_operator(self) -> None:
        """Queue a fresh node listing; its answer comes with a later `nodes_status`."""


class Controlled(Protocol):
    """What the control socket may do to the supervisor (supervisor.Supervisor is it): read the published
    status and a job's events, hand a job an operator command, reload the config, reach the fleet of nodes.
    Called from the socket's threads: each method takes the supervisor's lock itself where it needs it."""

    def status(self) -> Status: ...

    def job_names(self) -> Collection[str]: ...

    def events(self, job: str, limit: int | None = None) -> list[dict[str, Any]]: ...

    def command(self, op: str, job: str) -> str: ...

    def reload(self) -> dict[str, Any]: ...

    def submit(self, text: str, source: str) -> str:
        """`isaacd submit`: one job file, validated, written into jobs_dir, applied as a reload (issue 31)."""

    def cancel(self, job: str) -> str:
        """`isaacd cancel`: a submitted job stopped with a save and removed (its history and logs kept)."""

    def fleet(self) -> Fleet | None:
        """The runtime that places jobs on nodes (ray) when the config has a [ray] section, else None."""


def _job_field(req: dict[str, Any]) -> str:
    job = req.get("job")
    if not isinstance(job, str) or not job:
        raise RequestError("missing field 'job' (a job name)")
    return job


def _no_such_job(sup: Controlled, job: str) -> RequestError:
    return RequestError(no_such_job(job, sup.job_names()))  # the one wording the client uses too


def dispatch(sup: Controlled, req: Any) -> Any:
    if not isinstance(req, dict):
        raise RequestError("a request is one JSON object per line, e.g. {\"cmd\": \"status\"}")
    cmd = req.get("cmd")
    if cmd == "status":
        return sup.status().to_json()
    if cmd == "events":
        job = _job_field(req)
        if job not in sup.job_names():
            raise _no_such_job(sup, job)
        limit = req.get("limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise RequestError(f"limit must be a whole number >= 0, got {json.dumps(limit)}")
        return sup.events(job, limit)
    if cmd in ("stop", "start", "restart", "reset", "backup-takeover"):
        job = _job_field(req)
        if job not in sup.job_names():
            raise _no_such_job(sup, job)
        return sup.command(cmd, job)
    if cmd == "reload":
        return sup.reload()
    if cmd == "submit":
        text, source = req.get("text"), req.get("source")
        if not isinstance(text, str) or not isinstance(source, str):
            raise RequestError("submit needs 'text' (the job file's contents) and 'source' (its path, for errors)")
        return sup.submit(text, source)
    if cmd == "cancel":
        return sup.cancel(_job_field(req))
    if cmd in ("nodes", "cordon", "uncordon"):
        return _ray_request(sup, cmd, req)
    if cmd == "ping":
        return {"pid": os.getpid()}
    raise RequestError(f"unknown command {json.dumps(cmd)}; commands: status, events, stop, start, restart, "
                       "reset, backup-takeover, reload, submit, cancel, ping, nodes, cordon, uncordon")


def _ray_request(sup: Controlled, cmd: str, req: dict[str, Any]) -> Any:
    """The Ray cluster's nodes and the cordons (runtimes/ray.py): cached data, never a wait on Ray."""
    rt = sup.fleet()
    if rt is None:
        raise RequestError("this supervisor has no [ray] section in its config: there are no nodes to show")
    if cmd == "nodes":
        if not rt.nodes_status().nodes:
            rt.refresh_for_operator()  # nothing listed yet (no job placed): ask, answer with what is known
        return rt.nodes_status().to_json()
    node = req.get("node")
    if not isinstance(node, str) or not node:
        raise RequestError("missing field 'node' (a node name, as `isaacd nodes` shows it)")
    if cmd == "uncordon":
        if not rt.cordons.remove(node):
            cordoned = ", ".join(rt.cordons.get()) or "none"
            raise RequestError(f"node {node!r} is not cordoned (cordoned: {cordoned})")
        return f"{node} uncordoned: jobs may be placed there again"
    reason = req.get("reason") or "operator (isaacd cordon)"
    if not rt.cordons.add(node, str(reason)):
        return f"{node} was already cordoned"
    return f"{node} cordoned: no new attempt is placed there (running ones stay) until `isaacd uncordon {node}`"


def _error_text(exc: Exception) -> str:
    # str(KeyError("x")) is "'x'" (a repr); the message itself is args[0]
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return str(exc)


def _recv_line(conn: socket.socket, deadline: float) -> bytes:
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no complete request line in time")
        conn.settimeout(left)
        chunk = conn.recv(4096)
        if not chunk:
            break
        buf += chunk
        if len(buf) > MAX_REQUEST_BYTES:
            raise RequestError(f"request longer than {MAX_REQUEST_BYTES} bytes")
    return buf.split(b"\n", 1)[0]


def _send(conn: socket.socket, resp: dict[str, Any], timeout: float) -> None:
    conn.settimeout(timeout)
    conn.sendall(json.dumps(resp, default=str).encode() + b"\n")


class ControlServer:
    """One accept thread; at most MAX_CLIENTS handler threads, each with a deadline."""

    def __init__(self, supervisor: Controlled, path: Path, mode: int):
        self.path = Path(path)
        self.mode = mode
        self.supervisor = supervisor
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        self._stopping = threading.Event()
        self.busy_replies = 0
        self.timeouts = 0

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
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o777 & ~self.mode)
        try:
            sock.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, self.mode)
        sock.listen(BACKLOG)
        sock.settimeout(0.5)  # so stop() is noticed without a wake-up connection
        self._sock = sock
        self._thread = threading.Thread(target=self._accept_loop, name="control", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._stopping.is_set():
                    return
                # EMFILE/ENFILE: the host or we are out of fds. Back off instead of spinning; the
                # connection stays queued and is served once fds are free again.
                log.warning("control_accept_failed", error=str(exc))
                self._stopping.wait(0.2)
                continue
            if not self._slots.acquire(blocking=False):
                self.busy_replies += 1
                try:
                    _send(conn, {"ok": False, "busy": True, "error": "supervisor busy: too many control clients"},
                          0.2)
                except OSError:
                    pass
                conn.close()
                continue
            try:
                threading.Thread(target=self._serve, args=(conn,), name="control-client", daemon=True).start()
            except RuntimeError:  # cannot start a thread: answer nothing, keep accepting
                self._slots.release()
                conn.close()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                try:
                    line = _recv_line(conn, time.monotonic() + REQUEST_DEADLINE)
                except TimeoutError:
                    self.timeouts += 1
                    return  # a silent or slow client: cut off, the slot goes to someone else
                except (RequestError, OSError) as exc:
                    if isinstance(exc, RequestError):
                        _send(conn, {"ok": False, "error": str(exc)}, REPLY_DEADLINE)
                    return
                try:
                    resp = {"ok": True, "result": dispatch(self.supervisor, json.loads(line))}
                except (KeyError, ValueError, TypeError) as exc:  # RequestError, bad JSON, refused command
                    resp = {"ok": False, "error": _error_text(exc) if not isinstance(exc, json.JSONDecodeError)
                            else f"not a JSON request: {exc}"}
                except Exception as exc:  # noqa: BLE001
                    log.exception("control_request_failed")
                    resp = {"ok": False, "error": f"internal error: {exc}"}
                _send(conn, resp, REPLY_DEADLINE)
        except OSError:
            pass  # the client went away or stopped reading: its problem, not ours
        finally:
            self._slots.release()

    def stop(self) -> None:
        self._stopping.set()
        if self._sock is not None:
            self._sock.close()
        if self._thread is not None:
            self._thread.join(2.0)
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def _request_once(path: Path, req: dict[str, Any], timeout: float) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))  # BlockingIOError (EAGAIN) when the listen backlog is full
        sock.sendall(json.dumps(req).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
    if not buf:
        raise RuntimeError(f"the supervisor on {path} closed the connection without a reply")
    resp = json.loads(buf)
    if resp.get("busy"):
        raise _Busy(resp.get("error"))
    return resp


def request(path: Path, req: dict[str, Any], timeout: float = 10.0, retry_for: float = CLIENT_RETRY_FOR) -> Any:
    """Send one request; raises NotRunning when no supervisor listens, RuntimeError on a refused command.

    A full listen backlog or a "busy" reply means nothing was executed, so it is retried for up to
    `retry_for` seconds with a short backoff: many clients at once take turns instead of failing."""
    give_up = time.monotonic() + retry_for
    delay = 0.005
    while True:
        try:
            resp = _request_once(path, req, timeout)
            break
        except (BlockingIOError, _Busy) as exc:
            if time.monotonic() + delay > give_up:
                raise RuntimeError(f"the supervisor on {path} stayed busy for {retry_for:g} s "
                                   f"({exc or 'listen backlog full'}); try again") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise NotRunning(f"no isaacd supervisor is listening on {path} ({exc.strerror}); "
                             "start it with `isaacd run --config FILE` or `systemctl start isaaclab-supervisor`") from None
        except PermissionError:
            raise NotRunning(f"permission denied on {path}: the control socket is root-only by default "
                             "(run as root, or set [supervisor] socket_mode)") from None
    if not resp.get("ok"):
        raise RuntimeError(resp.get("error", "request failed"))
    return resp["result"]
