"""The webhook of `[notify]` (issue 41, evals/notify.py, config/notify.py): a new best checkpoint POSTed as JSON to a
real HTTP server on a local socket (no mocks): the body Slack/Mattermost or WeCom read, sent from a background thread,
each failure an event that never names the URL's secret."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from isaacd.config.notify import NotifyConfig, redacted_url
from isaacd.config.schema import ConfigError, parse_config as _parse
from isaacd.evals.notify import BestAnnouncer, Notifier
from isaacd.evals.types import EvalResult, EvalsStatus

SECRET = "T0AAA/B0BBB/s3cr3tHookToken"


def parse_config(text: str):  # noqa: ANN201
    return _parse(text, "isaacd.toml", Path("/tmp"))


def result(it: int, mean: float, video: str | None = None) -> EvalResult:
    return EvalResult(iteration=it, checkpoint=f"/runs/cartpole/model_{it}.pt", episodes=100, return_mean=mean,
                      return_std=12.3, length_mean=299.0, length_std=1.5, success_rate=None, seed=42, num_envs=100,
                      device="cpu", duration_seconds=31.2, finished_at=0.0, video=video, gif=None)


class Chat:
    """A chat server on 127.0.0.1: records each POST; answers `status` with `answer`; holds each request until
    `go` is set."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.status, self.answer = 200, b"ok"
        self.go = threading.Event()
        self.go.set()
        self.arrived = threading.Event()
        chat = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                n = int(self.headers.get("Content-Length", 0))
                chat.posts.append({"path": self.path, "type": self.headers.get("Content-Type"),
                                   "body": json.loads(self.rfile.read(n))})
                chat.arrived.set()
                chat.go.wait(10)
                self.send_response(chat.status)
                self.end_headers()
                self.wfile.write(chat.answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.go.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def chat(monkeypatch: pytest.MonkeyPatch) -> Iterator[Chat]:
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)  # the POST goes to the local server, not a proxy
    c = Chat()
    yield c
    c.close()


class Journal:
    """The job's events as the notifier reports them (from its thread)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.got = threading.Event()

    def __call__(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))
        self.got.set()


def notifier(cfg: NotifyConfig, host: str | None = None) -> Notifier:
    return Notifier(lambda: cfg, host=host)


def sent(n: Notifier, count: int = 1) -> None:
    assert n.flush(10)  # what was queued is sent (or failed)
    n.close()
    assert n.sent + n.failed == count


def test_a_new_best_is_posted_as_slack_and_mattermost_read_it(chat: Chat):
    n = notifier(NotifyConfig(webhook=f"{chat.url}/hooks/{SECRET}"), host="gpu-7")
    journal = Journal()
    n.announce_best("cartpole", result(400, 487.1, video="/runs/cartpole/eval/videos/model_400.mp4"),
                    result(350, 450.2), journal)
    sent(n)
    assert n.sent == 1 and journal.events == []
    (post,) = chat.posts
    assert post["path"] == f"/hooks/{SECRET}" and post["type"] == "application/json"
    assert list(post["body"]) == ["text"]
    text = post["body"]["text"]
    assert text.splitlines()[0] == ("isaacd on gpu-7: cartpole has a new best checkpoint, model_400.pt "
                                    "(iteration 400): return 487 ± 12 over 100 episodes")
    assert "previous best: model_350.pt 450" in text and "checkpoint: /runs/cartpole/model_400.pt" in text
    assert "video: /runs/cartpole/eval/videos/model_400.mp4" in text


def test_wecom_gets_its_own_body_and_its_refusal_is_an_event(chat: Chat):
    chat.answer = json.dumps({"errcode": 93000, "errmsg": "invalid webhook url"}).encode()  # WeCom's 200 refusal
    n = notifier(NotifyConfig(webhook=f"{chat.url}/cgi-bin/webhook/send?key=abcdef-123456", format="wecom"))
    journal = Journal()
    n.announce_best("cartpole", result(400, 487.1), None, journal)
    sent(n)
    body = chat.posts[0]["body"]
    assert body["msgtype"] == "text" and "new best checkpoint, model_400.pt" in body["text"]["content"]
    assert journal.events == [("notify_failed", {"webhook": f"{chat.url}/…",
                                                  "reason": "refused: errcode 93000: invalid webhook url"})]


def test_auto_picks_the_body_by_the_host():
    assert NotifyConfig(webhook="https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k").body_format == "wecom"
    assert NotifyConfig(webhook="https://hooks.slack.com/services/T/B/X").body_format == "slack"
    assert NotifyConfig(webhook="https://chat.example.org/hooks/abc").body_format == "slack"  # Mattermost


def test_a_failure_is_an_event_that_never_names_the_secret(chat: Chat):
    chat.status, chat.answer = 404, b"no_service: " + SECRET.encode()
    n = notifier(NotifyConfig(webhook=f"{chat.url}/hooks/{SECRET}?token=querysecret99"))
    journal = Journal()
    with capture_logs() as logs:
        n.announce_best("cartpole", result(400, 487.1), None, journal)
        sent(n)
    assert journal.events == [("notify_failed", {"webhook": f"{chat.url}/…", "reason": "HTTP 404 Not Found"})]
    said = json.dumps([journal.events, logs], default=str)
    for secret in ("s3cr3tHookToken", "querysecret99", "B0BBB"):
        assert secret not in said


def test_a_server_that_never_answers_is_given_up_after_the_timeout(chat: Chat):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # the kernel completes the connection; nobody ever reads or answers
    try:
        port = silent.getsockname()[1]
        n = notifier(NotifyConfig(webhook=f"http://127.0.0.1:{port}/hooks/{SECRET}", timeout_seconds=0.3))
        journal = Journal()
        n.announce_best("cartpole", result(400, 487.1), None, journal)
        assert journal.got.wait(10)
        assert journal.events == [("notify_failed", {"webhook": f"http://127.0.0.1:{port}/…",
                                                      "reason": "no answer in time"})]
        n.close()
    finally:
        silent.close()


def test_nothing_listening_is_an_event_too():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # a port nothing listens on: refused
    n = notifier(NotifyConfig(webhook=f"http://127.0.0.1:{port}/hooks/{SECRET}"))
    journal = Journal()
    n.announce_best("cartpole", result(400, 487.1), None, journal)
    sent(n)
    ((event, fields),) = journal.events
    assert event == "notify_failed" and fields["reason"].startswith("cannot reach it: ") and SECRET not in str(fields)


def test_the_announcement_returns_while_the_server_still_holds_the_post(chat: Chat):
    chat.go.clear()  # the server holds every request until go
    n = notifier(NotifyConfig(webhook=f"{chat.url}/hooks/{SECRET}"))
    journal = Journal()
    n.announce_best("a", result(1, 1.0), None, journal)
    n.announce_best("a", result(2, 2.0), None, journal)  # returns too: queued behind the first
    assert chat.arrived.wait(10) and n.sent == 0  # the first is at the server, unanswered; we are not waiting on it
    chat.go.set()
    sent(n, 2)
    assert [p["body"]["text"].splitlines()[-1] for p in chat.posts] == \
        ["checkpoint: /runs/cartpole/model_1.pt", "checkpoint: /runs/cartpole/model_2.pt"]  # in order


def test_the_webhook_in_force_is_read_at_each_announcement(chat: Chat):
    current: list[NotifyConfig | None] = [None]  # no [notify]: nothing sent, nothing said
    n = Notifier(lambda: current[0])
    journal = Journal()
    assert n.announce_best("a", result(1, 1.0), None, journal) is False
    current[0] = NotifyConfig(webhook=f"{chat.url}/hooks/after-reload-{SECRET}")  # a reload added it
    assert n.announce_best("a", result(2, 2.0), None, journal) is True
    sent(n)
    assert [p["path"] for p in chat.posts] == [f"/hooks/after-reload-{SECRET}"] and journal.events == []


def test_the_config_section_and_its_refusals_never_quote_the_url():
    cfg = parse_config(f'[notify]\nwebhook = "https://hooks.slack.com/services/{SECRET}"\n')
    assert cfg.notify is not None and cfg.notify.timeout_seconds == 5.0 and cfg.notify.format == "auto"
    assert parse_config("").notify is None
    for bad in (f'webhook = "ftp://example.org/{SECRET}"', f'webhook = "{SECRET}"',
                'webhook = "https://x.org/h"\nformat = "teams"', 'webhook = "https://x.org/h"\ntimeout_seconds = 0'):
        with pytest.raises(ConfigError) as e:
            parse_config(f"[notify]\n{bad}\n")
        assert SECRET not in str(e.value) and "notify." in str(e.value)
    assert redacted_url(f"https://user:pw@hooks.slack.com:8443/services/{SECRET}?x=1") == \
        "https://hooks.slack.com:8443/…"


class Row:
    """A job's published status row, as the announcer reads it."""

    def __init__(self, name: str, best: EvalResult | None) -> None:
        self.name = name
        self.evals = EvalsStatus(every="1", best=best, last=best, where="cpu")


def test_the_supervisor_announces_a_best_that_changed_and_journals_failures_on_the_tick(chat: Chat):
    from types import SimpleNamespace

    journal: list[tuple[str, str, dict[str, Any]]] = []
    a = BestAnnouncer(lambda job, event, **fields: journal.append((job, event, fields)), host="gpu-7")
    running = SimpleNamespace(config=SimpleNamespace(notify=NotifyConfig(webhook=f"{chat.url}/hooks/{SECRET}")))
    a.start(running)
    try:
        a.job_status(Row("cartpole", result(300, 450.0)))  # first sight after a start: its best is not new
        a.job_status(Row("cartpole", result(300, 450.0)))
        assert a.notifier.flush(10) and chat.posts == []
        a.job_status(Row("cartpole", result(400, 487.1)))  # a new best
        a.job_status(Row("cartpole", result(400, 487.1)))  # the same: said once
        assert a.notifier.flush(10)
        assert [p["body"]["text"].splitlines()[:2] for p in chat.posts] == [[
            "isaacd on gpu-7: cartpole has a new best checkpoint, model_400.pt (iteration 400): return 487 ± 12 over "
            "100 episodes", "previous best: model_300.pt 450"]]
        chat.status = 500
        a.job_status(Row("cartpole", result(500, 495.0)))
        assert a.notifier.flush(10) and journal == []  # the failure waits for the tick: the journal's one writer
        a.job_status(Row("cartpole", result(500, 495.0)))
        assert journal == [("cartpole", "notify_failed",
                            {"webhook": f"{chat.url}/…", "reason": "HTTP 500 Internal Server Error"})]
        running.config = SimpleNamespace(notify=None)  # a reload removed [notify]: nothing more is sent
        a.job_status(Row("cartpole", result(600, 499.0)))
        assert a.notifier.flush(10) and len(chat.posts) == 2
    finally:
        a.stop()


def test_a_failure_is_journalled_at_the_next_publish_when_no_row_changes(chat: Chat):
    # status/publishing.py asks each hook what changed at every publish, and skips unchanged rows: the failure of the
    # last announcement is written then, not when some job's row next changes
    from types import SimpleNamespace

    journal: list[tuple[str, str, dict[str, Any]]] = []
    a = BestAnnouncer(lambda job, event, **fields: journal.append((job, event, fields)), host="gpu-7")
    a.start(SimpleNamespace(config=SimpleNamespace(notify=NotifyConfig(webhook=f"{chat.url}/hooks/{SECRET}"))))
    try:
        a.job_status(Row("cartpole", result(300, 450.0)))
        chat.status = 500
        a.job_status(Row("cartpole", result(400, 487.1)))  # a new best, refused by the server
        assert a.notifier.flush(10) and journal == []
        assert a.rows_changed() == set()  # nothing of a row is this hook's
        assert [(job, event) for job, event, _ in journal] == [("cartpole", "notify_failed")]
    finally:
        a.stop()
