"""A job's new best evaluated checkpoint, announced on the chat webhook of `[notify]` (issue 41; its config is
config/notify.py).

One JSON POST per new best: Slack's and Mattermost's `{"text": ...}`, or WeCom's `{"msgtype": "text", "text":
{"content": ...}}` (`NotifyConfig.body_format`). It is sent from one background thread (`Notifier`), in order, each
with a short timeout, so a slow or dead chat server never holds a tick back; a POST that fails is an event in the
job's journal (`notify_failed`, through the `report` the caller hands over), never retried (the next best is
announced anyway). `BestAnnouncer` is the supervisor's part: it sees each job's published row, announces a best that
changed, and writes the failures into the journals on the tick (app.py wires it). The URL's secret (a hook's path,
WeCom's `key=`) is never logged nor put in an event: only `redacted_url`'s scheme and host, and any text quoted from
an error has the secret parts blanked out.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

import structlog

from ..config.notify import NotifyConfig, redacted_url
from .types import EvalResult, EvalsStatus

log = structlog.get_logger("isaacd.notify")

Report = Callable[..., None]  # report(event, **fields): the job's journal, written on the tick (thread-safe)
MAX_WAITING = 64  # announcements queued behind a slow server; more are dropped, each with its event
WECOM_MAX_BYTES = 2000  # WeCom refuses a text over 2048 bytes


def _score(x: float, like: float | None = None) -> str:
    """487, 48.7, 4.87 (a spread with its mean's decimals, as `isaacd status` writes them: "487 ± 12")."""
    ref = abs(x if like is None else like)
    return f"{x:.0f}" if ref >= 100 else f"{x:.1f}" if ref >= 10 else f"{x:.2f}"


def best_text(job: str, host: str, best: EvalResult, previous: EvalResult | None) -> str:
    """What the chat reads: the job, the checkpoint, its score, the one it beat, where its video is."""
    success = f", success {best.success_rate:.0%}" if best.success_rate is not None else ""
    score = f"{_score(best.return_mean)} ± {_score(best.return_std, best.return_mean)}"
    lines = [f"isaacd on {host}: {job} has a new best checkpoint, {best.checkpoint_name} (iteration {best.iteration}): "
             f"return {score}{success} over {best.episodes} episodes"]
    if previous is not None:
        lines.append(f"previous best: {previous.checkpoint_name} {_score(previous.return_mean)}")
    lines.append(f"checkpoint: {best.checkpoint}")
    if best.video:
        lines.append(f"video: {best.video}" + (f" (GIF {best.gif})" if best.gif else ""))
    return "\n".join(lines)


def body(cfg: NotifyConfig, text: str) -> dict[str, Any]:
    if cfg.body_format == "wecom":
        cut = text.encode()[:WECOM_MAX_BYTES].decode("utf-8", "ignore")  # a UTF-8 character is never split
        return {"msgtype": "text", "text": {"content": cut}}
    return {"text": text}


def _secrets(url: str) -> list[str]:
    """The parts of the URL a message must not quote: the whole, its path and query, each query value and each path
    segment that looks like a key (a digit in it, or 16 characters or more: Slack's T0/B0/token, Mattermost's hook
    id; "hooks", "services" or "webhook" are left, so a reason stays readable)."""
    parts = urlsplit(url)
    segments = [unquote(s) for s in parts.path.split("/")]
    out = [url, parts.path, parts.query, parts.password or "", *(v for _, v in parse_qsl(parts.query)),
           *(s for s in segments if len(s) >= 16 or any(c.isdigit() for c in s))]
    return sorted({s for s in out if len(s) >= 4}, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    for s in _secrets(url):
        text = text.replace(s, "…")
    return text


def post(cfg: NotifyConfig, text: str) -> None:
    """One POST, raising OSError (urllib's errors are OSErrors) or ValueError with a reason that may quote the URL:
    the caller scrubs it."""
    data = json.dumps(body(cfg, text)).encode()
    req = urllib.request.Request(cfg.webhook, data=data, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": "isaacd"})
    with urllib.request.urlopen(req, timeout=cfg.timeout_seconds) as resp:  # noqa: S310 (http(s) only: config)
        answer = resp.read(4096)
    try:  # WeCom and DingTalk answer 200 with {"errcode": N, "errmsg": ...}: N != 0 is a refusal
        doc = json.loads(answer)
    except ValueError:
        return  # Slack's "ok", Mattermost's "ok"
    if isinstance(doc, dict) and doc.get("errcode") not in (None, 0):
        raise ValueError(f"refused: errcode {doc.get('errcode')}: {doc.get('errmsg')}")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return f"cannot reach it: {exc.reason}"
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return "no answer in time"
    return str(exc) or type(exc).__name__


class Notifier:
    """The supervisor's one webhook sender: announcements queued, sent in order by one daemon thread (started on
    the first), each POST bounded by `timeout_seconds`. `config()` is the `[notify]` in force (None: no section),
    read at each announcement, so a reload that adds, changes or removes the webhook applies to the next one.
    `close` lets the one being sent finish (bounded) and drops the rest."""

    def __init__(self, config: Callable[[], NotifyConfig | None], host: str | None = None) -> None:
        self._config = config
        self.host = host or socket.gethostname()
        self._q: queue.Queue[tuple[NotifyConfig, str, str, Report] | threading.Event | None] = queue.Queue(MAX_WAITING)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.sent = 0
        self.failed = 0

    def announce_best(self, job: str, best: EvalResult, previous: EvalResult | None, report: Report) -> bool:
        """Queue the new best's announcement and return at once; False when there is no [notify] webhook. A failure
        is `report("notify_failed", webhook=<scheme://host/…>, reason=...)`, from the sending thread."""
        cfg = self._config()
        if cfg is None:
            return False
        self._start()
        try:
            self._q.put_nowait((cfg, job, best_text(job, self.host, best, previous), report))
        except queue.Full:
            self.failed += 1
            report("notify_failed", webhook=redacted_url(cfg.webhook),
                   reason=f"{MAX_WAITING} announcements already wait for a slow webhook; this one is dropped")
        return True

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="notify", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            if isinstance(item, threading.Event):  # flush(): everything queued before it is sent
                item.set()
                continue
            cfg, job, text, report = item
            where = redacted_url(cfg.webhook)
            try:
                post(cfg, text)
            except Exception as exc:  # noqa: BLE001 - any failure of a chat server is an event, never a crash
                self.failed += 1
                reason = scrub(_reason(exc), cfg.webhook)
                log.warning("notify_failed", job=job, webhook=where, reason=reason)
                report("notify_failed", webhook=where, reason=reason)
            else:
                self.sent += 1
                log.info("notify_sent", job=job, webhook=where)

    def flush(self, wait: float) -> bool:
        """Wait up to `wait` seconds for what is queued now to be sent (or failed); False if it was not."""
        with self._lock:
            if self._thread is None:
                return True
        done = threading.Event()
        try:
            self._q.put(done, timeout=wait)
        except queue.Full:
            return False
        return done.wait(wait)

    def close(self, wait: float = 1.0) -> None:
        with self._lock:
            thread = self._thread
        if thread is None:
            return
        while True:  # what still waits is dropped: a shutdown is no time to talk to a chat server
            try:
                self._q.get_nowait()
            except queue.Empty:
                break
        self._q.put(None)
        thread.join(wait)


class _Row(Protocol):
    """A job's published status row (status/types.JobStatus), as far as the announcer reads it."""

    @property
    def name(self) -> str: ...

    @property
    def evals(self) -> EvalsStatus | None: ...


class _Running(Protocol):
    config: Any  # the config in force (config.schema.Config): its `notify`


MAX_NOTES = 1000  # failures waiting for the tick; a journal that stopped draining must not grow this without bound


class BestAnnouncer:
    """The supervisor's part of `[notify]`: an extension (its `start` is handed the supervisor's `Running`, whose
    config in force names the webhook; its `stop` ends the sending thread) and a job-status hook that sees each job's
    row at every publish. A job whose best evaluation changes from the one it saw before is announced (the first
    sight of a job after a start is not: its best was not new then). Failures come back from the sending thread and
    are written into the job's journal on the tick (`journal(job, "notify_failed", **fields)`), the journal's one
    writer."""

    def __init__(self, journal: Callable[..., Any], host: str | None = None) -> None:
        self._journal = journal
        self._running: _Running | None = None
        self.notifier = Notifier(self._config, host)
        self._best: dict[str, EvalResult | None] = {}
        self._failures: deque[tuple[str, str, dict[str, Any]]] = deque(maxlen=MAX_NOTES)  # (job, event, fields)

    def _config(self) -> NotifyConfig | None:
        return getattr(self._running.config, "notify", None) if self._running is not None else None

    def start(self, running: _Running) -> None:
        self._running = running

    def stop(self) -> None:
        self.notifier.close()

    def rows_changed(self) -> set[str]:
        """Called at every publish: the sending thread's failures written into their jobs' journals. Nothing of a row
        is this hook's: a row that did not change has no new best (none to announce)."""
        self._drain()
        return set()

    def _drain(self) -> None:
        while self._failures:  # deque's append and popleft are atomic: the sending thread appends
            job, event, fields = self._failures.popleft()
            try:
                self._journal(job, event, **fields)
            except Exception:  # noqa: BLE001 - a journal that cannot be written must not fail the publish
                log.exception("notify_event_failed", job=job)

    def job_status(self, row: _Row) -> _Row:
        """The hook: `row` unchanged; an announcement queued when its best is new."""
        self._drain()
        best = row.evals.best if row.evals is not None else None
        seen = row.name in self._best
        before = self._best[row.name] if seen else None
        if seen and before is best:
            return row  # as at the last publish (most rows: no evaluation, None again; 1,000 rows at every tick)
        self._best[row.name] = best
        if seen and best is not None and (before is None or before.iteration != best.iteration):
            self.notifier.announce_best(row.name, best, before, self._reporter(row.name))
        return row

    def _reporter(self, job: str) -> Report:
        def report(event: str, **fields: Any) -> None:
            self._failures.append((job, event, fields))
        return report
