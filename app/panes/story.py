"""The rejection inspector's panel under the text and the draft rows (the whole width of the Run
tab, so its lines stay few at presentation size): the story of the cell the person chose
(``app.state.inspector.Story``): the drafted token and the drafter's probability for it, what became
of it and why, its rank in the target's distribution, and the target's five best tokens with
their probabilities, the drafted one marked. Rich text in the theme's colours and type size, so
it reads at presentation scale; a close button (also Esc on the draft rows) hides it."""

from __future__ import annotations

from html import escape

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton

from ..state.inspector import Story, prob
from .theme import NORMAL, Theme

#: Where each state's word takes its colour in the theme (the draft grid's cell colours).
STATE_COLOURS = {
    "accepted": "accepted",
    "rejected": "rejected",
    "discarded": "discarded",
    "unverified": "unverified",
    "correction": "correction",
    "bonus": "bonus",
    "target": "unverified",
}
#: Characters of a token's text shown in the top-5 table before "…".
TOKEN_CHARS = 14


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _token(text: str) -> str:
    short = text if len(text) <= TOKEN_CHARS else text[: TOKEN_CHARS - 1] + "…"
    return f"“{escape(short)}”"


def rank_words(s: Story) -> str:
    if s.rank is None:
        return ""
    if s.rank == 0:
        return "rank 0: the target's own choice"
    return f"rank {s.rank}: the target's {ordinal(s.rank + 1)} choice" + (" (a tie)" if s.tie else "")


def story_html(s: Story, t: Theme) -> str:
    """The panel's text for one story (also what a test reads)."""
    colour = getattr(t, STATE_COLOURS.get(s.state, "unverified"))
    fg = "#ffffff" if s.state == "rejected" else t.cell_fg
    chip = f'<span style="background:{colour}; color:{fg}">&nbsp;{escape(s.verdict)}&nbsp;</span>'
    where = f"round {s.round}, draft {s.draft}" if s.draft else f"round {s.round}, the target's token"
    head = f"<b>{where}</b> &nbsp; {_token(s.text)} &nbsp;{chip}&nbsp; {escape(s.why)}"
    facts = [
        f"drafter's q {prob(s.q)}" if s.draft else None,
        f"target's p {prob(s.p)}" if s.p is not None else None,
        escape(rank_words(s)) or None,
        f"position {s.position:,}",
    ]
    lines = [head, f'<span style="color:{t.muted}">' + " · ".join(f for f in facts if f) + "</span>"]
    if s.top:
        entries = []
        for i, (tok, text, p) in enumerate(s.top):
            mine = s.draft and tok == s.token
            # an entry never wraps inside itself (&nbsp;), the list wraps between entries; the
            # drafted one says so in words as well as in its state's colour
            entry = f"{i + 1}.&nbsp;{_token(text)}&nbsp;<b>{prob(p)}</b>" + ("&nbsp;(drafted)" if mine else "")
            entries.append(
                f'<span style="background:{colour}; color:{fg}">&nbsp;{entry}&nbsp;</span>' if mine else entry
            )
        lines.append(
            f'<span style="color:{t.muted}">target\'s top {len(s.top)}:</span> &nbsp;' + " &nbsp; ".join(entries)
        )
    elif s.draft and s.state in ("accepted", "rejected", "discarded"):
        lines.append(
            f'<span style="color:{t.muted}">the target\'s best tokens were not recorded for this run '
            "(saved before the rejection inspector)</span>"
        )
    return "<br>".join(lines)


class StoryPanel(QFrame):
    """The chosen cell's story; hidden until a cell is chosen."""

    closed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("story")
        self.theme = NORMAL
        self.story: Story | None = None
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.RichText)
        self.label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.close_button = QToolButton()
        self.close_button.setText("×")
        self.close_button.setToolTip("Close the story (Esc on the draft rows)")
        self.close_button.setAccessibleName("close the cell's story")
        self.close_button.clicked.connect(self.closed)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 4, 4, 4)
        lay.addWidget(self.label, 1)
        lay.addWidget(self.close_button, 0, Qt.AlignTop)
        self.hide()

    def set_theme(self, t: Theme) -> None:
        self.theme = t
        self.setStyleSheet(
            f"QFrame#story {{ background: {t.panel}; border: 1px solid {t.grid}; "
            f"border-top: 2px solid {t.accent}; }} QToolButton {{ color: {t.fg}; "
            f"background: {t.panel}; border: 1px solid {t.grid}; padding: 0 6px; }}"
        )
        self.show_story(self.story)

    def show_story(self, s: Story | None) -> None:
        self.story = s
        self.label.setText(story_html(s, self.theme) if s is not None else "")
        self.setVisible(s is not None)
