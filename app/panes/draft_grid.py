"""Draft rows: one row per round, one cell per drafted token, coloured by what the target
made of it (accepted / rejected / verified after a rejection / not verified), then the
target's own token (correction or bonus). Newest round at the bottom; hover for details.

The columns always fit the visible width (cells share it, and a token too long for its cell
ends in "…"), so the target column is never behind a scrollbar, and the column header stays
put above the rows while they scroll."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QToolTip, QVBoxLayout, QWidget

from ..session import View
from ..theme import NORMAL, Theme

STATES = ("accepted", "rejected", "discarded", "unverified")
STATE_NAMES = {
    "accepted": "accepted",
    "rejected": "rejected (first mismatch)",
    "discarded": "verified after a rejection: discarded",
    "unverified": "not verified (beyond the verify width)",
}
GLYPHS = (("·", "space"), ("⏎", "newline"), ("⇥", "tab"), ("∅", "empty piece"))


def cell_state(k: int, accepted: int, width: int) -> str:
    if k < accepted:
        return "accepted"
    if k == accepted and k < width:
        return "rejected"
    if k < width:
        return "discarded"
    return "unverified"


def _show(text: str) -> str:
    """A token's text with its whitespace visible (the legend names the glyphs)."""
    return text.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "·") or "∅"


class DraftGrid(QWidget):
    """The rows (the header is ``DraftHeader``). Its width is whatever the scroll area's
    viewport gives it; the columns divide that."""

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
        self.fm = fm
        self.row_h = fm.height() + 6
        self.min_cell_w = fm.horizontalAdvance("M…") + 8  # a letter and the ellipsis
        self.max_cell_w = fm.horizontalAdvance("M") * 12 + 8
        self.label_w = fm.horizontalAdvance("0000") + 10

    @property
    def cell_w(self) -> int:
        spare = (self.width() - self.label_w - 4) // max(self.cols + 1, 1)
        return max(self.min_cell_w, min(spare, self.max_cell_w))

    def set_theme(self, t: Theme) -> None:
        self.theme = t
        self._metrics()
        self.updateGeometry()
        self.update()

    def set_rounds(self, rounds: list, texts: list) -> None:
        """Show these rounds (the lists are the run's own; this pane only reads them)."""
        self.rounds, self.texts = rounds, texts
        self.cols = max((len(r.drafted) for r in rounds), default=0)
        self.updateGeometry()
        self.update()

    def minimumSizeHint(self) -> QSize:
        return QSize(self.label_w + (self.cols + 1) * self.min_cell_w + 4, self.row_h * len(self.rounds) + 4)

    def sizeHint(self) -> QSize:
        return self.minimumSizeHint()

    def cell_text(self, row: int, col: int) -> str:
        """What cell (row, col) shows, whitespace made visible, before eliding."""
        r = self.rounds[row]
        if col < len(r.drafted):
            texts = self.texts[row] if row < len(self.texts) else ()
            return _show(texts[col]) if col < len(texts) else f"#{r.drafted[col]}"
        return _show(r.committed[-1].text) if r.committed else ""

    def shown_text(self, row: int, col: int) -> str:
        """What fits in the cell: the text, or its start and "…"."""
        return self.fm.elidedText(self.cell_text(row, col), Qt.ElideRight, self.cell_w - 8)

    def _cell_at(self, x: int, y: int):
        row, col = y // self.row_h, (x - self.label_w) // self.cell_w
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
            p.drawText(self.rect(), Qt.AlignCenter | Qt.TextWordWrap, "one row per round appears here during a run")
            p.end()
            return
        first = max(0, e.rect().top() // h)
        last = min(len(self.rounds), e.rect().bottom() // h + 1)
        colours = {s: QColor(getattr(t, s)) for s in STATES}
        colours["correction"], colours["bonus"] = QColor(t.correction), QColor(t.bonus)
        fg, fg_light = QColor(t.cell_fg), QColor("#ffffff")
        for i in range(first, last):
            r = self.rounds[i]
            y = i * h
            p.setPen(QColor(t.muted))
            p.drawText(QRect(0, y, self.label_w - 6, h), Qt.AlignRight | Qt.AlignVCenter, str(r.index))
            for k in range(len(r.drafted)):
                state = cell_state(k, r.accepted, r.verify_width)
                box = QRect(self.label_w + k * w + 1, y + 1, w - 2, h - 2)
                p.fillRect(box, colours[state])
                p.setPen(fg_light if state == "rejected" else fg)
                p.drawText(box.adjusted(3, 0, -3, 0), Qt.AlignVCenter | Qt.AlignLeft, self.shown_text(i, k))
            last_tok = r.committed[-1] if r.committed else None
            if last_tok is not None:
                src = getattr(last_tok.source, "value", last_tok.source)
                box = QRect(self.label_w + self.cols * w + 1, y + 1, w - 2, h - 2)
                p.fillRect(box, colours.get(src, QColor(t.unverified)))
                p.setPen(fg)
                p.drawText(box.adjusted(3, 0, -3, 0), Qt.AlignVCenter | Qt.AlignLeft, self.shown_text(i, self.cols))
        p.end()

    def tip_at(self, x: int, y: int) -> str:
        """The tooltip of the cell at (x, y): the token's text first ("" outside the cells)."""
        hit = self._cell_at(x, y)
        if hit is None:
            return ""
        row, col = hit
        r = self.rounds[row]
        if col < len(r.drafted):
            state = cell_state(col, r.accepted, r.verify_width)
            tip = f"round {r.index}, draft {col + 1}: “{self.cell_text(row, col)}” (token {r.drafted[col]})\n{STATE_NAMES[state]}"
            if col < len(r.draft_probs):
                tip += f"\ndraft probability q = {r.draft_probs[col]:.3f}"
            if r.confidences is not None and col < len(r.confidences):
                tip += f"\nconfidence c = {r.confidences[col]:.3f}"
        elif r.committed:
            tok = r.committed[-1]
            tip = (f"round {r.index}: the target's token “{_show(tok.text)}” (token {tok.id}, "
                   f"{getattr(tok.source, 'value', tok.source)}), p = {tok.target_prob:.3f}")
        else:
            return ""
        return tip + f"\nverified {r.verify_width} of {len(r.drafted)}, accepted {r.accepted}"

    def mouseMoveEvent(self, e) -> None:
        tip = self.tip_at(int(e.position().x()), int(e.position().y()))
        if tip:
            QToolTip.showText(e.globalPosition().toPoint(), tip, self)
        else:
            QToolTip.hideText()


class DraftHeader(QWidget):
    """The column names above the rows (d1 .. dG, target), drawn with the grid's geometry."""

    def __init__(self, grid: DraftGrid, parent=None):
        super().__init__(parent)
        self.grid = grid

    def sizeHint(self) -> QSize:
        return QSize(0, self.grid.row_h)

    def minimumSizeHint(self) -> QSize:
        return QSize(0, self.grid.row_h)

    def paintEvent(self, _e) -> None:
        g, t = self.grid, self.grid.theme
        if not g.cols:
            return
        p = QPainter(self)
        p.setFont(g.cell_font)
        p.setPen(QColor(t.muted))
        h, w = g.row_h, g.cell_w
        for k in range(g.cols):
            p.drawText(QRect(g.label_w + k * w, 0, w, h), Qt.AlignCenter, f"d{k + 1}")
        p.drawText(QRect(g.label_w + g.cols * w, 0, w, h), Qt.AlignCenter, "target")
        p.end()


class DraftPane(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        self.legend = QLabel()
        self.legend.setObjectName("caption")
        self.legend.setWordWrap(True)
        self.grid = DraftGrid()
        self.header = DraftHeader(self.grid)
        self.scroll = QScrollArea()
        self.scroll.setFrameShape(QFrame.NoFrame)  # the header's columns line up with the rows'
        self.scroll.setWidget(self.grid)
        self.scroll.setWidgetResizable(True)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        lay.addWidget(self.legend)
        lay.addWidget(self.header)
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

    def set_theme(self, t: Theme) -> None:
        self.grid.set_theme(t)
        self.header.updateGeometry()
        self._keep_columns()

        def chip(colour: str, name: str, fg: str) -> str:
            name = name.replace(" ", "&nbsp;")  # a legend wraps between chips, never inside one
            return f'<span style="background:{colour}; color:{fg}">&nbsp;{name}&nbsp;</span>'

        glyphs = " ".join(f"<b>{g}</b>&nbsp;{name.replace(' ', '&nbsp;')}" for g, name in GLYPHS)
        self.legend.setText("Draft rows &nbsp; " + " ".join([
            chip(t.accepted, "accepted", t.cell_fg), chip(t.rejected, "rejected", "#ffffff"),
            chip(t.discarded, "after rejection", t.cell_fg), chip(t.unverified, "not verified", t.cell_fg),
        ]) + f" &nbsp; {glyphs}")
        self.legend.setToolTip("One row per round: the drafted tokens d1..dG and the target's own token.\n"
                               "Cells beyond the verify width were drafted but not sent to the target.\n"
                               "Whitespace is shown as · (space), ⏎ (newline), ⇥ (tab); ∅ is a token with\n"
                               "no text of its own (part of a character); a long token ends in …")

    def plots(self) -> dict:
        return {"draft_rows": self}

    def show_view(self, view: View) -> None:
        spec = view.spec
        self.set_rounds(spec.rounds if spec else [], spec.drafted_text if spec else [])

    def set_rounds(self, rounds: list, texts: list) -> None:
        self.setProperty("empty", not rounds)  # nothing for a PNG export to save
        if not rounds:
            self.follow = True
        self.grid.set_rounds(rounds, texts)
        self.header.update()
        self._keep_columns()

    def _keep_columns(self) -> None:
        """The pane never narrower than its columns at their narrowest (the scroll area would cut
        the target column off rather than ask for the room): a splitter gives it that width."""
        bar = self.scroll.verticalScrollBar().sizeHint().width()
        self.setMinimumWidth(self.grid.minimumSizeHint().width() + bar + 2)
