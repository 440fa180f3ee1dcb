"""`[notify]`: where the supervisor announces what a person wants to hear of at once (issue 41: a job's new best
evaluated checkpoint), as a JSON POST to a chat webhook. The sending is evals/notify.py's.

Slack and Mattermost take `{"text": ...}`; WeCom (and DingTalk's robots) take `{"msgtype": "text", "text": {"content":
...}}`. No one body is both (`text` is a string in one, an object in the other), so `format` picks it, and "auto"
reads it from the URL (qyapi.weixin.qq.com: WeCom; anything else: Slack's, which Mattermost accepts too).

The URL holds its secret (a Slack or Mattermost hook's path, WeCom's `key=`): isaacd never logs it or puts it in an
event; only its scheme and host (`redacted_url`)."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

WECOM_HOSTS = ("qyapi.weixin.qq.com",)


class NotifyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    webhook: str  # https://hooks.slack.com/services/..., https://mattermost.example/hooks/..., WeCom's ...send?key=...
    # the body: "slack" {"text": ...} (Slack, Mattermost, Rocket.Chat); "wecom" {"msgtype": "text", "text":
    # {"content": ...}} (WeCom, DingTalk); "auto": "wecom" for WeCom's host, else "slack"
    format: Literal["auto", "slack", "wecom"] = "auto"
    # a POST that has no answer in this long is given up (an event says so): it is sent from a thread of its own, so
    # a slow chat server never holds the supervisor back
    timeout_seconds: Annotated[float, Field(gt=0, le=60)] = 5.0

    @field_validator("webhook")
    @classmethod
    def _url(cls, v: str) -> str:
        parts = urlsplit(v.strip())
        if parts.scheme not in ("https", "http") or not parts.hostname:
            # the value is not quoted back: it may hold the hook's secret
            raise ValueError('must be an http(s) URL, e.g. webhook = "https://hooks.slack.com/services/T0/B0/XXXX"')
        return v.strip()

    @property
    def body_format(self) -> Literal["slack", "wecom"]:
        if self.format != "auto":
            return self.format
        host = urlsplit(self.webhook).hostname or ""
        return "wecom" if host in WECOM_HOSTS else "slack"


def redacted_url(url: str) -> str:
    """The webhook as logs and events may name it: its scheme, host and port, never its path, query or user, where
    chat services keep the hook's secret ("https://hooks.slack.com/…")."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    rest = "/…" if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{parts.hostname or '?'}{port}{rest}"
