"""A TOML basic string as `isaacd sweep best` writes one (trial_file.py), stdlib only: the control server also needs
it, to hide a value in that file as it is written there (control.py), without importing the sweep file's models."""

from __future__ import annotations

import re

# TOML basic strings: ", \ and the control characters (U+0000-U+001F, U+007F) must be escaped; the rest is UTF-8
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f]')


def toml_string(s: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped, everything else as it is."""
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _ESCAPES.get(m.group(0), f"\\u{ord(m.group(0)):04x}"), s) + '"'
