"""What ships: the licence pyproject declares, every library the code imports declared as a dependency,
classifiers, and shell completion that knows every subcommand."""

from __future__ import annotations

import argparse
import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gpu_triage.cli import build_parser
from gpu_triage.commands.completion import SHELLS, script

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# import name -> distribution name, where they differ
DIST = {
    "pynvml": "nvidia-ml-py",
    "textual_plotext": "textual-plotext",
    "prometheus_client": "prometheus_client",
    "re2": "google-re2",
    "yaml": "pyyaml",
}


def _declared() -> set[str]:
    project = PYPROJECT["project"]
    names = list(project["dependencies"]) + [d for ds in project["optional-dependencies"].values() for d in ds]
    return {n.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip().lower() for n in names}


def test_the_licence_ships_and_says_mit() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "Copyright (c) the gpu-triage authors" in text
    assert PYPROJECT["project"]["license"] == "MIT" and "LICENSE" in PYPROJECT["project"]["license-files"]


@pytest.mark.slow
def test_every_library_the_code_imports_is_declared() -> None:
    stdlib = set(sys.stdlib_module_names)
    imported: set[str] = set()
    for path in (ROOT / "app" / "gpu_triage").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    third_party = {m for m in imported if m not in stdlib and m != "gpu_triage"}
    assert "rich" in third_party
    missing = {m for m in third_party if DIST.get(m, m).lower().replace("_", "-") not in
               {d.replace("_", "-") for d in _declared()}}
    assert not missing, f"imported but not declared in pyproject.toml: {sorted(missing)}"


def test_classifiers_name_the_pythons_and_the_licence_is_not_repeated_there() -> None:
    classifiers = PYPROJECT["project"]["classifiers"]
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "Topic :: System :: Monitoring" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # PEP 639: the license expression says it


def _subcommands() -> list[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


@pytest.mark.parametrize("shell", SHELLS)
def test_the_completion_script_names_every_subcommand(shell: str) -> None:
    text = script(build_parser(), shell)
    commands = _subcommands()
    assert {"live", "demo", "snapshot", "completion", "diagnose"} <= set(commands)
    for command in commands:
        assert command in text, (shell, command)
    option = "-l {}" if shell == "fish" else "--{}"  # fish names a long option without its dashes
    assert option.format("json") in text and option.format("source") in text


@pytest.mark.parametrize("shell", SHELLS)
def test_the_completion_script_is_valid_for_its_shell(shell: str, tmp_path: Path) -> None:
    exe = shutil.which(shell)
    if exe is None:
        pytest.skip(f"{shell} not installed here")
    path = tmp_path / f"completion.{shell}"
    path.write_text(script(build_parser(), shell), encoding="utf-8")
    flag = ["--no-execute"] if shell == "fish" else ["-n"]
    result = subprocess.run([exe, *flag, str(path)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def test_the_completion_command(capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_triage.cli import main

    assert main(["completion", "bash"]) == 0
    out = capsys.readouterr().out
    assert "complete" in out and "snapshot" in out
    with pytest.raises(SystemExit) as exc:
        main(["completion", "tcsh"])
    assert exc.value.code == 2
