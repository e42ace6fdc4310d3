"""The shape of our imports, read from the source with ast: no module imports another's private name, and the
modules import each other without a cycle (function-level imports count: they only hide a cycle until run time)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"
ROOT = APP / "gpu_triage"

PRIVATE_ALLOWED: set[tuple[str, str]] = set()  # none: a shared name is public


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(APP).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import of ours in ``path``, at any depth."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gpu_triage"):
                    yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module.startswith("gpu_triage"):
                yield module, [alias.name for alias in node.names]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_private_name_is_imported_across_modules() -> None:
    found = set()
    for name, path in MODULES.items():
        for module, names in _imports(name, path):
            if module != name:
                found |= {(name, f"{module}.{n}") for n in names if _private(n) and f"{module}.{n}" not in MODULES}
    assert found - PRIVATE_ALLOWED == set()
    assert PRIVATE_ALLOWED <= found, "an allowed private import is gone: take it off the list"


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for module, names in _imports(name, path):
            # `from package import module` depends on that module; `from module import name` on the module
            targets = {f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES} or {module}
            graph[name] |= {t for t in targets if t in MODULES and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_modules_import_each_other_without_a_cycle() -> None:
    assert _cycles(_graph()) == []
