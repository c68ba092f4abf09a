"""Presentation mode: full screen, large type, high-contrast colours, the controls hidden,
and one key to run the next prompt of the set (Space or →; ← goes back; Esc leaves). After
File ▸ Open run or benchmark… the same keys play the next saved run instead. A key pressed
during a run is queued (one step) and said so, never dropped.

``Presenter`` is the mode's state and its rules; it holds no widget. The window shows what it
says: ``changed(on)`` (its chrome, type and size), ``step(delta)`` (the next or previous prompt
or saved run, when nothing runs) and ``notice(text)`` (the status bar)."""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal


class Presenter(QObject):
    changed = Signal(bool)
    step = Signal(int)
    notice = Signal(str)

    def __init__(self, is_busy, is_replaying, parent=None):
        """``is_busy()``: whether a run (or replay) is on, so a step must wait for it;
        ``is_replaying()``: whether a step plays the next saved run rather than a prompt."""
        super().__init__(parent)
        self.is_busy, self.is_replaying = is_busy, is_replaying
        self.active = False
        self.fullscreen = True  # False for headless screenshots: keep the window's size
        self.queued = 0  # a step asked for while a run was on: taken when it ends

    def toggle(self) -> None:
        self.leave() if self.active else self.enter()

    def enter(self) -> None:
        if not self.active:
            self.active = True
            self.changed.emit(True)
            self.notice.emit("presentation: Space / → next prompt, ← previous, Esc to leave")

    def leave(self) -> None:
        if self.active:
            self.active = False
            self.queued = 0
            self.changed.emit(False)
            self.notice.emit("left presentation mode")

    def next(self) -> None:
        self.request(1)

    def previous(self) -> None:
        self.request(-1)

    def request(self, delta: int) -> None:
        if self.is_busy():
            self.queued = delta
            self.notice.emit(
                f"busy: the {'next' if delta > 0 else 'previous'} "
                f"{'run' if self.is_replaying() else 'prompt'} starts when this one ends"
            )
            return
        self.step.emit(delta)

    def job_ended(self) -> None:
        """The run is over: a queued step is taken (once the window has drawn the end)."""
        if self.queued and self.active:
            delta, self.queued = self.queued, 0
            QTimer.singleShot(0, lambda: self.request(delta))
        self.queued = 0
