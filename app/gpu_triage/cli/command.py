"""What a subcommand declares (:class:`Command`: its name, its help, its arguments, its run function and how
it runs), and what its run function is given (:class:`Invocation`). One module in ``cli/subcommands/``
declares one command; ``cli/registry.py`` finds them, ``cli/parser.py`` builds argparse from them and
``cli/entry.py`` runs the one that was typed."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpu_triage.config import Config


def never(args: argparse.Namespace) -> bool:
    return False


def always(args: argparse.Namespace) -> bool:
    return True


@dataclass(frozen=True)
class Invocation:
    """One run of a command: its parsed arguments, the parser (for `completion`, which prints it) and the
    config, loaded unless the command declared ``reads_config=False``."""

    args: argparse.Namespace
    parser: argparse.ArgumentParser
    loaded_config: Config | None

    @property
    def config(self) -> Config:
        if self.loaded_config is None:
            raise AssertionError("a command declared with reads_config=False has no config")
        return self.loaded_config


@dataclass(frozen=True)
class Command:
    """A subcommand of ``gpu-triage``.

    ``order`` places it in ``--help``'s list and in the invalid-choice line (ascending; leave gaps).
    ``arguments`` adds its own options and operands; the options every command also takes after its name
    (``--log-file``, ``--log-level``, ``--config``) come after them, then ``trailing_arguments``.
    ``run`` imports its handler lazily, so that ``--help`` imports none of them, and returns an exit status.
    ``on_screen``: the command draws a Textual screen for these arguments, so nothing else may write to its
    terminal. ``reads_config=False``: neither ``--config`` nor the config file (``completion``: a broken
    config must not break a shell's start-up).
    """

    name: str
    order: int
    help: str
    description: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[Invocation], int]
    on_screen: Callable[[argparse.Namespace], bool] = never
    reads_config: bool = True
    trailing_arguments: Callable[[argparse.ArgumentParser], None] | None = None


def no_arguments(p: argparse.ArgumentParser) -> None:
    """For a command that takes only the shared options."""


def on_dashboard(name: str) -> Callable[[Invocation], int]:
    """The run function of a command that is the Textual dashboard (live, demo, replay)."""

    def run(call: Invocation) -> int:
        from gpu_triage.ui.run import run_dashboard  # Textual only for the screen commands

        return run_dashboard(name, call.args, call.config)

    return run
