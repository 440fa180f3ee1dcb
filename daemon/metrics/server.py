"""HTTP endpoint for Prometheus: ``serve("127.0.0.1:9835", "/metrics", registry)``.

Loopback by default; binds a wildcard address (``0.0.0.0``, ``[::]``) only when the config says so.
Serves ``path`` (Prometheus text format, or OpenMetrics when asked), ``/healthz`` and a tiny index
page; everything else is 404.  One thread per request, daemon threads, no reverse DNS lookups.
"""

from __future__ import annotations

import ipaddress
import socket
from http import HTTPStatus
import threading
from socketserver import TCPServer, ThreadingMixIn
from typing import Any, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import structlog
from prometheus_client import CollectorRegistry, make_wsgi_app

log = structlog.get_logger("isaacd.metrics")

DEFAULT_LISTEN = "127.0.0.1:9835"


def parse_listen(listen: str) -> tuple[str, int]:
    """``"127.0.0.1:9835"`` / ``"[::1]:9835"`` / ``"localhost:9835"`` -> (host, port).

    An empty host (``":9835"``) is refused: binding every interface must be spelled out."""
    listen = listen.strip()
    if listen.startswith("["):
        host, sep, port = listen[1:].partition("]:")
        if not sep:
            raise ValueError(f'bad listen address {listen!r}; IPv6 is "[::1]:9835"')
    else:
        host, sep, port = listen.rpartition(":")
        if not sep:
            raise ValueError(f'bad listen address {listen!r}; use "host:port", e.g. "{DEFAULT_LISTEN}"')
        if ":" in host:
            raise ValueError(f'bad listen address {listen!r}; put IPv6 addresses in brackets: "[::1]:9835"')
    if not host:
        raise ValueError(f'listen address {listen!r} has no host; say "0.0.0.0:{port}" to listen on every interface')
    try:
        p = int(port)
    except ValueError:
        raise ValueError(f"bad port in listen address {listen!r}") from None
    if not 0 <= p <= 65535:
        raise ValueError(f"port out of range in listen address {listen!r}")
    return host, p


class _Handler(WSGIRequestHandler):
    # A client that connects and says nothing (or trickles) is cut off instead of holding a thread forever.
    timeout = 10.0

    def address_string(self) -> str:  # no reverse DNS
        return str(self.client_address[0])

    def parse_request(self) -> bool:
        # An HTTP/0.9 request line ("GET /metrics") has no headers after it, but http.server goes on to
        # read headers and the client waits forever. Answer it at once, in HTTP/1.0, and close.
        self.requestline = self.raw_requestline.decode("iso-8859-1", "replace").rstrip("\r\n")
        words = self.requestline.split()
        if len(words) == 2:
            self.command, self.path, self.request_version = words[0], words[1], "HTTP/1.0"
            self.close_connection = True
            self.send_error(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, None, "HTTP/0.9 is not supported; use HTTP/1.0 or later")
            return False
        return super().parse_request()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # scrapes every few seconds would flood the journal


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64  # listen backlog (socketserver's default of 5 refuses a burst of scrapes)
    max_clients = 32  # connections served at once; more are closed at once, so a flood costs no fds

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(self.max_clients)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints a traceback to stderr for every client that hangs up mid-reply or times out
        log.debug("metrics request failed", client=str(client_address[0]), exc_info=True)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup that can hang for
        # seconds on a host with broken DNS; we don't need the name.
        TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)
        self.setup_environ()


def _family(host: str) -> socket.AddressFamily:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:  # a name such as "localhost": resolve it (first answer wins)
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        if not infos:
            raise OSError(f"cannot resolve {host!r}") from None
        return infos[0][0]


def make_app(path: str, registry: CollectorRegistry) -> Callable[..., Iterable[bytes]]:
    metrics_app = make_wsgi_app(registry)
    index = (f'<html><head><title>isaacd</title></head><body><h1>isaacd</h1>'
             f'<p><a href="{path}">{path}</a></p></body></html>').encode()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            # read-only endpoint: DELETE / must not look like it did something
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD"),
                                                      ("Content-Type", "text/plain; charset=utf-8")])
            return [f"{method} not allowed; this endpoint is read-only (GET, HEAD)\n".encode()]
        if method == "HEAD":
            # what GET would answer, headers only (wsgiref does not drop the body of a HEAD by itself)
            for _chunk in get_app({**environ, "REQUEST_METHOD": "GET"}, start_response):
                pass  # run the GET for its status and headers; the body is dropped
            return []
        return get_app(environ, start_response)

    def get_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        req = environ.get("PATH_INFO") or "/"
        if req == path or req == path.rstrip("/") + "/" and path != "/":
            return metrics_app(environ, start_response)
        if req == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"ok\n"]
        if req == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [index]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [f"not found; metrics are at {path}\n".encode()]

    return app


class MetricsServer:
    """A running endpoint: ``.url``, ``.host``, ``.port``, ``.close()``."""

    def __init__(self, httpd: WSGIServer, thread: threading.Thread, host: str, path: str):
        self._httpd = httpd
        self._thread = thread
        self.host = host
        self.port: int = httpd.server_address[1]
        self.path = path
        self._closed = False

    @property
    def url(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        if h in ("0.0.0.0", "[::]"):
            h = "127.0.0.1" if h == "0.0.0.0" else "[::1]"
        return f"http://{h}:{self.port}{self.path}"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5.0)

    def __enter__(self) -> "MetricsServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def serve(listen: str = DEFAULT_LISTEN, path: str = "/metrics", registry: CollectorRegistry | None = None) -> MetricsServer:
    """Start serving ``registry`` at ``http://<listen><path>`` in a background thread.

    Port 0 picks a free port (``server.port`` tells which).  Raises OSError if the address is taken."""
    if not path.startswith("/"):
        raise ValueError(f'metrics path must start with "/", got {path!r}')
    host, port = parse_listen(listen)
    if registry is None:
        from prometheus_client import REGISTRY

        registry = REGISTRY
    family = _family(host)

    class Server(_Server):
        address_family = family

    httpd = make_server(host, port, make_app(path, registry), server_class=Server, handler_class=_Handler)
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="isaacd-metrics-http",
                         daemon=True)
    t.start()
    srv = MetricsServer(httpd, t, host, path)
    if host in ("0.0.0.0", "::"):
        log.warning("metrics endpoint listens on every interface", listen=listen, path=path)
    else:
        log.info("metrics endpoint listening", url=srv.url)
    return srv
