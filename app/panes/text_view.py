"""Generated text, each token coloured by how it came; hover a token for its round,
position and probability."""

from __future__ import annotations

from html import escape

from PySide6.QtCore import QEvent
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QLabel, QTextEdit, QToolTip, QVBoxLayout, QWidget

from ..state.session import View
from .theme import NORMAL, Theme

#: A prompt line longer than this is drawn with its middle left out (and said so): Qt lays out a
#: paragraph whole, and the replay of a saved run whose prompt was one line of 2 MiB with nowhere
#: to break it still drew after 150 s (8 s now). The saved run and the session keep it whole.
MAX_LINE_CHARS = 4_000
#: Characters shown from each end of such a line.
LINE_END_CHARS = 1_500
#: At most this many characters of a prompt are drawn, its start and end: 4 MiB in 100,000 short
#: lines replayed in 17 s, 8 s with this bound.
MAX_PROMPT_CHARS = 200_000

SOURCE_NAMES = {
    "accepted": "accepted draft",
    "correction": "target's correction",
    "bonus": "bonus (all drafts accepted)",
    "target": "plain decoding",
}


def shown_prompt(prompt: str) -> str:
    """``prompt`` as the text view draws it: each over-long line with its middle left out, then
    a prompt still past :data:`MAX_PROMPT_CHARS` with its middle left out, each gap said in the
    text."""
    lines = prompt.split("\n")
    if any(len(line) > MAX_LINE_CHARS for line in lines):
        prompt = "\n".join(
            line
            if len(line) <= MAX_LINE_CHARS
            else f"{line[:LINE_END_CHARS]} [… {len(line) - 2 * LINE_END_CHARS:,} characters of this line not "
            f"shown here …] {line[-LINE_END_CHARS:]}"
            for line in lines
        )
    if len(prompt) > MAX_PROMPT_CHARS:
        half = MAX_PROMPT_CHARS // 2
        gap = len(prompt) - 2 * half
        prompt = f"{prompt[:half]}\n[… {gap:,} characters of the prompt not shown here …]\n{prompt[-half:]}"
    return prompt


class TokenText(QTextEdit):
    """Appends tokens with a per-token background; tooltips come from the char format."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setReadOnly(True)
        self.setLineWrapMode(QTextEdit.WidgetWidth)
        self.theme = NORMAL
        self.count = 0

    def clear_tokens(self, prompt: str = "") -> None:
        self.clear()
        self.count = 0
        if prompt:
            fmt = QTextCharFormat()
            fmt.setForeground(QColor(self.theme.muted))
            fmt.setToolTip("the prompt")
            self.textCursor().insertText(shown_prompt(prompt), fmt)

    def append_tokens(self, tokens) -> None:
        """``tokens``: CommittedToken objects in order."""
        cur = self.textCursor()
        cur.movePosition(QTextCursor.End)
        t = self.theme
        colours = {"accepted": t.accepted, "correction": t.correction, "bonus": t.bonus}
        # one edit: the document is laid out once for the lot, not after each token (a paragraph
        # with no line break is laid out whole each time: an instant replay of 3,000 rounds took
        # 15 s in insertText, 6,500 rounds 164 s, with the window frozen)
        cur.beginEditBlock()
        for tok in tokens:
            src = getattr(tok.source, "value", tok.source)
            fmt = QTextCharFormat()
            fmt.setForeground(QColor(t.fg))
            if src in colours:
                fmt.setBackground(QColor(colours[src]))
            tip = (
                f"{SOURCE_NAMES.get(src, src)}\nround {tok.round}, position {tok.position}\n"
                f"token {tok.id}  p = {tok.target_prob:.3f}"
            )
            if tok.draft_prob is not None:
                tip += f"  q = {tok.draft_prob:.3f}"
            fmt.setToolTip(tip)
            cur.insertText(tok.text, fmt)
            self.count += 1
        cur.endEditBlock()
        self.setTextCursor(cur)
        self.ensureCursorVisible()

    def tip_at(self, pos) -> str:
        """The tooltip of the token under viewport point ``pos`` ("" if none)."""
        cur = self.cursorForPosition(pos)
        left = self.cursorRect(cur).left()
        if pos.x() >= left and not cur.atEnd():
            cur.movePosition(QTextCursor.NextCharacter)  # charFormat() is the char before the cursor
        return cur.charFormat().toolTip()

    def viewportEvent(self, e) -> bool:
        if e.type() == QEvent.ToolTip:
            tip = self.tip_at(e.pos())
            if tip:
                QToolTip.showText(e.globalPos(), tip, self)
            else:
                QToolTip.hideText()
            return True
        return super().viewportEvent(e)


class TextPane(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.legend = QLabel()
        self.legend.setObjectName("caption")
        self.legend.setWordWrap(True)  # never what makes the window wider than the screen
        self.text = TokenText()
        lay.addWidget(self.legend)
        lay.addWidget(self.text, 1)
        self._serial, self._rounds = None, 0  # the run shown (``Run.serial``), and how many of its rounds
        self.set_theme(NORMAL)

    def plots(self) -> dict:
        return {"text": self}

    def show_view(self, view: View) -> None:
        """Show the speculative run (else plain decoding), appending only its new rounds; another
        run (a replay's keys start again at 1) is drawn from its prompt on."""
        shown = view.speculative if view.speculative is not None else view.plain
        self.setProperty("empty", shown is None)  # nothing for a PNG export to save
        if shown is None or shown.serial != self._serial or len(shown.rounds) < self._rounds:
            self._serial, self._rounds = (shown.serial if shown else None), 0
            self.text.clear_tokens(shown.prompt if shown else "")
        if shown is not None and len(shown.rounds) > self._rounds:
            new = shown.rounds[self._rounds :]
            self.text.append_tokens([t for r in new for t in r.committed])
            self._rounds += len(new)

    def set_theme(self, t: Theme) -> None:
        self.text.theme = t
        self._serial = None  # re-render the text in the new colours

        def chip(colour: str, name: str) -> str:
            name = escape(name).replace(" ", "&nbsp;")  # a legend wraps between chips, never inside one
            return f'<span style="background:{colour}; color:{t.fg}">&nbsp;{name}&nbsp;</span>'

        self.legend.setText(
            "Generated text &nbsp; "
            + " &nbsp;".join(
                [
                    chip(t.accepted, "accepted draft"),
                    chip(t.correction, "correction"),
                    chip(t.bonus, "bonus"),
                    f'<span style="color:{t.fg}">plain&nbsp;=&nbsp;target&nbsp;only</span>',
                ]
            )
        )
        self.legend.setToolTip(
            "accepted draft: a drafted token the target accepted\n"
            "correction: the target's own token where a draft was rejected\n"
            "bonus: the target's token after every verified draft was accepted\n"
            "Hover a token for its round, position and probability."
        )
