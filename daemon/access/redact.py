"""What one user may not read of another's job (issue 32): the values of its `environment` (API keys, tokens), and
the backup's credentials, which are the supervisor's environment. Neither is in the status or the events as a field,
but a trainer's output is quoted there (an exit's tail, the boot's last line, argv), and a trainer may print its
environment; so every string of an answer is scrubbed of those values before it goes to a caller who is neither
the job's owner nor an admin. Pure, stdlib only (the control server runs it; clients import control.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

HIDDEN = "<hidden>"
# A value shorter than this is no secret and would wreck the text it is scrubbed from ("1", "true", "cuda").
MIN_SECRET_CHARS = 6
# the supervisor's own environment variables that hold credentials (the backup's S3/GCS keys: config/backup.py)
CREDENTIAL_NAME = re.compile(r"(KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|SESSION)", re.IGNORECASE)


def secret_values(values: Iterable[str]) -> set[str]:
    return {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS}


def credentials(environ: Mapping[str, str]) -> set[str]:
    """The values of the credential-like variables of an environment (AWS_SECRET_ACCESS_KEY, ...)."""
    return secret_values(v for k, v in environ.items() if CREDENTIAL_NAME.search(k))


def redact(value: Any, secrets: Iterable[str]) -> Any:
    """A copy of a JSON value with every occurrence of each secret in its strings (keys too) replaced by HIDDEN."""
    ordered = sorted(set(secrets), key=len, reverse=True)  # "abcdef1" before "abcdef": no half-hidden value
    if not ordered:
        return value
    pattern = re.compile("|".join(re.escape(s) for s in ordered))

    def scrub(v: Any) -> Any:
        if isinstance(v, str):
            return pattern.sub(HIDDEN, v)
        if isinstance(v, dict):
            return {scrub(k) if isinstance(k, str) else k: scrub(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [scrub(x) for x in v]
        return v

    return scrub(value)
