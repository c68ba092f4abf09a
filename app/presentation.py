"""Presentation mode: full screen, large type, high-contrast colours, the controls hidden,
and one key to run the next prompt of the set (Space or →; ← goes back; Esc leaves)."""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QKeySequence, QShortcut

from .theme import NORMAL, PRESENTATION


class Presenter(QObject):
    def __init__(self, window):
        super().__init__(window)
        self.w = window
        self.active = False
        self.fullscreen = True  # False for headless screenshots: keep the window's size
        self.keys = []
        for key, slot in ((Qt.Key_Space, self.next), (Qt.Key_Right, self.next),
                          (Qt.Key_Left, self.previous), (Qt.Key_Escape, self.leave)):
            sc = QShortcut(QKeySequence(key), window)
            sc.setContext(Qt.WindowShortcut)
            sc.activated.connect(slot)
            sc.setEnabled(False)
            self.keys.append(sc)

    def toggle(self) -> None:
        self.leave() if self.active else self.enter()

    def enter(self) -> None:
        if self.active:
            return
        self.active = True
        self._was_maximized = self.w.isMaximized()
        self.w.set_presenting(True)
        self.w.apply_theme(PRESENTATION)
        for sc in self.keys:
            sc.setEnabled(True)
        self.w.setFocus()
        if self.fullscreen:
            self.w.showFullScreen()
        self.w.statusBar().showMessage("presentation: Space / → next prompt, ← previous, Esc to leave")

    def leave(self) -> None:
        if not self.active:
            return
        self.active = False
        for sc in self.keys:
            sc.setEnabled(False)
        self.w.set_presenting(False)
        self.w.apply_theme(NORMAL)
        if self.fullscreen:
            self.w.showMaximized() if self._was_maximized else self.w.showNormal()

    def next(self) -> None:
        self._step(1)

    def previous(self) -> None:
        self._step(-1)

    def _step(self, delta: int) -> None:
        if self.w.busy:
            return
        self.w.controls.step_prompt(delta)
        self.w.start_run()
