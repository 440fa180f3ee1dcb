"""No import cycles between the modules of `isaacd` (daemon/) and `isaacd_trainer` (trainer/).

Every import counts, wherever it is written: at module level, under `if TYPE_CHECKING:`, inside a function or a
`try:`. A cycle hidden behind a type-only or a function-local import is still two modules that cannot be read,
tested or replaced one without the other; the cure is moving what both need into a third module, or handing the
dependency in at construction behind a narrow Protocol.

The graph is built from the source with `ast` (nothing is imported): a node per module, a package's `__init__`
being the package's module. `from pkg import name` is an edge to `pkg.name` when that is a module, else to `pkg`;
relative imports are resolved against the importing module's package. The implicit import of a parent package
(importing `isaacd.gpu.assign` runs `isaacd/gpu/__init__.py` first) is not an edge: a package that re-exports
its submodules would otherwise form a cycle with each of them by construction.

The same holds one level up, between folders (issue 30): a subpackage (`attempt/`, `cli/`, `runtimes/`...) is one
node, and so is each module at a package's root (`runner.py`, `supervisor.py`); no two of them may import each
other, directly or round a loop. A folder is a room a newcomer reads as a whole, and two rooms that need each
other are one room with a wall drawn through it.

    python tests/test_import_graph.py      # the cycles, folder loops, and every function-local import, listed
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"isaacd": ROOT / "daemon", "isaacd_trainer": ROOT / "trainer"}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module of ours
    where: str  # path:line
    scope: str  # "module", "TYPE_CHECKING" or "function"
    text: str  # the statement as written


def modules() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of both packages."""
    found: dict[str, Path] = {}
    for package, directory in PACKAGES.items():
        for path in sorted(directory.rglob("*.py")):
            parts = [package, *path.relative_to(directory).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(node: ast.AST, scope: str = "module") -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement under `node`, with the scope it runs in."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, scope
            continue
        inner = scope
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner = "function"
        elif isinstance(child, ast.If) and _is_type_checking(child.test) and scope == "module":
            yield from _statements(ast.Module(body=child.body, type_ignores=[]), "TYPE_CHECKING")
            yield from _statements(ast.Module(body=child.orelse, type_ignores=[]), scope)
            continue
        yield from _statements(child, inner)


def _ours(name: str, known: dict[str, Path]) -> str | None:
    """The deepest module of ours that `name` is or lies in (`isaacd.gpu.assign.x` -> `isaacd.gpu.assign`)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def imports(known: dict[str, Path] | None = None, root: Path = ROOT) -> list[Import]:
    known = known if known is not None else modules()
    found: list[Import] = []
    for module, path in known.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        where_prefix = str(path.relative_to(root))
        for stmt, scope in _statements(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(stmt, ast.Import):
                targets = [alias.name for alias in stmt.names]
            else:
                if stmt.level:
                    base_parts = package.split(".")
                    if stmt.level > 1:
                        base_parts = base_parts[: len(base_parts) - (stmt.level - 1)]
                    base = ".".join(base_parts + ([stmt.module] if stmt.module else []))
                else:
                    base = stmt.module or ""
                # `from pkg import module` is an import of pkg.module; `from pkg import name`, of pkg
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                           for alias in stmt.names]
            for target in dict.fromkeys(targets):
                resolved = _ours(target, known)
                if resolved is not None:
                    found.append(Import(module, resolved, f"{where_prefix}:{stmt.lineno}", scope,
                                        ast.unparse(stmt)))
    return found


def strongly_connected(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph is small, but recursion depth is not ours to spend)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def cycles(found: list[Import] | None = None) -> list[tuple[list[str], list[Import]]]:
    """Each cycle: its modules and the imports that tie them together."""
    found = found if found is not None else imports()
    edges: dict[str, set[str]] = {}
    for imp in found:
        edges.setdefault(imp.source, set()).add(imp.target)
    nodes = sorted({imp.source for imp in found} | {imp.target for imp in found})
    out = []
    for component in strongly_connected(nodes, edges):
        members = set(component)
        ties = [imp for imp in found if imp.source in members and imp.target in members]
        # a component of one is a cycle only when the module imports itself
        if len(component) > 1 or any(imp.source == imp.target for imp in ties):
            out.append((component, ties))
    return sorted(out)


def folder(module: str, known: dict[str, Path]) -> str:
    """The folder a module lives in: its top subpackage (`isaacd.attempt.spare` -> `isaacd.attempt`); a module at
    a package's root is a node of its own (`isaacd.runner`), and so is the package's `__init__` (`isaacd`)."""
    parts = module.split(".")
    if len(parts) <= 2 and known[module].name != "__init__.py":
        return module
    return ".".join(parts[:2])


# Folder loops that a move cannot break (each needs code restructured): listed so they stay visible, not silently
# accepted. Empty: the rooms of issue 30 left none.
KNOWN_FOLDER_LOOPS: list[list[str]] = []


def folder_cycles(found: list[Import] | None = None, known: dict[str, Path] | None = None
                  ) -> list[tuple[list[str], list[Import]]]:
    """Each loop between folders: its folders and the imports that tie them together."""
    known = known if known is not None else modules()
    found = found if found is not None else imports(known)
    edges: dict[str, set[str]] = {}
    crossing = []
    for imp in found:
        a, b = folder(imp.source, known), folder(imp.target, known)
        if a != b:
            edges.setdefault(a, set()).add(b)
            crossing.append((a, b, imp))
    nodes = sorted(set(edges) | {b for targets in edges.values() for b in targets})
    out = []
    for component in strongly_connected(nodes, edges):
        if len(component) > 1:
            members = set(component)
            out.append((component, [imp for a, b, imp in crossing if a in members and b in members]))
    return sorted(out)


def describe(found_cycles: list[tuple[list[str], list[Import]]]) -> str:
    lines = []
    for component, ties in found_cycles:
        lines.append(f"cycle of {len(component)}: {', '.join(component)}")
        lines += [f"    {imp.source} -> {imp.target}  ({imp.where}, {imp.scope}: {imp.text})" for imp in ties]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------- tests
def test_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The parser is what the verdict rests on: a TYPE_CHECKING import, a function-local one, a relative
    `from . import module` and `from ..pkg import name` must each be an edge."""
    pkg = tmp_path / "p"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .leaf import X\n")
    (pkg / "sub" / "leaf.py").write_text("X = 1\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("from .sub import X\nimport p.a\n")
    (pkg / "d.py").write_text("from .sub.leaf import X\nfrom . import sub\n")
    known = {"p": pkg / "__init__.py", "p.sub": pkg / "sub" / "__init__.py", "p.sub.leaf": pkg / "sub" / "leaf.py",
             "p.a": pkg / "a.py", "p.b": pkg / "b.py", "p.c": pkg / "c.py", "p.d": pkg / "d.py"}
    found = imports(known, root=tmp_path)
    edges = {(imp.source, imp.target, imp.scope) for imp in found}
    assert edges == {("p.sub", "p.sub.leaf", "module"), ("p.a", "p.b", "TYPE_CHECKING"),
                     ("p.b", "p.c", "function"), ("p.c", "p.sub", "module"), ("p.c", "p.a", "module"),
                     ("p.d", "p.sub.leaf", "module"), ("p.d", "p.sub", "module")}
    assert [component for component, _ in cycles(found)] == [["p.a", "p.b", "p.c"]]


def test_folder_loops_are_seen(tmp_path: Path) -> None:
    """Two folders that import each other through different modules are a loop, though no module cycle is."""
    pkg = tmp_path / "p"
    for sub in ("x", "y"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "x" / "one.py").write_text("from ..y import two\n")
    (pkg / "x" / "three.py").write_text("X = 3\n")
    (pkg / "y" / "two.py").write_text("Y = 2\n")
    (pkg / "y" / "four.py").write_text("from ..x.three import X\nfrom .. import root\n")
    (pkg / "root.py").write_text("from .x import three\n")
    known = {"p": pkg / "__init__.py", "p.x": pkg / "x" / "__init__.py", "p.y": pkg / "y" / "__init__.py",
             "p.x.one": pkg / "x" / "one.py", "p.x.three": pkg / "x" / "three.py", "p.y.two": pkg / "y" / "two.py",
             "p.y.four": pkg / "y" / "four.py", "p.root": pkg / "root.py"}
    found = imports(known, root=tmp_path)
    assert cycles(found) == []
    assert [component for component, _ in folder_cycles(found, known)] == [["p.root", "p.x", "p.y"]]


def test_no_folder_loops() -> None:
    found = folder_cycles()
    assert [component for component, _ in found] == KNOWN_FOLDER_LOOPS, \
        "import loops between folders (each must be broken, or listed in KNOWN_FOLDER_LOOPS with why):\n" + \
        describe(found)


def test_no_import_cycles() -> None:
    found = cycles()
    assert not found, "import cycles between modules (each must be broken, not hidden):\n" + describe(found)


if __name__ == "__main__":
    every = imports()
    print(describe(cycles(every)) or "no import cycles")
    print(describe(folder_cycles(every)).replace("cycle of", "folder loop of") or "no folder loops")
    local = {imp.where: imp.text for imp in every if imp.scope == "function"}  # one per statement
    print(f"\nfunction-local imports of our own modules: {len(local)}")
    for where, text in local.items():
        print(f"    {where}: {text}")
    sys.exit(0)
