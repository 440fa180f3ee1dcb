"""What a non-editable install ships: every package of the source tree (an H200 run found isaacd.workflows missing)."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]


def test_every_package_directory_is_listed_in_pyproject():
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    roots = {name: REPO / path for name, path in tool["package-dir"].items()}
    found = set()
    for name, root in roots.items():
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found <= listed, f"missing from [tool.setuptools] packages: {sorted(found - listed)}"
