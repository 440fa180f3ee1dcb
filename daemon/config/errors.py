"""pydantic's validation errors as a person fixes them: one line per key, naming the key, the value given and an
example of what to write (`gpus = "1"` -> `"1" is a string; write a whole number such as gpus = 1`).

pydantic reports a key of several accepted types (`gpus`: a list, "all" or a count) once per type, with the type's
name spliced into the error's location; those lines are one mistake and read as one here. A value of an accepted type
that breaks a rule (`gpus = 0`) keeps the rule's message; a list whose items are wrong is reported at the item.
schema.py wraps the lines into its ConfigIssue; this module knows no config model but the one it is handed."""

from __future__ import annotations

import datetime
import difflib
import json
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

# an error that says the value's type is not the one this (member) type takes, rather than which rule it broke
WRONG_TYPE = {"int_type", "int_parsing", "int_from_float", "float_type", "float_parsing", "string_type", "bool_type",
              "bool_parsing", "list_type", "dict_type", "model_type", "model_attributes_type", "tuple_type",
              "set_type", "is_instance_of", "literal_error", "none_required"}
WANTS = {"int": "a whole number", "float": "a number", "string": "a string", "bool": "true or false",
         "list": "a list", "dict": "a table", "model": "a table", "tuple": "a list", "set": "a list"}


def _loc_tags(loc: tuple[Any, ...], raw: Any, missing: bool) -> tuple[tuple[Any, ...], list[bool]]:
    """(the location as keys of the file, for each item of `loc` whether it is a key). pydantic splices the name of a
    union's member ("list[union[int,str]]", "constrained-int", "function-after[...]") into the location: an item that
    is no key of the table it would index is such a name."""
    node, real, is_key = raw, [], []
    for n, item in enumerate(loc):
        key = (isinstance(item, int) and isinstance(node, list) and item < len(node)) or \
            (isinstance(item, str) and isinstance(node, dict) and item in node) or (missing and n == len(loc) - 1)
        is_key.append(key)
        if key:
            real.append(item)
            node = node[item] if not (missing and n == len(loc) - 1) else None
    return tuple(real), is_key


def key_path(loc: tuple[Any, ...], raw: dict[str, Any]) -> str:
    """ "jobs[0] (name = "a").restart.max_restarts": a key as the file spells it, a job named by its name."""
    parts: list[str] = []
    node: Any = raw
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            if isinstance(node, list) and item < len(node) and isinstance(node[item], dict) and "name" in node[item]:
                label = f'[{item}] (name = "{node[item]["name"]}")'
            parts.append(label)
            node = node[item] if isinstance(node, list) and item < len(node) else None
        else:
            parts.append(("." if parts else "") + str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return "".join(parts)


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    """The model (or the annotation) a location of keys leads to, or None where it leaves the models."""
    current: Any = model
    for item in loc:
        if isinstance(item, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(item))
        if field is None:
            return None
        current = _inner_model(field.annotation)
    return current


def _inner_model(ann: Any) -> Any:
    """A field's model: `RayConfig | None` and `list[JobConfig]` lead to the model."""
    for arg in get_args(ann) or ():
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return ann


def _field(model: type[BaseModel], loc: tuple[Any, ...]) -> FieldInfo | None:
    keys = [k for k in loc if isinstance(k, str)]
    if not keys:
        return None
    parent = _model_at(model, loc[:max(i for i, k in enumerate(loc) if isinstance(k, str))])
    if isinstance(parent, type) and issubclass(parent, BaseModel):
        return parent.model_fields.get(keys[-1])
    return None


def allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """The field names valid at the parent of `loc`, for 'unknown key' messages."""
    current = _model_at(model, loc[:-1])
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(current.model_fields)
    return None


def did_you_mean(key: str, allowed: list[str]) -> str:
    """"; did you mean `max_iterations`?" for a typo: the fix, before the list of every allowed key."""
    # a key that is the last word of one allowed key names that thing ("socket" is `control_socket`; `socket_mode`
    # is its mode), before difflib's ratio, which favours the shorter `socket_mode`
    words = [k for k in allowed if k.rsplit("_", 1)[-1] == key.lower()]
    close = words if len(words) == 1 else difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


def toml(v: Any, limit: int = 60) -> str:
    """A value as it reads in the file: "1", true, [0, 1.5]."""
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    try:
        text = json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _is(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "a whole number"
    if isinstance(v, float):
        return "a decimal number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, (datetime.date, datetime.time)):
        return "a date or time"
    return f"a {type(v).__name__}"


def _atoms(e: dict[str, Any]) -> list[str]:
    """What one member type takes, in words: ["a whole number"], ["true", "false"], ['"auto"', '"off"']."""
    kind = e["type"].split("_", 1)[0]
    if e["type"] == "literal_error":
        return [toml(a) for a in _expected(e)]
    if kind == "bool":
        return ["true", "false"]
    if e["type"] == "is_instance_of" and (e.get("ctx") or {}).get("class") in ("Path", "PosixPath"):
        return ["a path (a string)"]
    return [WANTS.get(kind, e["msg"].removeprefix("Input should be "))]


def _expected(e: dict[str, Any]) -> list[Any]:
    """A literal's values from pydantic's text (ctx "expected": "'auto', 'booted' or 'off'")."""
    text = str((e.get("ctx") or {}).get("expected", ""))
    out: list[Any] = []
    for part in text.replace(" or ", ", ").split(", "):
        part = part.strip()
        if len(part) >= 2 and part[0] == part[-1] == "'":
            out.append(part[1:-1])
        elif part:
            try:
                out.append(json.loads(part.lower()))
            except ValueError:
                out.append(part)
    return out


def _either(words: list[str]) -> str:
    return " or ".join(words) if len(words) < 3 else ", ".join(words[:-1]) + " or " + words[-1]


def _converted(kind: str, value: Any) -> Any:
    """The given value read as `kind` where it reads so (gpus = "1" -> 1, "true" -> true), else None."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    try:
        if kind == "int":
            n = float(value) if isinstance(value, str) else value
            return int(n) if float(n) == int(n) and (not isinstance(value, str) or value.strip().lstrip("-").isdigit()) \
                else None
        if kind == "float" and isinstance(value, str):
            return float(value)
        if kind == "bool" and isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    except (ValueError, OverflowError):  # "nan", "INF": no whole number reads so
        return None
    return None


def _example(kinds: list[str], literals: list[Any], value: Any, default: Any) -> Any:
    """A value the key takes: its default where that is of a taken type (not empty), else a plain one."""
    for kind in kinds:
        if kind == "int" and isinstance(default, int) and not isinstance(default, bool):
            return default
        if kind == "float" and isinstance(default, (int, float)) and not isinstance(default, bool):
            return float(default)
        if kind in ("string", "bool") and isinstance(default, str if kind == "string" else bool):
            return default
        if kind == "list" and isinstance(default, list) and default:
            return default
    if isinstance(value, str) and (close := difflib.get_close_matches(value, [str(x) for x in literals], n=1)):
        return close[0]  # gpus = "al" -> "all"
    if kinds == ["list"] and isinstance(value, str):
        return [value]  # extra_args = "x" -> ["x"]
    if "is" in kinds and isinstance(default, Path):
        return str(default)
    if kinds == ["string"] and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # environment = {A = 1} -> A = "1"
    if "int" in kinds:
        return 1
    if literals:
        return literals[0]
    return {"float": 1.0, "bool": True}.get(next((k for k in kinds if k in ("float", "bool")), ""))


def wrong_type_line(errors: list[dict[str, Any]], value: Any, loc: tuple[Any, ...], model: type[BaseModel]) -> str:
    """One line for a value no accepted type takes: what it is, what the key takes and an example."""
    kinds = [e["type"].split("_", 1)[0] for e in errors]
    literals = [x for e in errors if e["type"] == "literal_error" for x in _expected(e)]
    field = _field(model, loc)
    leaf = next((k for k in reversed(loc) if isinstance(k, str)), "")
    reading = next(((k, x) for k in kinds if (x := _converted(k, value)) is not None), None)
    if reading is not None:  # gpus = "1": a whole number in quotes; that reading is the one worth saying
        said, example = WANTS[reading[0]], reading[1]
    else:
        said = _either(list(dict.fromkeys(a for e in errors for a in _atoms(e))))
        example = _example(kinds, literals, value, field.default if field is not None else None)
    if "model" in kinds:
        section = ".".join(str(k) for k in loc if isinstance(k, str))
        tail = f": a [{section}] section, its keys on the lines below it"
    elif example is None:
        tail = ""
    elif isinstance(loc[-1], int):  # an item of a list: the key's example would be the whole list
        tail = f" such as {toml(example)}"
    else:
        tail = f" such as {leaf} = {toml(example)}"
    return f"{toml(value)} is {_is(value)}; write {said}{tail}"


def _value_at(raw: Any, loc: tuple[Any, ...]) -> Any:
    for item in loc:
        raw = raw[item] if isinstance(raw, (list, dict)) else None
    return raw


def lines(err: ValidationError, raw: dict[str, Any], model: type[BaseModel]) -> list[tuple[str, str]]:
    """(key path, message) per mistake, in pydantic's order."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    tags: set[tuple[Any, ...]] = set()  # the keys whose errors came through a union's members
    for e in err.errors():
        real, is_key = _loc_tags(tuple(e["loc"]), raw, e["type"] == "missing")
        groups.setdefault(real, []).append(e)
        if not all(is_key):
            tags.add(real)
    out: list[tuple[str, str]] = []
    for real, errors in groups.items():
        key = key_path(real, raw)
        tagged = real in tags
        typed = [e for e in errors if e["type"] in WRONG_TYPE]
        misspelt = typed and typed[0]["type"] == "literal_error" and isinstance(typed[0].get("input"), str)
        if typed and len(typed) == len(errors) and (tagged or not misspelt):  # (a misspelt word: pydantic's list)
            if any(len(r) > len(real) and r[:len(real)] == real for r in groups):
                continue  # the value's own type was right (a list); its items are wrong, and said at the item
            out.append((key, wrong_type_line(typed, _value_at(raw, real), real, model)))
            continue
        for e in (errors if not tagged else [e for e in errors if e["type"] not in WRONG_TYPE]):
            if e["type"] == "extra_forbidden":
                allowed = allowed_keys(model, real)
                msg = "unknown key" + did_you_mean(str(real[-1]), allowed or []) + \
                    (f"; allowed keys here: {', '.join(allowed)}" if allowed else "")
            else:
                msg = e["msg"].removeprefix("Value error, ")
            out.append((key, msg))
    return out
