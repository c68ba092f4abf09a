"""The Help menu's About box, and what the first launch's GPU check says in the window.

Each function is given the window ``w``, as ``file_menu``'s are; the window's methods of the same
names call them."""

from __future__ import annotations

import PySide6
from PySide6.QtWidgets import QLabel, QMessageBox

from dspark import blas

from ..state.wording import about_text


def show_device_check(w, check) -> None:
    """The first-launch GPU check's answer, for About; when it sent the work to the CPU, its
    sentence now and a note that stays in the status bar (every figure shown is the CPU's)."""
    w.device_check = check
    if check is not None and check.fell_back:
        note = QLabel("⚠ computing on the CPU: the GPU check failed (Help ▸ About)")
        note.setObjectName("note")
        note.setToolTip(check.sentence)
        w.statusBar().addPermanentWidget(note)
        w.statusBar().showMessage(check.sentence)


def show_about(w) -> None:
    """Help ▸ About: the versions, the device and the GPU check, the BLAS (not modal)."""
    w.about_box = QMessageBox(
        QMessageBox.Information,
        "About DSpark Studio",
        about_text(w.device_check, blas.describe(), PySide6.__version__),
        parent=w,
    )
    w.about_box.open()
