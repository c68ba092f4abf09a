"""Draft rows: one row per round, one cell per drafted token, coloured by what the target
made of it (accepted / rejected / verified after a rejection / not verified), then the
target's own token (correction or bonus). Newest round at the bottom; hover for details.

Click a cell (or move to it with the arrow keys once the rows have the focus) for its story
(the rejection inspector: ``told`` hands ``app.state.inspector.story`` of it to the panel under the
Run tab's panes, ``app.panes.story``): what the target thought of that drafted token and why it
was kept or not. Esc closes it.

The columns always fit the visible width (cells share it, and a token too long for its cell
ends in "…"), so the target column is never behind a scrollbar, and the column header stays
put above the rows while they scroll."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPen
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QToolTip, QVBoxLayout, QWidget

from ..state.inspector import STATES, cell_state, story, visible
from ..state.session import View
from .theme import FOCUS_PX, NORMAL, Theme

STATE_NAMES = {
    "accepted": "accepted",
    "rejected": "rejected (first mismatch)",
    "discarded": "verified after a rejection: discarded",
    "unverified": "not verified (beyond the verify width)",
}
GLYPHS = (("·", "space"), ("⏎", "newline"), ("⇥", "tab"), ("∅", "empty piece"), ("�", "byte of a character"))
#: What a tokenizer decodes a lone byte token to (one byte of a character several bytes long, as
#: an untrained drafter often proposes): the tooltip says so, where "�" alone reads as a fault.
BYTE_PIECE = "\ufffd"
PLAIN_STEP = "plain step"
#: Arrow keys' moves on the rows: (rows, columns).
MOVES = {
    Qt.Key_Up: (-1, 0),
    Qt.Key_Down: (1, 0),
    Qt.Key_Left: (0, -1),
    Qt.Key_Right: (0, 1),
    Qt.Key_PageUp: (-10, 0),
    Qt.Key_PageDown: (10, 0),
}


class DraftGrid(QWidget):
    """The rows (the header is ``DraftHeader``). Its width is whatever the scroll area's
    viewport gives it; the columns divide that. The chosen cell (a click, or the arrow keys)
    is outlined and said by ``cell_chosen``; Esc says ``cell_cleared``."""

    cell_chosen = Signal(int, int)  # (row, column): column len(drafted) is the target's token
    cell_cleared = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.theme = NORMAL
        self.rounds: list = []
        self.texts: list = []
        self.cols = 0
        self.selected: tuple[int, int] | None = None
        self.setMouseTracking(True)
        self.setFocusPolicy(Qt.StrongFocus)
        self.setAccessibleName("draft rows: arrow keys choose a cell, Esc closes its story")
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
        # the target column is never narrower than its header: at block size 12 the shared
        # width cut "target" to "arge"
        self.min_target_w = fm.horizontalAdvance("target") + 8

    @property
    def cell_w(self) -> int:
        room = self.width() - self.label_w - 4
        spare = room // max(self.cols + 1, 1)
        if spare < self.min_target_w and self.cols:
            spare = (room - self.min_target_w) // self.cols
        return max(self.min_cell_w, min(spare, self.max_cell_w))

    @property
    def target_w(self) -> int:
        return max(self.cell_w, self.min_target_w)

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
        width = self.label_w + self.cols * self.min_cell_w + max(self.min_cell_w, self.min_target_w) + 4
        return QSize(width, self.row_h * len(self.rounds) + 4)

    def sizeHint(self) -> QSize:
        return self.minimumSizeHint()

    def cell_text(self, row: int, col: int) -> str:
        """What cell (row, col) shows, whitespace made visible, before eliding."""
        r = self.rounds[row]
        if col < len(r.drafted):
            texts = self.texts[row] if row < len(self.texts) else ()
            return visible(texts[col]) if col < len(texts) else f"#{r.drafted[col]}"
        return visible(r.committed[-1].text) if r.committed else ""

    def shown_text(self, row: int, col: int) -> str:
        """What fits in the cell: the text, or its start and "…"."""
        width = self.target_w if col >= len(self.rounds[row].drafted) else self.cell_w
        return self.fm.elidedText(self.cell_text(row, col), Qt.ElideRight, width - 8)

    def _cell_at(self, x: int, y: int):
        """(row, column) of the cell at (x, y), the target's token as column len(drafted) (it is
        drawn in the last column); None outside the cells, or past a short round's drafts."""
        row, col = y // self.row_h, min((x - self.label_w) // self.cell_w, self.cols)
        if not (
            0 <= row < len(self.rounds) and self.label_w <= x < self.label_w + self.cols * self.cell_w + self.target_w
        ):
            return None
        drafted = len(self.rounds[row].drafted)
        if col == self.cols:
            return row, drafted
        return (row, col) if col < drafted else None

    def cell_rect(self, row: int, col: int) -> QRect:
        r = self.rounds[row]
        target = col >= len(r.drafted)
        x = self.label_w + (self.cols if target else col) * self.cell_w
        return QRect(x, row * self.row_h, self.target_w if target else self.cell_w, self.row_h)

    def select(self, row: int, col: int) -> None:
        """Choose cell (row, col) (clamped to the grid) and say so."""
        if not self.rounds:
            return
        row = max(0, min(row, len(self.rounds) - 1))
        col = max(0, min(col, len(self.rounds[row].drafted)))
        self.selected = (row, col)
        self.update()
        self.cell_chosen.emit(row, col)

    def clear_selection(self) -> None:
        if self.selected is not None:
            self.selected = None
            self.update()
            self.cell_cleared.emit()

    def mousePressEvent(self, e) -> None:
        hit = self._cell_at(int(e.position().x()), int(e.position().y()))
        if hit is not None:
            self.setFocus(Qt.MouseFocusReason)
            self.select(*hit)
        super().mousePressEvent(e)

    def keyPressEvent(self, e) -> None:
        if e.key() == Qt.Key_Escape and self.selected is not None:
            self.clear_selection()
        elif e.key() in MOVES and self.rounds:
            if self.selected is None:  # the first key: the newest round's first draft
                self.select(len(self.rounds) - 1, 0)
            else:
                (dr, dc), (row, col) = MOVES[e.key()], self.selected
                self.select(row + dr, col + dc)  # clamped: a shorter row's last cell is its target's
        elif e.key() in (Qt.Key_Return, Qt.Key_Enter, Qt.Key_Space) and self.rounds and self.selected is None:
            self.select(len(self.rounds) - 1, 0)
        else:
            super().keyPressEvent(e)

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
            if r.plain_step and self.cols:  # auto decoded this token plainly: no draft, not a round
                p.drawText(QRect(self.label_w + 4, y, self.cols * w - 8, h), Qt.AlignVCenter | Qt.AlignLeft, PLAIN_STEP)
            for k in range(len(r.drafted)):
                state = cell_state(k, r.accepted, r.verify_width)
                box = QRect(self.label_w + k * w + 1, y + 1, w - 2, h - 2)
                p.fillRect(box, colours[state])
                p.setPen(fg_light if state == "rejected" else fg)
                p.drawText(box.adjusted(3, 0, -3, 0), Qt.AlignVCenter | Qt.AlignLeft, self.shown_text(i, k))
            last_tok = r.committed[-1] if r.committed else None
            if last_tok is not None:
                src = getattr(last_tok.source, "value", last_tok.source)
                box = QRect(self.label_w + self.cols * w + 1, y + 1, self.target_w - 2, h - 2)
                p.fillRect(box, colours.get(src, QColor(t.unverified)))
                p.setPen(fg)
                p.drawText(box.adjusted(3, 0, -3, 0), Qt.AlignVCenter | Qt.AlignLeft, self.shown_text(i, self.cols))
        self._paint_choice(p)
        p.end()

    def _paint_choice(self, p: QPainter) -> None:
        """The chosen cell's outline, and the focus frame when the rows have the keys."""
        p.setBrush(Qt.NoBrush)
        if self.selected is not None and self.selected[0] < len(self.rounds):
            p.setPen(QPen(QColor(self.theme.accent), 3))
            p.drawRect(self.cell_rect(*self.selected).adjusted(1, 1, -2, -2))
        if self.hasFocus():  # on the part in view: the rows scroll
            p.setPen(QPen(QColor(self.theme.accent), FOCUS_PX))
            p.drawRect(self.visibleRegion().boundingRect().adjusted(1, 1, -1, -1))

    def focusInEvent(self, e) -> None:
        super().focusInEvent(e)
        self.update()

    def focusOutEvent(self, e) -> None:
        super().focusOutEvent(e)
        self.update()

    def tip_at(self, x: int, y: int) -> str:
        """The tooltip of the cell at (x, y): the token's text first ("" outside the cells)."""
        hit = self._cell_at(x, y)
        row = y // self.row_h
        if hit is None and 0 <= row < len(self.rounds) and self.rounds[row].plain_step and x >= self.label_w:
            return (
                f"step {self.rounds[row].index}: a plain step: auto decoded this token without drafting (not a round)"
            )
        if hit is None:
            return ""
        row, col = hit
        r = self.rounds[row]
        if col < len(r.drafted):
            state = cell_state(col, r.accepted, r.verify_width)
            tip = (
                f"round {r.index}, draft {col + 1}: “{self.cell_text(row, col)}” (token {r.drafted[col]})\n"
                f"{STATE_NAMES[state]}"
            )
            if BYTE_PIECE in self.cell_text(row, col):
                tip += "\n� a byte token: one byte of a character several bytes long, no text of its own"
            if col < len(r.draft_probs):
                tip += f"\ndraft probability q = {r.draft_probs[col]:.3f}"
            if r.confidences is not None and col < len(r.confidences):
                tip += f"\nconfidence c = {r.confidences[col]:.3f}"
        elif r.committed:
            tok = r.committed[-1]
            tip = (
                f"{'step' if r.plain_step else 'round'} {r.index}: the target's token “{visible(tok.text)}” "
                f"(token {tok.id}, {PLAIN_STEP if r.plain_step else getattr(tok.source, 'value', tok.source)}), "
                f"p = {tok.target_prob:.3f}"
            )
        else:
            return ""
        if r.plain_step:
            return tip + "\na plain step: auto decoded this token without drafting (not a round)"
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
        p.drawText(QRect(g.label_w + g.cols * w, 0, g.target_w, h), Qt.AlignCenter, "target")
        p.end()


class DraftPane(QWidget):
    told = Signal(object)  # the chosen cell's story (app.state.inspector.Story), or None when none is chosen

    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        self.legend = QLabel()
        self.legend.setObjectName("caption")
        self.legend.setWordWrap(True)
        self.grid = DraftGrid()
        self.run = None  # the run whose rounds the rows show (its cells' stories are read from it)
        self.grid.cell_chosen.connect(self._tell)
        self.grid.cell_cleared.connect(lambda: self.told.emit(None))
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
        self._legend()

    def _legend(self) -> None:
        """The colours and glyphs; with the counts of rounds and plain steps once auto has
        decoded some tokens plainly (their rows would pass for rounds beside the header's count)."""
        t = self.grid.theme
        steps = sum(r.plain_step for r in self.grid.rounds)
        rounds = len(self.grid.rounds) - steps
        counts = (  # presenting, the "plain step" rows say it: a third line of legend cost three rows
            f" &nbsp; <i>{rounds}&nbsp;round{'s' * (rounds != 1)}, {steps}&nbsp;plain&nbsp;step{'s' * (steps != 1)}"
            "&nbsp;(no&nbsp;draft)</i>"
            if steps and t.name != "presentation"
            else ""
        )

        def chip(colour: str, name: str, fg: str) -> str:
            name = name.replace(" ", "&nbsp;")  # a legend wraps between chips, never inside one
            return f'<span style="background:{colour}; color:{fg}">&nbsp;{name}&nbsp;</span>'

        glyphs = " ".join(f"<b>{g}</b>&nbsp;{name.replace(' ', '&nbsp;')}" for g, name in GLYPHS)
        # presenting, the legend in smaller type: at the room's size it took three lines of rows
        small = f'<span style="font-size:{round(t.font_pt * 0.8)}pt">' if t.name == "presentation" else "<span>"
        self.legend.setText(
            small
            + "Draft rows &nbsp; "
            + " ".join(
                [
                    chip(t.accepted, "accepted", t.cell_fg),
                    chip(t.rejected, "rejected", "#ffffff"),
                    chip(t.discarded, "after rejection", t.cell_fg),
                    chip(t.unverified, "not verified", t.cell_fg),
                ]
            )
            + f" &nbsp; {glyphs}"
            + counts
            + "</span>"
        )
        self.legend.setToolTip(
            "One row per round: the drafted tokens d1..dG and the target's own token.\n"
            "Cells beyond the verify width were drafted but not sent to the target.\n"
            "Whitespace is shown as · (space), ⏎ (newline), ⇥ (tab); ∅ is a token with\n"
            "no text of its own; � is a byte token, one byte of a character several bytes\n"
            "long (its text appears once the bytes after it are committed); a long token ends in …\n"
            "With the auto policy a row reading “plain step” drafted nothing: auto decoded that\n"
            "token plainly (the target's token alone), and it is not one of the rounds the figures count."
        )

    def plots(self) -> dict:
        return {"draft_rows": self}

    def show_view(self, view: View) -> None:
        speculative = view.speculative
        another = speculative is None or self.run is None or speculative.serial != self.run.serial
        if another and self.grid.selected is not None:
            self.grid.selected = None  # another run: its cells tell their own stories
            self.told.emit(None)
        self.run = speculative
        self.set_rounds(speculative.rounds if speculative else [], speculative.drafted_text if speculative else [])

    def _tell(self, row: int, col: int) -> None:
        """A cell was chosen: its story told, and the cell kept in view (once the story's panel
        has taken its room from the rows)."""
        self.follow = False  # the rows stay where the person is looking
        self.told.emit(story(self.run, row, col) if self.run is not None else None)
        QTimer.singleShot(0, lambda: self._keep_in_view(row, col))

    def _keep_in_view(self, row: int, col: int) -> None:
        if self.grid.selected == (row, col):
            box = self.grid.cell_rect(row, col)
            self.scroll.ensureVisible(box.center().x(), box.center().y(), 0, self.grid.row_h)

    def clear_cell(self) -> None:
        """No cell chosen (the story's panel was closed)."""
        self.grid.clear_selection()

    def choose_cell(self, row: int, col: int) -> bool:
        """Choose a cell as a click would (``row``: the round's number on the rows; negative counts
        from the newest; ``col`` past the drafts: the target's token); False when there is none."""
        n = len(self.grid.rounds)
        if not -n <= row < n:
            return False
        self.grid.select(row % n, col)
        return True

    def choose_rejected(self) -> bool:
        """Choose the newest round's rejected draft (``--inspect rejected``); False when no round
        rejected one."""
        for row in range(len(self.grid.rounds) - 1, -1, -1):
            r = self.grid.rounds[row]
            if r.accepted < r.verify_width:
                self.grid.select(row, r.accepted)
                return True
        return False

    def set_rounds(self, rounds: list, texts: list) -> None:
        self.setProperty("empty", not rounds)  # nothing for a PNG export to save
        if not rounds:
            self.follow = True
        steps = sum(r.plain_step for r in self.grid.rounds)
        self.grid.set_rounds(rounds, texts)
        if steps or any(r.plain_step for r in rounds):
            self._legend()
        self.header.update()
        self._keep_columns()

    def _keep_columns(self) -> None:
        """The pane never narrower than its columns at their narrowest (the scroll area would cut
        the target column off rather than ask for the room): a splitter gives it that width."""
        bar = self.scroll.verticalScrollBar().sizeHint().width()
        self.setMinimumWidth(self.grid.minimumSizeHint().width() + bar + 2)
