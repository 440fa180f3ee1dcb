"""The rules of docs/architecture.md that can be checked mechanically, read off the source (no process runs).

Each check names the file and line that breaks it, and each has a synthetic breach it must catch, so a check
that silently stopped looking fails too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (ROOT / "daemon", ROOT / "trainer")
MAX_CLASS_LINES = 350  # issue 30: a class past this does more than one job


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in pkg.rglob("*.py"))


def long_classes(tree: ast.AST, path: str, limit: int = MAX_CLASS_LINES) -> list[str]:
    return [f"{path}:{n.lineno} class {n.name} is {n.end_lineno - n.lineno + 1} lines (at most {limit})"
            for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.end_lineno is not None
            and n.end_lineno - n.lineno + 1 > limit]


def test_no_class_in_daemon_or_trainer_is_over_350_lines() -> None:
    found = [msg for p in _sources() for msg in long_classes(ast.parse(p.read_text()), str(p.relative_to(ROOT)))]
    assert not found, "\n".join(found)


def test_the_class_size_check_catches_a_long_class() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    assert long_classes(ast.parse(f"class Big:\n{body}\n"), "synthetic.py") == \
        [f"synthetic.py:1 class Big is {MAX_CLASS_LINES + 1} lines (at most {MAX_CLASS_LINES})"]
