"""``gpu-triage completion SHELL``: the shell completion script for bash, zsh or fish, generated from the
command line parser itself by shtab (so a new subcommand or option is completed without editing a script).

    gpu-triage completion bash > ~/.local/share/bash-completion/completions/gpu-triage
    gpu-triage completion zsh > ~/.zfunc/_gpu-triage        (a directory on $fpath)
    gpu-triage completion fish > ~/.config/fish/completions/gpu-triage.fish
"""

from __future__ import annotations

import argparse
import sys

SHELLS = ("bash", "zsh", "fish")


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    import shtab  # noqa: PLC0415 - only this command needs it

    return str(shtab.complete(parser, shell=shell))


def run_completion(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    sys.stdout.write(script(parser, args.shell))
    sys.stdout.flush()
    return 0
