#!/usr/bin/env python3
"""tests/timings.txt from a suite's `pytest --durations=0` output: seconds per test file (setup, call and
teardown summed), which tests/conftest.py reads to hand the slowest work out first and to choose the fast tier.

    scripts/test.sh --durations=0 | tee /tmp/suite.log; scripts/test-timings.py /tmp/suite.log

Only the order of work and the fast tier follow these figures; no test asserts a speed."""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(?:setup|call|teardown)\s+(tests/[^:\s]+\.py)")
OUT = Path(__file__).resolve().parent.parent / "tests" / "timings.txt"


def per_file(text: str) -> dict[str, float]:
    seconds: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            seconds[Path(m.group(2)).name] += float(m.group(1))
    return dict(seconds)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        seconds = per_file(Path(argv[1]).read_text(errors="replace"))
    except OSError as exc:
        print(f"test-timings: cannot read {argv[1]}: {exc.strerror}", file=sys.stderr)
        return 1
    if not seconds:
        print(f"test-timings: {argv[1]} has no --durations=0 table; nothing written", file=sys.stderr)
        return 1
    rows = sorted(seconds.items(), key=lambda kv: (-kv[1], kv[0]))
    OUT.write_text("# seconds per test file (setup + call + teardown), from scripts/test-timings.py; see tests/conftest.py\n"
                   + "".join(f"{s:8.1f} {name}\n" for name, s in rows))
    print(f"test-timings: {len(rows)} files, {sum(seconds.values()):.0f} s in all -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
