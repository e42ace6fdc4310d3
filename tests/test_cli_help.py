"""What `gpu-triage COMMAND --help` prints is read by people: it says what the docs say, without artefacts."""

from __future__ import annotations

import argparse

import pytest

from gpu_triage.cli import build_parser


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_help_prints_single_percent_signs(command: str) -> None:
    """argparse %-formats option help but not a description without %(prog)s: "50 %%" showed as typed."""
    text = _subparsers()[command].format_help()
    assert "%%" not in text, command
