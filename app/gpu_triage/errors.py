"""User-facing errors: one clear line (what, where, what to do) and an exit status; never a traceback."""

from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """An error caused by input the user can fix. ``str(err)`` is the one line shown."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def user_path(text: str, what: str) -> Path:
    """``text`` with a leading ``~`` or ``~NAME`` expanded; UserError naming ``what`` when it cannot be:
    Path.expanduser raises RuntimeError ("Could not determine home directory"), which would be a
    traceback in every command that takes a path."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        head = text.split("/", 1)[0]
        if len(head) > 1:
            why = f"there is no user {head[1:]!r} on this machine ({head}/ is that user's home directory)"
        else:
            why = "this user has no home directory to put for ~ ($HOME is unset)"
        raise UserError(f"{what} {text}: {why}: give the full path") from None
