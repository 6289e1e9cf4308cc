"""The package's layers, read from its own imports (``ast``; imports inside functions count, and
so do the type-only ones under ``if TYPE_CHECKING:``: a type that names a higher layer is a
dependency on it too). docs/architecture.md draws the layers these rules keep.

Rules:

1. ``core/`` and ``formats/`` import nothing of the package but themselves, ``exceptions`` and
   ``compat``: they are pure Python and know nothing of Django, stores or strategies.
2. ``sources/`` (the stores) import nothing of the layers above them: strategies, the API,
   reservations, plugins, the surfaces (admin, http, ops, fields, tasks).
3. No import circle among the package's modules; ``reservations/`` imports no surface (admin,
   http, ops, fields, tasks, commands): they call it.
4. An import inside a function says why in a comment on its line or the line above.

A module is as long as what belongs together in it: no rule counts lines. Each test fails on
the first change that breaks its rule, naming the module and the import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import django_sequences

PACKAGE = "django_sequences"
ROOT = Path(django_sequences.__file__).resolve().parent

#: Rule 2: what the stores may not import (module name prefixes).
ABOVE_SOURCES = (
    "strategies",
    "definitions",
    "issuing",
    "numbers",
    "reservations",
    "plugins",
    "admin",
    "http",
    "views",
    "urls",
    "ops",
    "operations",
    "fields",
    "tasks",
    "management",
)

#: Rule 3: what the reservations package may not import (the surfaces built on it).
ABOVE_RESERVATIONS = (
    "admin",
    "http",
    "views",
    "urls",
    "ops",
    "operations",
    "fields",
    "tasks",
    "management",
)


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, relative to the package ("core.segment")
    target: str  # the imported module, relative to the package
    line: int
    in_function: bool
    explained: bool


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[0] == "migrations":
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts) or "__init__"] = path
    return out


MODULES = _modules()


def _package_of(module: str, path: Path) -> list[str]:
    parts = [] if module == "__init__" else module.split(".")
    return parts if path.name == "__init__.py" else parts[:-1]


def _resolve(module: str, path: Path, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The package's modules an import statement loads (relative names)."""
    found: list[str] = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                found.append(alias.name[len(PACKAGE) + 1 :] or "__init__")
        return found
    if node.level:
        base = _package_of(module, path)
        if node.level > 1:
            base = base[: len(base) - (node.level - 1)]
        stem = ".".join([*base, *(node.module.split(".") if node.module else [])])
    elif node.module and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
        stem = node.module[len(PACKAGE) + 1 :]
    else:
        return found
    stem = stem or "__init__"
    names = []
    for alias in node.names:
        sub = alias.name if stem == "__init__" else f"{stem}.{alias.name}"
        if sub in MODULES:
            found.append(sub)
        else:
            names.append(alias.name)
    if names and stem in MODULES:  # a name from the module itself, not only submodules
        found.append(stem)
    return found


def _imports(module: str, path: Path) -> Iterator[Import]:
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)

    def explained(line: int) -> bool:
        here = lines[line - 1]
        above = lines[line - 2].strip() if line >= 2 else ""
        return "#" in here or above.startswith("#")

    def walk(node: ast.AST, in_function: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                for target in _resolve(module, path, child):
                    if target != module:
                        yield Import(
                            module, target, child.lineno, in_function, explained(child.lineno)
                        )
                continue
            inner = in_function or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            yield from walk(child, inner)

    yield from walk(tree, False)


IMPORTS = [i for module, path in MODULES.items() for i in _imports(module, path)]


def _layer(module: str) -> str:
    return module.split(".")[0]


def test_the_walker_sees_imports_inside_functions() -> None:
    """The walker itself: a known function-level import and a known module-level one."""
    inside = {(i.source, i.target) for i in IMPORTS if i.in_function}
    top = {(i.source, i.target) for i in IMPORTS if not i.in_function}
    assert ("apps", "checks") in inside
    assert ("core.segment", "exceptions") in top
    assert len(MODULES) > 50


def test_core_and_formats_import_only_themselves_exceptions_and_compat() -> None:
    bad = [
        f"{i.source} imports {i.target} (line {i.line})"
        for i in IMPORTS
        if _layer(i.source) in ("core", "formats")
        and _layer(i.target) != _layer(i.source)
        and i.target not in ("exceptions", "compat")
    ]
    assert bad == []


def test_sources_import_no_layer_above_them() -> None:
    found: dict[str, set[str]] = {}
    for i in IMPORTS:
        if _layer(i.source) == "sources" and _layer(i.target) in ABOVE_SOURCES:
            found.setdefault(i.source, set()).add(i.target)
    assert found == {}


def test_reservations_import_no_surface() -> None:
    found: dict[str, set[str]] = {}
    for i in IMPORTS:
        if _layer(i.source) == "reservations" and _layer(i.target) in ABOVE_RESERVATIONS:
            found.setdefault(i.source, set()).add(i.target)
    assert found == {}


def _circles() -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for i in IMPORTS:
        graph[i.source].add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle() -> None:
    assert [sorted(c) for c in _circles()] == []


def test_the_circle_finder_finds_one() -> None:
    """The check above can fail: two modules importing each other form a circle."""
    original = IMPORTS[:]
    IMPORTS.append(Import("core.base", "issuing", 1, True, True))
    try:
        assert any({"core.base", "issuing"} <= c for c in _circles())
    finally:
        IMPORTS[:] = original


def test_function_level_imports_say_why() -> None:
    found = [
        f"{i.source} line {i.line} imports {i.target}"
        for i in IMPORTS
        if i.in_function and not i.explained
    ]
    assert found == [], "move these imports to the module's top, or say why on their line"
