"""User-facing errors: one clear line (what, where, what to do) and an exit status; never a traceback."""

from __future__ import annotations


class UserError(Exception):
    """An error caused by input the user can fix. ``str(err)`` is the one line shown."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
