"""Sizes as people write them in a config ("16g", "12GiB")."""

from __future__ import annotations

import re

MEMORY_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?$", re.IGNORECASE)


def memory_bytes(text: str) -> int:
    """ "16g", "512m", "1.5GiB", "1000000" -> bytes (binary units)."""
    m = MEMORY_RE.fullmatch(text.strip())
    if not m:
        raise ValueError(f'"{text}" is not a size: use bytes or a number with k, m, g or t, e.g. "16g"')
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " "))
