"""docs/configuration.md holds every key of the config model once, with its default (issue 30).

The keys come from the pydantic models, walked from `Config` down (lists and optional tables unwrapped, aliases such
as the watchdogs' `for` used as TOML spells them), never from a list kept here: a key added to the model without a
row in the reference fails this test, and so does a row for a key the model no longer has."""

from __future__ import annotations

import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from isaacd.config.schema import Config

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
HEADING = re.compile(r"^#+ .*?`\[\[?([a-z_.*]+)\]\]?`", re.M)
ROW = re.compile(r"^\| `([A-Za-z_]+)` \|(.*)$")


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: `X`, `X | None`, `list[X]`; None for a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list):
        for arg in typing.get_args(annotation):
            if (m := _model_in(arg)) is not None:
                return m
    return None


def _shared_base(model: type[BaseModel]) -> type[BaseModel] | None:
    """The base class whose fields several sibling tables share (the watchdogs' common keys), if any."""
    for base in model.__mro__[1:]:
        if issubclass(base, BaseModel) and base.model_fields and base is not BaseModel:
            return base
    return None


def model_keys() -> dict[str, dict[str, Any]]:
    """{table: {key: field}}: every key of the config model, in the table where the reference documents it.
    A field a model inherits from a base with fields is documented once for all siblings, at `<parent>.*`."""
    tables: dict[str, dict[str, Any]] = {}

    def walk(model: type[BaseModel], table: str) -> None:
        base = _shared_base(model)
        for name, field in model.model_fields.items():
            key = field.alias or name
            sub = _model_in(field.annotation)
            if sub is not None:
                walk(sub, f"{table}.{key}" if table else key)
                continue
            where = table.rsplit(".", 1)[0] + ".*" if base is not None and name in base.model_fields else table
            tables.setdefault(where, {})[key] = (base.model_fields[name] if where != table else field)

    walk(Config, "")
    return tables


def doc_sections() -> dict[str, str]:
    text = DOC.read_text()
    marks = list(HEADING.finditer(text))
    return {m.group(1): text[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(text)]
            for i, m in enumerate(marks)}


def doc_rows(section: str) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        if m := ROW.match(line):
            assert m.group(1) not in rows, f"docs/configuration.md documents `{m.group(1)}` twice in one table"
            rows[m.group(1)] = [c.strip() for c in re.split(r"(?<!\\)\|", m.group(2))[:-1]]
    return rows


def toml_value(cell: str) -> Any:
    m = re.fullmatch(r"`(.*)`", cell)
    assert m, f"default cell {cell!r} is not one `TOML literal`, unset or required"
    return tomllib.loads(f"v = {m.group(1)}")["v"]


def plain(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


def test_every_config_key_is_documented_once_and_every_documented_key_exists():
    keys, sections = model_keys(), doc_sections()
    missing = [f"[{t}] {k}" for t, ks in keys.items() for k in ks if k not in doc_rows(sections.get(t, ""))]
    assert not missing, f"docs/configuration.md lacks these config keys (add a row each): {missing}"
    stale = [f"[{t}] {k}" for t, s in sections.items() for k in doc_rows(s) if k not in keys.get(t, {})]
    assert not stale, f"docs/configuration.md documents keys the config model does not have: {stale}"
    assert not set(sections) - set(keys), f"sections for no table of the model: {set(sections) - set(keys)}"


def test_documented_defaults_are_the_models():
    wrong = []
    for table, section in doc_sections().items():
        rows = doc_rows(section)
        for key, field in model_keys().get(table, {}).items():
            cells = rows.get(key)
            if cells is None:
                continue  # the test above names it
            assert len(cells) == 3, f"[{table}] {key}: a row is | key | type | default | meaning |"
            cell = cells[1]
            if field.is_required():
                ok = cell == "required"
            elif field.default is None:
                ok = cell.startswith("unset")
            else:
                ok = toml_value(cell) == plain(field.default)
            if not ok:
                wrong.append(f"[{table}] {key}: doc {cell}, model {field.default!r}")
    assert not wrong, f"docs/configuration.md defaults that differ from the model: {wrong}"


def test_a_watchdogs_own_defaults_of_the_common_keys_are_named_in_its_section():
    """`for` is 300 for duty_cycle but 0 in the common table: each watchdog's section says `for = 300.0`."""
    sections = doc_sections()

    def walk(model: type[BaseModel], table: str) -> list[str]:
        wrong = []
        base = _shared_base(model)
        for name, field in model.model_fields.items():
            sub = _model_in(field.annotation)
            if sub is not None:
                wrong += walk(sub, f"{table}.{field.alias or name}" if table else name)
            elif base is not None and name in base.model_fields and field.default != base.model_fields[name].default:
                key = field.alias or name
                said = re.findall(rf"`{key} = ([^`]+)`", sections.get(table, ""))
                if [tomllib.loads(f"v = {s}")["v"] for s in said] != [field.default]:
                    wrong.append(f"[{table}] `{key} = ...` should say {field.default!r} once (says {said})")
        return wrong

    wrong = walk(Config, "")
    assert not wrong, f"docs/configuration.md: {wrong}"


def test_the_walk_sees_nested_tables_and_aliases():
    """The test's own reach: a walk that stopped at the top would pass on an empty document."""
    keys = model_keys()
    assert {"jobs", "jobs.restart", "jobs.backup", "jobs.watchdogs.*", "jobs.watchdogs.divergence", "ray"} <= set(keys)
    assert "for" in keys["jobs.watchdogs.*"] and "hold" not in keys["jobs.watchdogs.*"]
    assert "for" not in keys["jobs.watchdogs.duty_cycle"]
