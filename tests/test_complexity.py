"""No function in app/gpu_triage too tangled to change safely without saying why: every function or method
of radon cyclomatic complexity above 20 is split below 21, or carries one line beside its def that says why it
stays one function. The line is ``# noqa: C901 - <why>``, on the def line or the line directly above it (the
same words satisfy ruff's mccabe rule, which counts differently). An explanation on a function that is no
longer above 20 is stale and fails too."""

from __future__ import annotations

import re
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Function

PKG = Path(__file__).resolve().parents[1] / "app" / "gpu_triage"
LIMIT = 20
MARKER = re.compile(r"#\s*noqa:\s*C901\s*-\s*(?P<why>.*)$")


def _functions(source: str) -> list[Function]:
    """Every function and method radon measures (radon lists methods beside their class), and the functions
    nested in them."""
    found: list[Function] = []
    for block in cc_visit(source):
        if isinstance(block, Function):
            found.append(block)
            found.extend(c for c in block.closures if isinstance(c, Function))
    return found


def _marker(lines: list[str], lineno: int) -> str | None:
    """The explanation beside the def at 1-based ``lineno``: on that line, else on the line directly above."""
    for n in (lineno, lineno - 1):
        if 1 <= n <= len(lines):
            m = MARKER.search(lines[n - 1])
            if m:
                return m.group("why").strip()
    return None


def _findings() -> tuple[list[str], list[str], list[str]]:
    unexplained, empty, stale = [], [], []
    for path in sorted(PKG.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for fn in _functions(source):
            where = f"{path.relative_to(PKG)}:{fn.lineno} {fn.fullname} {fn.complexity}"
            why = _marker(lines, fn.lineno)
            if fn.complexity > LIMIT and why is None:
                unexplained.append(where)
            elif fn.complexity > LIMIT and not why:
                empty.append(where)
            elif fn.complexity <= LIMIT and why is not None:
                stale.append(where)
    return unexplained, empty, stale


def test_every_function_above_complexity_20_is_split_or_says_why() -> None:
    unexplained, empty, _ = _findings()
    assert not unexplained, "split below 21, or add `# noqa: C901 - <why it stays one>` beside the def:\n" + "\n".join(
        unexplained)
    assert not empty, "the `# noqa: C901 - ` explanation is empty:\n" + "\n".join(empty)


def test_no_explanation_sits_on_a_function_of_complexity_20_or_less() -> None:
    _, _, stale = _findings()
    assert not stale, "no longer above 20: remove their `# noqa: C901` explanation:\n" + "\n".join(stale)


def test_the_marker_is_read_beside_the_def_only() -> None:
    lines = ["x = 1", "# noqa: C901 - one table, read top to bottom", "def f():", "    pass"]
    assert _marker(lines, 3) == "one table, read top to bottom"
    assert _marker(["def f():  # noqa: C901 -   ", "    pass"], 1) == ""
    assert _marker(["# noqa: C901 - far", "", "def f():"], 3) is None
