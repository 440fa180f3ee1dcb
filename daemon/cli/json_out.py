"""`isaacd status --json`'s text: one JSON document, each element of a top-level list (a job's row, a GPU, a sweep) on
a line of its own.

Why not `json.dumps(..., indent=2)`: with an indent, CPython's json takes its pure-Python encoder; at 1,000 jobs (a
1.2 MB status) that alone was ~50 ms of the command's 0.3 s budget (issue 39's scale goal), where this layout, made of
compact rows by the C encoder, takes ~14 ms. The document is the same JSON (a script's `json.loads`/`jq` read the
same values); a person reading it gets one job per line, which `grep` and `less -S` handle well.
"""

from __future__ import annotations

import json
from typing import Any


def _compact(value: Any) -> str:
    return json.dumps(value, default=str)


def one_element_per_line(doc: dict[str, Any]) -> str:
    """`doc` as JSON text: its keys one per line, a list value's elements one per line (compact), anything else
    compact on its key's line."""
    lines = ["{"]
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if isinstance(value, list) and value:
            rows = ",\n".join("    " + _compact(element) for element in value)
            lines.append(f"  {_compact(key)}: [\n{rows}\n  ]{comma}")
        else:
            lines.append(f"  {_compact(key)}: {_compact(value)}{comma}")
    lines.append("}")
    return "\n".join(lines)
