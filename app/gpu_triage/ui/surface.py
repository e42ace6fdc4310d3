"""What a controller of the dashboard may do to the screen it lives on (the app is one): draw it again, say
something in a toast, open a dialog. The controllers (ui/app_procs.py, ui/app_recording.py) get the app as this
and no more, so that none of them reaches into another's state."""

from __future__ import annotations

from typing import Any, Protocol


class Surface(Protocol):
    def redraw(self) -> None: ...

    def notify(self, message: str, *, markup: bool = False, **kwargs: Any) -> None: ...

    def push_screen(self, screen: Any, callback: Any = None) -> Any: ...
