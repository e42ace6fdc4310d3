"""One module per ``gpu-triage`` subcommand, each declaring ``COMMAND = Command(...)``: its name, help,
arguments and run function. ``cli/registry.py`` finds every module here, so a new subcommand is one new file."""
