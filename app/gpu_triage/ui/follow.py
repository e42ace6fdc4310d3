"""The marker of screens that follow the window while open (the card detail view).

Its own module so that the app (which calls ``refresh_data`` on each frame) and the screens (which implement
it) both import it, and neither imports the other (app.py imports the screens, so a screen importing the app
would be a cycle).
"""

from __future__ import annotations

from gpu_triage.window import WindowView


class FollowsWindow:
    """A screen that is handed the newest window on every frame while it is on top."""

    def refresh_data(self, view: WindowView) -> None:  # pragma: no cover - interface
        raise NotImplementedError
