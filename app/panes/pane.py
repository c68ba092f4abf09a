"""What the window asks of every pane: draw a view, take a theme, name its plots for export.
Adding a pane means writing these three methods and listing it once in the window."""

from __future__ import annotations

from typing import Protocol

from PySide6.QtWidgets import QWidget

from ..state.session import View
from .theme import Theme


class Pane(Protocol):
    def show_view(self, view: View) -> None:
        """Redraw from ``view`` (called by the window's refresh timer, never per token)."""

    def set_theme(self, theme: Theme) -> None: ...

    def plots(self) -> dict[str, QWidget]:
        """Widgets worth saving as PNG, by file name (may be empty)."""
