"""The main window's menus and their keys, as one table: what each item says, what it does and
its shortcut. Every action is also added to the window itself, so its key works while the menu
bar is hidden (presentation mode)."""

from __future__ import annotations

from PySide6.QtGui import QAction, QActionGroup, QKeySequence

from ..state.playlist import SPEEDS
from ..state.session import COMPARE_TAB, REJECTIONS_TAB, RUN_TAB
from ..state.training import TRAIN_TAB

#: View's tabs, Ctrl+1 … Ctrl+4 in this order.
TABS = (
    ("Run tab", RUN_TAB),
    ("Compare tab", COMPARE_TAB),
    ("Rejections tab", REJECTIONS_TAB),
    ("Train tab", TRAIN_TAB),
)


def build_menus(w) -> None:
    """File, Run and View on ``w``'s menu bar, each item calling one of ``w``'s actions."""

    def act(menu, text, slot, key=None):
        a = QAction(text, w)
        if key:
            a.setShortcut(QKeySequence(key))
        a.triggered.connect(lambda _checked=False: slot())  # triggered(bool) must not reach the slot
        menu.addAction(a)
        w.addAction(a)  # shortcuts keep working while the menu bar is hidden
        return a

    m = w.menuBar().addMenu("&File")
    act(m, "Open target…", w.controls.browse_target, "Ctrl+O")
    act(m, "Open run or benchmark…", w.choose_replay, "Ctrl+Shift+O")
    act(m, "Add drafter…", w.controls.browse_drafter, "Ctrl+D")
    act(m, "Download…", w.open_download)
    m.addSeparator()
    act(m, "Export run as JSON…", lambda: w.export_data("json", False))
    act(m, "Export run as CSV…", lambda: w.export_data("csv", False))
    act(m, "Export comparison as JSON…", lambda: w.export_data("json", True))
    act(m, "Export comparison as CSV…", lambda: w.export_data("csv", True))
    act(m, "Export rejection views as CSV…", w.export_rejections)
    act(m, "Save comparison as benchmark…", w.save_comparison)
    act(m, "Save plots as PNG…", w.export_pngs, "Ctrl+Shift+S")
    act(m, "Export drafter…", w.export_drafter)
    m.addSeparator()
    act(m, "Quit", w.close, "Ctrl+Q")
    m = w.menuBar().addMenu("&Run")
    act(m, "Run", w.start_run, "Ctrl+R")
    act(m, "Stop", w.stop, "Ctrl+.")
    act(m, "Compare drafters", w.start_compare, "Ctrl+Shift+R")
    act(m, "Measure costs (auto policy)", w.measure_costs)
    act(m, "Diagnose", w.diagnose, "Ctrl+Shift+D")
    act(m, "Next prompt", lambda: w.step_prompt(1), "Ctrl+Right")
    act(m, "Previous prompt", lambda: w.step_prompt(-1), "Ctrl+Left")
    m.addSeparator()
    speeds = m.addMenu("Replay speed")
    group = QActionGroup(w)
    for name in SPEEDS:
        a = speeds.addAction(name)
        a.setCheckable(True)
        a.setChecked(name == w.playlist.speed)
        a.triggered.connect(lambda _checked=False, name=name: setattr(w.playlist, "speed", name))
        group.addAction(a)
    m = w.menuBar().addMenu("&View")
    act(m, "Presentation mode", w.presenter.toggle, "F11")
    m.addSeparator()
    for i, (text, tab) in enumerate(TABS, start=1):
        act(m, text, lambda tab=tab: w.show_tab(tab), f"Ctrl+{i}")
    m = w.menuBar().addMenu("&Help")
    about = act(m, "About DSpark Studio", w.show_about)
    about.setMenuRole(QAction.AboutRole)  # on a Mac, in the application menu where About belongs
