"""`isaacd queue`, `isaacd submit FILE`, `isaacd cancel JOB` (issue 31): the client side of the host's queue."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Callable

from ..status.types import Status

Client = Callable[[dict[str, Any]], Any]


class SubmitFileError(Exception):
    """The job file cannot be read here: said in one line, exit 2."""


def cmd_queue(client: Client, args: argparse.Namespace) -> int:
    from .render_queue import format_queue

    raw = client({"cmd": "status"})
    if args.json:
        print(json.dumps([{"name": j.get("name"), "state": j.get("state"), **(j.get("queue") or {})}
                          for j in raw.get("jobs", []) if j.get("queue")], indent=2))
        return 0
    print(format_queue(Status.from_json(raw), time.time()))
    return 0


def cmd_submit(client: Client, args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SubmitFileError(f"isaacd submit: {path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise SubmitFileError(f"isaacd submit: {path}: not UTF-8 text") from None
    print(client({"cmd": "submit", "text": text, "source": str(path.resolve())}))
    return 0


def cmd_cancel(client: Client, args: argparse.Namespace) -> int:
    print(f"{args.job}: {client({'cmd': 'cancel', 'job': args.job})}")
    return 0
