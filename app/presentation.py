"""Presentation mode: full screen, large type, high-contrast colours, the controls hidden,
and one key to run the next prompt of the set (Space or →; ← goes back; Esc leaves). After
File ▸ Open run or benchmark… the same keys play the next saved run instead. A key pressed during a run is
queued (one step) and said so in the status bar, never dropped."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QCoreApplication, QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QKeySequence, QShortcut

from .theme import NORMAL, PRESENTATION


class Presenter(QObject):
    def __init__(self, window):
        super().__init__(window)
        self.w = window
        self.active = False
        self.normal_geometry = QByteArray()  # the window's geometry before presentation mode
        self.fullscreen = True  # False for headless screenshots: keep the window's size
        self.queued = 0  # a step asked for while a run was on: taken when it ends
        window.job_finished.connect(self._job_finished)
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
        self.normal_geometry = self.w.saveGeometry()  # what the settings keep while presenting
        self.normal_rect = self.w.geometry()  # what leaving restores
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
        # Normal type first, then the controls: shown beside the large type they would make
        # the window's minimum wider than the screen.
        self.w.apply_theme(NORMAL)
        self.w.set_presenting(False)
        if self.fullscreen:
            self.w.showMaximized() if self._was_maximized else self.w.showNormal()
        if not self._was_maximized:
            # The minimum size is the large type's until the pending layout requests run and
            # the window's layout recomputes it; restoring before would be clamped to it.
            QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
            self.w.layout().activate()
            self.w.setGeometry(self.normal_rect)
            self.w.fit_to_screen()

    def next(self) -> None:
        self._step(1)

    def previous(self) -> None:
        self._step(-1)

    def _step(self, delta: int) -> None:
        if self.w.busy:
            self.queued = delta
            self.w.statusBar().showMessage(f"busy: the {'next' if delta > 0 else 'previous'} "
                                           f"{'run' if self._replaying() else 'prompt'} starts when this one ends")
            return
        if self._replaying():
            self.w.play_recording(self.w.playing + delta)
        else:
            self.w.controls.step_prompt(delta)
            self.w.start_run()

    def _replaying(self) -> bool:
        return bool(self.w.session.replay and self.w.playlist)

    def _job_finished(self, _info: dict) -> None:
        if self.queued and self.active:
            delta, self.queued = self.queued, 0
            QTimer.singleShot(0, lambda: self._step(delta))
        self.queued = 0
