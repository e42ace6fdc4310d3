"""Every subcommand, found by looking in ``cli/subcommands/``: each module there declares one ``COMMAND``,
so a new subcommand is one new module and nothing else names it."""

from __future__ import annotations

import functools
import importlib
import pkgutil

from gpu_triage.cli import subcommands
from gpu_triage.cli.command import Command


@functools.cache
def commands() -> tuple[Command, ...]:
    """The declared commands, in their declared order."""
    found: list[Command] = []
    for info in pkgutil.iter_modules(subcommands.__path__):
        module = importlib.import_module(f"{subcommands.__name__}.{info.name}")
        declared = getattr(module, "COMMAND", None)
        if not isinstance(declared, Command):
            raise AssertionError(f"{module.__name__} declares no COMMAND = Command(...)")
        found.append(declared)
    names = [c.name for c in found]
    orders = [c.order for c in found]
    if len(set(names)) != len(names) or len(set(orders)) != len(orders):
        raise AssertionError(f"two subcommands share a name or an order: {sorted(zip(orders, names, strict=True))}")
    return tuple(sorted(found, key=lambda c: c.order))


def command(name: str) -> Command:
    """The command called NAME (argparse already refused any other)."""
    for c in commands():
        if c.name == name:
            return c
    raise AssertionError(name)
