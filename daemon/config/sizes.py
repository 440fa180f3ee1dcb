"""Sizes as people write them in a config ("16g", "12GiB")."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

MEMORY_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?$", re.IGNORECASE)


def memory_bytes(text: str) -> int:
    """ "16g", "512m", "1.5GiB", "1000000" -> bytes (binary units)."""
    m = MEMORY_RE.fullmatch(text.strip())
    if not m:
        raise ValueError(f'"{text}" is not a size: use bytes or a number with k, m, g or t, e.g. "16g"')
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " "))


def _a_size(text: str) -> str:
    memory_bytes(text)
    return text


Size = Annotated[str, AfterValidator(_a_size)]  # a config key that holds a size: checked, kept as written
