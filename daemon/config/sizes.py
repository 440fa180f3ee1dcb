"""Sizes as people write them in a config: `gpu_memory`, `[jobs.ray] memory`, the `[access]` gpu_memory quota.

Decimal and binary units mean what they say, as Kubernetes reads `G` and `Gi`: "80GB" is 80 x 10^9 bytes (what an
"80 GB" H100 is sold as; NVML reports 79.6 GiB for it), "80GiB" (or "80Gi") is 80 x 2^30 bytes. A bare letter ("16g")
is refused: Kubernetes reads `G` as 10^9, Docker and Podman read `g` as 2^30, and a GPU's memory is too tight a fit
to guess. A bare number is refused too: bytes are never what anyone means for GPU memory. Units are
case-insensitive ("12gib", "12GB").

`shm_size` ([jobs.container]) is Podman's `--shm-size` and keeps Podman's reading (`podman_bytes`: "8g" = 8 x 2^30)."""

from __future__ import annotations

import functools
import json
import re
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([a-z]*)$", re.IGNORECASE)
UNITS = {"b": 1,
         "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
         "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}
AMBIGUOUS = {"k", "m", "g", "t", "p"}
GiB = 2**30


@functools.lru_cache(maxsize=1024)  # a job's gpu_memory is read at every tick (issue 39: 1,000 jobs); a refusal is no hit
def size_bytes(text: str) -> int:
    """ "12GiB" -> 12 x 2^30, "80GB" -> 80 x 10^9, "1.5GiB", "512MiB", "12Gi"; ValueError saying how to write it."""
    m = SIZE_RE.fullmatch(text.strip())
    if not m:
        raise ValueError(f'"{text}" is not a size: write a number and a unit, such as "12GiB" (2^30 bytes each) '
                         f'or "12GB" (10^9)')
    number, unit = m.group(1), m.group(2).lower()
    if not unit:
        raise ValueError(f'"{text}" has no unit: write a size such as "{number}GiB" (2^30 bytes each) or '
                         f'"{number}GB" (10^9)')
    if unit in AMBIGUOUS:
        big = unit.upper()
        raise ValueError(f'"{text}" is ambiguous: write "{number}{big}iB" ({_power(unit, 2)} bytes each) or '
                         f'"{number}{big}B" ({_power(unit, 10)})')
    if unit not in UNITS:
        raise ValueError(f'"{text}": unknown unit "{m.group(2)}"; write one of KiB, MiB, GiB, TiB (powers of 2) or '
                         f'KB, MB, GB, TB (powers of 10), such as "12GiB"')
    try:
        return int(Decimal(number) * UNITS[unit])
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        raise ValueError(f'"{text}" is not a size, such as "12GiB"') from None


def _power(letter: str, base: int) -> str:
    n = " kmgtp".index(letter)
    return f"2^{10 * n}" if base == 2 else f"10^{3 * n}"


def gib(n: int | float) -> str:
    """Bytes as a person reads GPU memory: "186.3 GiB", "80 GiB" (the unit nvidia-smi and the queue use)."""
    return f"{round(n / GiB, 1):g} GiB"


def written(text: str) -> str:
    """A size as written and what it is: '"200GB" (186.3 GiB)'; '"80GiB"' needs no gloss."""
    n = size_bytes(text)
    m = SIZE_RE.fullmatch(text.strip())
    return f'"{text}"' if m and m.group(2).lower() in ("gib", "gi") else f'"{text}" ({gib(n)})'


def _no_bare_number(v: Any) -> Any:
    """A TOML number where a size goes (gpu_memory = 12): said as such, with the fix, rather than "a valid string"."""
    if isinstance(v, str):
        return v
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        shown = f"{v:g}" if isinstance(v, float) else str(v)
        raise ValueError(f'{shown} is a number without a unit; write a size such as "{shown}GiB" (2^30 bytes each) '
                         f'or "{shown}GB" (10^9)')
    shown = json.dumps(v) if isinstance(v, (bool, list, dict)) else repr(v)
    raise ValueError(f'{shown} is not a size; write one such as "12GiB" (2^30 bytes each) or "12GB" (10^9)')


def _a_size(text: str) -> str:
    size_bytes(text)
    return text


# a config key that holds a size: checked, kept as written (size_bytes reads it)
Size = Annotated[str, BeforeValidator(_no_bare_number), AfterValidator(_a_size)]

PODMAN_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?$", re.IGNORECASE)


def podman_bytes(text: str) -> int:
    """`shm_size` as Podman reads `--shm-size` (Docker's units): "8g", "512m", "1000000"; every unit binary."""
    m = PODMAN_RE.fullmatch(text.strip())
    if not m:
        raise ValueError(f'"{text}" is not a size: use bytes or a number with k, m, g or t, e.g. "8g"')
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " "))
