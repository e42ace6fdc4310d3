"""The data flows one way and only ui/ imports textual: checked by import-linter's contracts in
pyproject.toml, and by a direct scan so a new module cannot slip past the contract's module list."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "app" / "gpu_triage"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_ui_imports_textual() -> None:
    offenders = [
        str(p.relative_to(PKG))
        for p in PKG.rglob("*.py")
        if "ui" not in p.relative_to(PKG).parts[:1]
        and _imports(p) & {"textual", "textual_plotext", "plotext"}
    ]
    assert offenders == []


def test_import_linter_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe, "import-linter is a test dependency"
    root = PKG.parents[1]
    result = subprocess.run(
        [exe], cwd=root, capture_output=True, text=True, env={"PYTHONPATH": str(PKG.parent), "PATH": ""}
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _layered() -> set[str]:
    pyproject = tomllib.loads((PKG.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = pyproject["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["name"].startswith("Layers: "))
    return {m.strip() for line in layers for part in line.split("|") for m in part.split(":")}


def test_every_trace_module_has_its_layer() -> None:
    """The layers contract names trace/'s modules one by one (the recording format, under the diagnosis):
    a new module there must be placed, or the contract would not check it."""
    modules = {f"gpu_triage.trace.{p.stem}" for p in (PKG / "trace").glob("*.py") if p.stem != "__init__"}
    assert modules - _layered() == set()


def test_every_room_has_its_layer() -> None:
    """Every top-level module and package, the entry point and pulse included, is placed in the layers contract:
    none is exempt, so an upward import from any room fails CI."""
    tops = {f"gpu_triage.{p.stem}" for p in PKG.glob("*.py") if p.stem != "__init__"}
    tops |= {f"gpu_triage.{p.name}" for p in PKG.iterdir() if (p / "__init__.py").is_file()}
    named = _layered()
    placed = named | {n.rsplit(".", 1)[0] for n in named}
    assert tops - placed == set()
    assert {".".join(n.split(".")[:2]) for n in named} - tops == set(), "a layer names a room that is gone"


def test_recordings_are_opened_in_the_recording_room_only() -> None:
    """The dashboard, `record`, `export --record` and `baseline --record` write through recording/ (one lifecycle:
    open, append, rotate, close or keep the stream for `recover`); only it and the dataset's own rotation open
    a trace writer."""
    opened = {
        str(p.relative_to(PKG))
        for p in PKG.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in {"TraceWriter", "DatasetWriter"}
    }
    assert opened == {"recording/session.py", "storage/dataset.py"}


MAX_LINES = 450


def test_no_file_in_the_package_is_over_450_lines() -> None:
    """A file past a few hundred lines holds more than one room: split it by responsibility (docs/architecture.md
    names the rooms)."""
    lengths = {str(p.relative_to(PKG)): len(p.read_text(encoding="utf-8").splitlines()) for p in PKG.rglob("*.py")}
    assert {f: n for f, n in lengths.items() if n > MAX_LINES} == {}
