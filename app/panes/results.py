"""The right-hand side of the window: the message bar, the prompt line, the header strip and
the tabs (Run: text, draft rows, plots; Compare: the comparison; Rejections: the rejection
inspector's views); once a diagnosis is asked for, its findings beside the plots of the first
two. It draws one ``View`` on all of them, and says which tab and which comparison row the person picked."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QSplitter, QTabWidget, QVBoxLayout, QWidget

from ..state.messages import Progress
from ..state.session import COMPARE_TAB, REJECTIONS_TAB, RUN_TAB, View
from .compare import CompareView
from .diagnosis import DiagnosisPane
from .draft_grid import DraftPane
from .header import HeaderStrip
from .plots import PlotsPane
from .rejections import RejectionsPane
from .story import StoryPanel
from .text_view import TextPane
from .theme import Theme

#: The share of the Run tab's height the plots' row takes once a diagnosis is shown beside them
#: (a person may drag it after; it was about 40% before).
DIAGNOSIS_SHARE = 55
#: The share of that row's width the diagnosis takes: at 40% the three plots beside it wrapped
#: their titles to three lines and cut an axis label at 1280x800.
DIAGNOSIS_WIDTH = 36
#: The share of the Run tab's height the plots take while presenting.
PRESENTED_PLOTS = 50


class ResultsPanel(QWidget):
    tab_chosen = Signal(str)  # RUN_TAB, COMPARE_TAB or REJECTIONS_TAB, by the person
    focus_chosen = Signal(str)  # a comparison row's drafter, by the person

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("panel")
        self.presenting = False
        self.normal_split: list[int] = []  # the Run tab's heights before presenting, given back after
        self.message = QLabel()
        self.message.setObjectName("message")
        self.message.setWordWrap(True)
        self.message.hide()
        self.prompt_label = QLabel()
        self.prompt_label.setObjectName("prompt")
        self.prompt_label.setWordWrap(True)
        self.prompt_label.hide()
        self.header = HeaderStrip()
        self.progress = TaskProgress()
        self.text = TextPane()
        self.drafts = DraftPane()
        self.plots = PlotsPane()
        self.compare = CompareView()
        self.compare.focus_chosen.connect(self.focus_chosen)
        self.rejections = RejectionsPane()
        self.diagnosis = DiagnosisPane()  # Run ▸ Diagnose's findings, beside the Run tab's plots
        self.compare_diagnosis = DiagnosisPane(beside="compare")  # the same, beside the Compare tab's plots
        self.compare.beside_plots(self.compare_diagnosis)
        self.story = StoryPanel()  # a draft-rows cell's story, the whole width of the Run tab under the rows
        self.drafts.told.connect(self.story.show_story)
        self.story.closed.connect(self.drafts.clear_cell)
        self.panes = [
            self.header,
            self.text,
            self.drafts,
            self.plots,
            self.compare,
            self.rejections,
            self.diagnosis,
            self.compare_diagnosis,
        ]
        self.run_split = self._run_tab()
        self.tabs = QTabWidget()
        self.tabs.addTab(self.run_split, "Run")
        self.tabs.addTab(self.compare, "Compare")
        self.tabs.addTab(self.rejections, "Rejections")
        self.tabs.setTabToolTip(
            2,
            "The rejection inspector: acceptance by context length and what the drafter gets "
            "wrong,\nfor the last run or every drafter of the last comparison",
        )
        self.tab_widgets = {RUN_TAB: self.run_split, COMPARE_TAB: self.compare, REJECTIONS_TAB: self.rejections}
        self.bare_tabs: set[str] = set()  # tabs of add_tab: no header above them
        self.tabs.currentChanged.connect(self._tab_changed)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        for w in (self.message, self.prompt_label, self.header, self.progress):
            lay.addWidget(w)
        lay.addWidget(self.tabs, 1)

    def _run_tab(self) -> QSplitter:
        """The text beside the draft rows, a chosen cell's story under both (the whole width, as
        tall as its lines: at presentation size it never cuts them), the plots below, the
        diagnosis (hidden until one is asked for) beside them."""
        top = QSplitter(Qt.Horizontal)
        top.addWidget(self.text)
        top.addWidget(self.drafts)
        top.setSizes([520, 420])
        above = QWidget()
        stack = QVBoxLayout(above)
        stack.setContentsMargins(0, 0, 0, 0)
        stack.addWidget(top, 1)
        stack.addWidget(self.story)
        below = QSplitter(Qt.Horizontal)  # the plots keep the width their titles and ticks need
        below.addWidget(self.plots)
        below.addWidget(self.diagnosis)
        below.setStretchFactor(0, 100 - DIAGNOSIS_WIDTH)
        below.setStretchFactor(1, DIAGNOSIS_WIDTH)
        below.setSizes([1000 - 10 * DIAGNOSIS_WIDTH, 10 * DIAGNOSIS_WIDTH])
        self.below_split = below
        split = QSplitter(Qt.Vertical)
        split.addWidget(above)
        split.addWidget(below)
        split.setSizes([430, 300])
        return split

    def _tab_changed(self, _index: int) -> None:
        self.tab_chosen.emit(next(k for k, w in self.tab_widgets.items() if w is self.tabs.currentWidget()))

    def add_tab(self, key: str, widget: QWidget, title: str, tip: str = "") -> None:
        """A tab of its own (the Train tab), shown when the session's tab is ``key``; the header
        and the prompt line describe runs, so they are hidden on it."""
        self.tab_widgets[key] = widget
        self.bare_tabs.add(key)
        self.tabs.setTabToolTip(self.tabs.addTab(widget, title), tip)

    def show_view(self, view: View) -> None:
        self.header.setVisible(view.tab not in self.bare_tabs)
        self.tabs.blockSignals(True)
        self.tabs.setCurrentWidget(self.tab_widgets.get(view.tab, self.run_split))
        self.tabs.blockSignals(False)
        self.message.setText(view.message)
        self.message.setVisible(bool(view.message))
        self.prompt_label.setText(view.caption)
        self.prompt_label.setVisible(
            bool(view.caption)
            and view.tab not in self.bare_tabs
            and (self.presenting or (view.tab == COMPARE_TAB and view.bench is not None))
        )
        self.progress.show_progress(view.progress)
        hidden = self.diagnosis.isHidden()
        for pane in self.panes:
            pane.show_view(view)
        if hidden and not self.diagnosis.isHidden():  # a diagnosis appeared: its sentences need the height
            total = sum(self.run_split.sizes())
            self.run_split.setSizes([total - total * DIAGNOSIS_SHARE // 100, total * DIAGNOSIS_SHARE // 100])
            wide = sum(self.below_split.sizes())
            self.below_split.setSizes([wide - wide * DIAGNOSIS_WIDTH // 100, wide * DIAGNOSIS_WIDTH // 100])

    def set_theme(self, t: Theme) -> None:
        for pane in self.panes:
            pane.set_theme(t)
        self.story.set_theme(t)

    def set_presenting(self, on: bool) -> None:
        """The prompt shown large above a compact header (first-token time and memory left out),
        and the plots as tall as the text and the draft rows: at presentation type their axes and
        titles left ~200 px of plot at 1920x1080."""
        if on != self.presenting:
            total = sum(self.run_split.sizes()) or 730  # a splitter not laid out yet: its first heights' sum
            if on:
                self.normal_split = self.run_split.sizes() if sum(self.run_split.sizes()) else [430, 300]
                self.run_split.setSizes([total - total * PRESENTED_PLOTS // 100, total * PRESENTED_PLOTS // 100])
            elif self.normal_split:
                self.run_split.setSizes(self.normal_split)
        self.presenting = on
        self.header.set_compact(on)

    def inspect_cell(self, cell: str) -> bool:
        """Choose a draft-rows cell as a click would: "rejected" (the newest round's rejected
        draft) or "ROUND:K" (draft K of round ROUND, K = 0 the target's token; a negative ROUND
        counts from the newest). False when there is no such cell."""
        if cell == "rejected":
            return self.drafts.choose_rejected()
        row, k = (int(x) for x in cell.split(":"))
        return self.drafts.choose_cell(row, k - 1 if k else 10**6)

    def plot_widgets(self) -> dict[str, QWidget]:
        """Every pane's widgets worth saving as PNG, by file name."""
        out = {}
        for pane in self.panes:
            out.update(pane.plots())
        return out


class TaskProgress(QWidget):
    """A long task's bar (measuring costs takes half a minute): what it does now, how far it is
    and about how long is left, counting down between the worker's messages."""

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 2, 0, 2)
        self.label = QLabel()
        self.label.setObjectName("caption")
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        lay.addWidget(self.label, 1)
        lay.addWidget(self.bar, 1)
        self.shown: Progress | None = None
        self.started = self.deadline = 0.0
        self.timer = QTimer(self)
        self.timer.setInterval(500)
        self.timer.timeout.connect(self._tick)
        self.hide()

    def show_progress(self, p: Progress | None) -> None:
        if p is None:
            self.shown = None
            self.timer.stop()
            self.hide()
            return
        if p is not self.shown:
            now = time.monotonic()
            if self.shown is None:
                self.started = now
            self.shown = p
            self.deadline = now + p.seconds_left if p.seconds_left is not None else 0.0
            self.timer.start()
            self.show()
            self._tick()

    def _tick(self) -> None:
        p, now = self.shown, time.monotonic()
        if p is None:
            return
        spent = now - self.started
        text = f"{p.task}: {p.now} ({p.done + 1} of {p.total})" if p.now else p.task
        moving = bool(self.deadline or p.done)  # nothing done and no estimate: a bar that only says it is busy
        self.bar.setRange(0, 1000 if moving else 0)
        if self.deadline:
            left = max(1.0, self.deadline - now)
            self.bar.setValue(int(1000 * spent / (spent + left)))
            self.label.setText(f"{text} · about {left:.0f} s left")
        else:
            self.bar.setValue(int(1000 * p.done / max(p.total, 1)))
            self.label.setText(f"{text} · {spent:.0f} s so far")
