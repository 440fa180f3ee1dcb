"""A table as the status views print it: columns left-aligned to their widest cell, two spaces apart, no trailing
blanks."""

from __future__ import annotations

from collections.abc import Sequence


def aligned(rows: Sequence[Sequence[object]]) -> list[str]:
    """One line per row (the header is the first)."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells if i < len(r)) for i in range(max((len(r) for r in cells), default=0))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
