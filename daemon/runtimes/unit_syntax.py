"""systemd's unit-file syntax: literal text in a value, and the words of an ExecStart=/Exec=/Environment= line.

Used by the container spec's Field table (how each Quadlet key's value is written) and by the unit renderers
in quadlet.py; `sd_split` is `sd_join`'s inverse, as systemd reads the line (tests and bench read units back).
"""

from __future__ import annotations

import re

_SAFE_WORD = re.compile(r"^[A-Za-z0-9_./:=,@+^-]+$")


def sd_escape(text: str) -> str:
    """Literal text inside a unit-file value: % starts a specifier, $ an environment variable."""
    return text.replace("%", "%%").replace("$", "$$")


def sd_quote(word: str) -> str:
    """One word of an ExecStart=/Exec=/Environment= line, systemd-quoted so it arrives verbatim."""
    if word and _SAFE_WORD.match(word):
        return sd_escape(word)
    out = []
    for ch in word:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ch == "\x7f":
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + sd_escape("".join(out)) + '"'


def sd_join(words: list[str]) -> str:
    return " ".join(sd_quote(w) for w in words)


def sd_split(cmd: str) -> list[str]:
    """The inverse of sd_join: split an ExecStart= value the way systemd does (quotes, C escapes)."""
    words, i, n = [], 0, len(cmd)
    esc = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "\r", "a": "\a", "b": "\b",
           "f": "\f", "v": "\v", "s": " "}
    while i < n:
        while i < n and cmd[i] in " \t":
            i += 1
        if i >= n:
            break
        w, quote = "", None
        while i < n and (quote or cmd[i] not in " \t"):
            c = cmd[i]
            if quote is None and c in "\"'":
                quote = c
            elif c == quote:
                quote = None
            elif c == "\\" and i + 1 < n:
                i += 1
                c = cmd[i]
                if c == "x":
                    w += chr(int(cmd[i + 1:i + 3], 16))
                    i += 2
                else:
                    w += esc.get(c, c)
            else:
                w += c
            i += 1
        words.append(w)
    return words
