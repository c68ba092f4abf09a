"""Draft rows: one row per round, one cell per drafted token, coloured by what the target
made of it (accepted / rejected / verified after a rejection / not verified), then the
target's own token (correction or bonus). Newest round at the bottom; hover for details."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter
from PySide6.QtWidgets import QLabel, QScrollArea, QToolTip, QVBoxLayout, QWidget

from ..session import View
from ..theme import NORMAL, Theme

STATES = ("accepted", "rejected", "discarded", "unverified")
STATE_NAMES = {
    "accepted": "accepted",
    "rejected": "rejected (first mismatch)",
    "discarded": "verified after a rejection: discarded",
    "unverified": "not verified (beyond the verify width)",
}


def cell_state(k: int, accepted: int, width: int) -> str:
    if k < accepted:
        return "accepted"
    if k == accepted and k < width:
        return "rejected"
    if k < width:
        return "discarded"
    return "unverified"


def _show(text: str) -> str:
    return text.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "·") or "∅"


class DraftGrid(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.theme = NORMAL
        self.rounds: list = []
        self.texts: list = []
        self.cols = 0
        self.setMouseTracking(True)
        self._metrics()

    def _metrics(self) -> None:
        f = QFont(self.font())
        f.setPointSize(max(7, self.theme.font_pt - 1))
        self.cell_font = f
        fm = QFontMetrics(f)
        self.row_h = fm.height() + 6
        self.min_cell_w = fm.horizontalAdvance("M") * 4 + 8
        self.cell_w = self.min_cell_w
        self.label_w = fm.horizontalAdvance("0000") + 10
        self.fit_w = getattr(self, "fit_w", 0)

    def fit(self, width: int) -> None:
        """Widen the cells to fill ``width`` (the visible width), within reason."""
        self.fit_w = width
        spare = (width - self.label_w - 4) // max(self.cols + 1, 1)
        self.cell_w = max(self.min_cell_w, min(spare, 3 * self.min_cell_w))

    def set_theme(self, t: Theme) -> None:
        self.theme = t
        self._metrics()
        self._resize()
        self.update()

    def set_rounds(self, rounds: list, texts: list) -> None:
        """Show these rounds (the lists are the run's own; this pane only reads them)."""
        self.rounds, self.texts = rounds, texts
        self.cols = max((len(r.drafted) for r in rounds), default=0)
        self._resize()
        self.update()

    def _resize(self) -> None:
        self.fit(self.fit_w)
        w = self.label_w + (self.cols + 1) * self.cell_w + 4
        self.setMinimumSize(QSize(w, self.row_h * (len(self.rounds) + 1) + 4))

    def sizeHint(self) -> QSize:
        return self.minimumSize()

    def _cell_at(self, x: int, y: int):
        row, col = y // self.row_h - 1, (x - self.label_w) // self.cell_w
        if 0 <= row < len(self.rounds) and x >= self.label_w and 0 <= col <= self.cols:
            return row, col
        return None

    def paintEvent(self, e) -> None:
        t = self.theme
        p = QPainter(self)
        p.fillRect(self.rect(), QColor(t.panel))
        p.setFont(self.cell_font)
        h, w = self.row_h, self.cell_w
        if not self.rounds:
            p.setPen(QColor(t.muted))
            p.drawText(self.rect(), Qt.AlignCenter, "one row per round appears here during a run")
            p.end()
            return
        p.setPen(QColor(t.muted))
        for k in range(self.cols):
            p.drawText(QRect(self.label_w + k * w, 0, w, h), Qt.AlignCenter, f"d{k + 1}")
        p.drawText(QRect(self.label_w + self.cols * w, 0, w, h), Qt.AlignCenter, "target")
        first = max(0, e.rect().top() // h - 1)
        last = min(len(self.rounds), e.rect().bottom() // h + 1)
        colours = {s: QColor(getattr(t, s)) for s in STATES}
        colours["correction"], colours["bonus"] = QColor(t.correction), QColor(t.bonus)
        fg, fg_light = QColor(t.cell_fg), QColor("#ffffff")
        for i in range(first, last):
            r = self.rounds[i]
            y = (i + 1) * h
            p.setPen(QColor(t.muted))
            p.drawText(QRect(0, y, self.label_w - 6, h), Qt.AlignRight | Qt.AlignVCenter, str(r.index))
            texts = self.texts[i] if i < len(self.texts) else ()
            for k in range(len(r.drafted)):
                state = cell_state(k, r.accepted, r.verify_width)
                box = QRect(self.label_w + k * w + 1, y + 1, w - 2, h - 2)
                p.fillRect(box, colours[state])
                p.setPen(fg_light if state == "rejected" else fg)
                label = _show(texts[k]) if k < len(texts) else str(r.drafted[k])
                p.drawText(box.adjusted(3, 0, -3, 0), Qt.AlignVCenter | Qt.AlignLeft, label)
            last_tok = r.committed[-1] if r.committed else None
            if last_tok is not None:
                src = getattr(last_tok.source, "value", last_tok.source)
                box = QRect(self.label_w + self.cols * w + 1, y + 1, w - 2, h - 2)
                p.fillRect(box, colours.get(src, QColor(t.unverified)))
                p.setPen(fg)
                p.drawText(box.adjusted(3, 0, -3, 0), Qt.AlignVCenter | Qt.AlignLeft, _show(last_tok.text))
        p.end()

    def mouseMoveEvent(self, e) -> None:
        hit = self._cell_at(int(e.position().x()), int(e.position().y()))
        if hit is None:
            QToolTip.hideText()
            return
        row, col = hit
        r = self.rounds[row]
        if col < len(r.drafted):
            state = cell_state(col, r.accepted, r.verify_width)
            tip = f"round {r.index}, draft {col + 1}: token {r.drafted[col]}\n{STATE_NAMES[state]}"
            if col < len(r.draft_probs):
                tip += f"\ndraft probability q = {r.draft_probs[col]:.3f}"
            if r.confidences is not None and col < len(r.confidences):
                tip += f"\nconfidence c = {r.confidences[col]:.3f}"
        elif r.committed:
            tok = r.committed[-1]
            tip = f"round {r.index}: target's token {tok.id} ({getattr(tok.source, 'value', tok.source)}), p = {tok.target_prob:.3f}"
        else:
            return
        tip += f"\nverified {r.verify_width} of {len(r.drafted)}, accepted {r.accepted}"
        QToolTip.showText(e.globalPosition().toPoint(), tip, self)


class DraftPane(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.legend = QLabel()
        self.legend.setObjectName("caption")
        self.grid = DraftGrid()
        self.scroll = QScrollArea()
        self.scroll.setWidget(self.grid)
        self.scroll.setWidgetResizable(False)
        lay.addWidget(self.legend)
        lay.addWidget(self.scroll, 1)
        self.follow = True  # keep the newest round in view until the person scrolls up
        bar = self.scroll.verticalScrollBar()
        bar.rangeChanged.connect(self._range_changed)
        bar.valueChanged.connect(self._value_changed)
        self.set_theme(NORMAL)

    def _range_changed(self, _lo: int, hi: int) -> None:
        if self.follow:
            self.scroll.verticalScrollBar().setValue(hi)

    def _value_changed(self, value: int) -> None:
        self.follow = value >= self.scroll.verticalScrollBar().maximum() - 4

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        self.set_rounds(self.grid.rounds, self.grid.texts)

    def set_theme(self, t: Theme) -> None:
        self.grid.set_theme(t)

        def chip(colour: str, name: str, fg: str) -> str:
            return f'<span style="background:{colour}; color:{fg}">&nbsp;{name}&nbsp;</span>'

        self.legend.setText("Draft rows &nbsp; " + " ".join([
            chip(t.accepted, "accepted", t.cell_fg), chip(t.rejected, "rejected", "#ffffff"),
            chip(t.discarded, "after rejection", t.cell_fg), chip(t.unverified, "not verified", t.cell_fg),
        ]))
        self.legend.setToolTip("One row per round: the drafted tokens d1..dG and the target's own token.\n"
                               "Cells beyond the verify width were drafted but not sent to the target.")

    def plots(self) -> dict:
        return {"draft_rows": self}

    def show_view(self, view: View) -> None:
        spec = view.spec
        self.set_rounds(spec.rounds if spec else [], spec.drafted_text if spec else [])

    def set_rounds(self, rounds: list, texts: list) -> None:
        if not rounds:
            self.follow = True
        self.grid.fit_w = self.scroll.viewport().width() - self.scroll.verticalScrollBar().sizeHint().width()
        self.grid.set_rounds(rounds, texts)
        view = self.scroll.viewport().size()
        need = self.grid.minimumSize()
        self.grid.resize(max(need.width(), view.width()), max(need.height(), view.height()))
