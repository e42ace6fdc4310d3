"""The ``gpu-triage`` command line. Each subcommand is declared once, in its own module in ``subcommands/``
(name, help, arguments, run function: :class:`~gpu_triage.cli.command.Command`); ``registry`` finds them,
``parser`` builds argparse from them, ``entry`` runs the one typed. ``options`` holds the option groups
several commands share and ``values`` the argument types. The handlers themselves are ``gpu_triage.commands``."""

from gpu_triage.cli.entry import check_file_args, dispatch, main, on_screen, prepare_imports
from gpu_triage.cli.parser import build_parser

__all__ = ["build_parser", "check_file_args", "dispatch", "main", "on_screen", "prepare_imports"]
