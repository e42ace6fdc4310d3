"""``gpu-triage completion SHELL``: the shell completion script, made from the parser itself."""

from __future__ import annotations

import argparse

from gpu_triage.cli.command import Command, Invocation


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=("bash", "zsh", "fish"), metavar="SHELL", help="bash, zsh or fish")


def _run(call: Invocation) -> int:
    from gpu_triage.commands.completion import run_completion

    return run_completion(call.args, call.parser)


COMMAND = Command(
    name="completion",
    order=160,
    help="print the shell completion script for bash, zsh or fish",
    description="Print the completion script for SHELL, made from this command line's own parser. "
    "bash: gpu-triage completion bash > ~/.local/share/bash-completion/completions/gpu-triage; "
    "zsh: gpu-triage completion zsh > DIR/_gpu-triage with DIR on $fpath; "
    "fish: gpu-triage completion fish > ~/.config/fish/completions/gpu-triage.fish",
    arguments=_arguments,
    run=_run,
    reads_config=False,  # a broken config must not break a shell's start-up
)
