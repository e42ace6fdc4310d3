"""The diagnosis's rooms keep their promises: one vocabulary that every rule and every output uses, each
mechanism's advice owned by a rule, the loader rules a property of the rules, and no function too tangled
to change safely (radon's cyclomatic complexity, at most 20, in diagnosis/ and offline/)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from radon.complexity import cc_visit

from gpu_triage.diagnosis.engine import diagnose
from gpu_triage.diagnosis.mechanisms.pipeline import HostToDeviceCopy
from gpu_triage.diagnosis.rules import _OWNER, BOTTLENECKS, LOADER_RULES, RULES
from gpu_triage.diagnosis.thresholds import Thresholds
from gpu_triage.diagnosis.vocab import Bottleneck, Mechanism, Pattern
from gpu_triage.sources.sim import SimulatedSource
from gpu_triage.window import RollingWindow

PKG = Path(__file__).resolve().parents[1] / "app" / "gpu_triage"


def test_every_rule_speaks_the_vocabulary() -> None:
    for rule in RULES:
        assert isinstance(rule.name, Mechanism) and isinstance(rule.bottleneck, Bottleneck), rule
        assert all(isinstance(p, Pattern) for p in rule.patterns), rule
    assert set(BOTTLENECKS) == set(Bottleneck)


def test_every_mechanism_has_the_rule_that_advises_on_it() -> None:
    assert set(_OWNER) == set(Mechanism)


def test_the_loader_rules_are_the_rules_that_read_the_loader() -> None:
    assert LOADER_RULES == {Mechanism.IDLE_DATA, Mechanism.IN_PROCESS_OR_HOST, Mechanism.DATA_PIPELINE,
                            Mechanism.NO_PROCESS_INFO}
    assert HostToDeviceCopy.name not in LOADER_RULES  # the copy happens inside the step, after the loader


def test_a_verdict_writes_the_vocabulary_as_plain_strings() -> None:
    src = SimulatedSource("data_pipeline", gpus=2, cores=8, seed=0, start=datetime(2026, 1, 1, tzinfo=UTC))
    w = RollingWindow(150)
    for _ in range(60):
        w.append(src.sample())
    v = diagnose(w.view(), Thresholds(), 8)
    assert (v.pattern, v.bottleneck) == ("sawtooth", "data_pipeline")
    text = json.dumps({"pattern": v.pattern, "bottleneck": v.bottleneck, "mechanism": v.mechanism})
    assert json.loads(text) == {"pattern": "sawtooth", "bottleneck": "data_pipeline", "mechanism": v.mechanism}
    assert f"{v.pattern}/{v.bottleneck}" == "sawtooth/data_pipeline"


def test_no_function_above_complexity_20_in_the_diagnosis_and_offline() -> None:
    too_complex = []
    for room in ("diagnosis", "offline"):
        for path in sorted((PKG / room).rglob("*.py")):
            for block in cc_visit(path.read_text(encoding="utf-8")):
                if block.complexity > 20:
                    too_complex.append(f"{path.relative_to(PKG)}:{block.lineno} {block.name} {block.complexity}")
    assert too_complex == []
