"""The app tells the truth on screen (issue #12): each defect a newcomer found, driven through
the real window, actions and worker on tiny models."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtGui import QImage  # noqa: E402

from dspark_studio import window as window_module  # noqa: E402
from test_app import LONG, PROMPT, dirs, run_job, setup, window  # noqa: E402,F401  (shared fixtures)


def menu_action(w, menu: str, text: str):
    """The QAction a person clicks: ``menu`` ▸ ``text`` of the window's menu bar."""
    for top in w.menuBar().actions():
        if top.text().replace("&", "") == menu:
            for a in top.menu().actions():
                if a.text() == text:
                    return a
    raise AssertionError(f"no menu item {menu} ▸ {text}")


def test_save_plots_as_png_from_the_menu_writes_the_files(qtbot, window, dirs, tmp_path, monkeypatch):
    w = window
    setup(w, dirs, max_tokens=6)
    assert run_job(qtbot, w, w.start_run)["ok"]
    folder = tmp_path / "pngs"
    monkeypatch.setattr(window_module.QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
    # triggered(bool) hands the slot a `checked` flag: it must not arrive as the folder
    menu_action(w, "File", "Save plots as PNG…").trigger()
    names = {p.stem for p in folder.glob("*.png")}
    assert {"acceptance_by_position", "accepted_length", "tokens_per_sec", "draft_rows", "window"} <= names
    assert not QImage(str(folder / "window.png")).isNull()
    assert str(folder) in w.statusBar().currentMessage()
