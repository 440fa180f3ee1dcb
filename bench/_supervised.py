"""Shared by bench/status_latency.py and bench/tick_cpu.py: a real `isaacd run` of ANY checkout, talked to
from outside with the standard library only (so the same bench runs "before" and "after" a redesign of
the daemon: nothing here imports isaacd).

- Checkout(repo): `<repo>/.venv/bin/isaacd` and the venv's python.
- ask(socket, {"cmd": "status"}): one control-socket request, the wire protocol itself (one JSON line
  each way), no client library, no retries.
- get_metrics(port): one GET /metrics over a fresh connection, body read to the end.
- cpu_ticks(pid[, tid]): utime+stime from /proc, in clock ticks (the main thread alone when tid is given).
- summary(xs): "p50 ... p99 ... max ... (n=...)" in milliseconds.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Checkout:
    def __init__(self, repo: str | Path | None):
        self.repo = Path(repo).resolve() if repo else HERE.parent
        self.venv = self.repo / ".venv"
        self.isaacd = self.venv / "bin" / "isaacd"
        self.python = self.venv / "bin" / "python"
        if not self.isaacd.exists():
            sys.exit(f"{self.isaacd} not found: run scripts/install.sh in {self.repo}, or pass --repo CHECKOUT")

    def describe(self) -> str:
        try:
            rev = subprocess.run(["git", "-C", str(self.repo), "log", "-1", "--format=%h %s"], capture_output=True,
                                 text=True).stdout.strip()
            dirty = subprocess.run(["git", "-C", str(self.repo), "status", "--porcelain", "--", "daemon"],
                                   capture_output=True, text=True).stdout.strip()
        except OSError:
            rev, dirty = "?", ""
        return f"{self.repo} @ {rev}" + (" (daemon/ modified)" if dirty else "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask(sock_path: Path | str, req: dict[str, Any], timeout: float = 60.0) -> Any:
    """One control request; returns the result or raises (RuntimeError for a refused or busy request)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(sock_path))
        s.sendall(json.dumps(req).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
    resp = json.loads(buf)
    if not resp.get("ok"):
        raise RuntimeError(resp.get("error") or "busy")
    return resp["result"]


def get_metrics(port: int, timeout: float = 60.0) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"/metrics -> HTTP {r.status}")
        return body
    finally:
        conn.close()


def wait_until(pred, timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as exc:  # noqa: BLE001 - still starting
            last = exc
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}" + (f" (last error: {last})" if last else ""))


def cpu_ticks(pid: int, tid: int | None = None) -> int:
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    stat = Path(path).read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14, 15 of proc(5))


def pct(xs: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


def summary(xs: list[float]) -> str:
    """xs in seconds -> milliseconds."""
    if not xs:
        return "no samples"
    return (f"p50 {statistics.median(xs) * 1000:8.1f} ms  p99 {pct(xs, 99) * 1000:8.1f} ms  "
            f"max {max(xs) * 1000:8.1f} ms  (n={len(xs)})")


class HostSupervisor:
    """`isaacd run --config CFG` on this host, in its own session, with a private XDG_RUNTIME_DIR."""

    def __init__(self, co: Checkout, cfg: Path, env: dict[str, str] | None = None):
        self.co, self.cfg = co, cfg
        self.log = cfg.parent / "supervisor.log"
        e = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        e["XDG_RUNTIME_DIR"] = str(cfg.parent)  # a registry of our own: other supervisors stay out
        e.update(env or {})
        self._fh = open(self.log, "ab")
        self.proc = subprocess.Popen([str(co.isaacd), "run", "--config", str(cfg)], stdout=self._fh,
                                     stderr=subprocess.STDOUT, env=e, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout: float = 90) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._fh.close()
