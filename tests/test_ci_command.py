"""CI runs exactly the README's test command, and that command spreads the whole suite over every core."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"Install and run the tests[^\n]*\n+```sh\n(.+?)\n```", readme, re.S)
    assert block, "README.md: the test command's block after 'Install and run the tests' is missing"
    return block.group(1).strip()


def test_ci_runs_the_readmes_test_command_in_parallel() -> None:
    command = readme_test_command()
    assert "pytest" in command and "-n auto" in command and "-m" not in command.split("pytest", 1)[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert command in ci, ".ci/run must run the README's test command, as written there"
