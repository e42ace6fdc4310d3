"""docs/diagnosis.md says the vocabulary vocab.py holds: every bottleneck and mechanism, and nothing stale."""

from __future__ import annotations

import re
from pathlib import Path

from gpu_triage.diagnosis.vocab import LABELS, SEVERITY, Bottleneck, Mechanism, is_healthy, label

DOC = (Path(__file__).resolve().parents[1] / "docs" / "diagnosis.md").read_text(encoding="utf-8")
MECHANISMS = {m.value for m in Mechanism}


def _section(start: str, end: str) -> str:
    a = DOC.index(start)
    return DOC[a : DOC.index(end, a)]


def test_each_bottleneck_has_its_words() -> None:
    assert set(LABELS) == set(Bottleneck)
    assert set(SEVERITY[1:]) == set(Bottleneck)
    assert [b for b in Bottleneck if is_healthy(b)] == [Bottleneck.NONE] and is_healthy("")
    assert label("from_a_newer_version") == "from_a_newer_version"


def test_the_vocabulary_table_holds_every_bottleneck_and_no_other() -> None:
    table = _section("## The vocabulary", "### Severity")
    rows = re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M)
    assert sorted(rows) == sorted(Bottleneck) and len(rows) == len(set(rows))


def test_the_opening_list_names_every_bottleneck() -> None:
    opening = _section("a **bottleneck** (", ": the vocabulary below")
    assert set(re.findall(r"`([a-z_]+)`", opening)) == set(Bottleneck)


def test_the_rules_order_names_every_mechanism_and_no_other() -> None:
    order = _section("Order (`rules.RULES`)", "In the idle pattern storage")
    words = set(re.findall(r"\b[a-z0-9_]+\b", order))
    assert MECHANISMS <= words, MECHANISMS - words
    compound = set(re.findall(r"\b[a-z0-9]+(?:_[a-z0-9]+)+\b", order))  # every snake_case word there is a mechanism
    assert compound <= MECHANISMS, compound - MECHANISMS


def test_the_severity_paragraph_says_vocab_severity_in_its_order() -> None:
    said = _section("`gpu_fault` (no rule gives it", "**GPU faults**")
    order = list(dict.fromkeys(w for w in re.findall(r"`([a-z_]+)`", said) if w in SEVERITY))
    assert order == list(SEVERITY)
