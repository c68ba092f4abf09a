"""The diagnosis beside the Run tab's plots (Run ▸ Diagnose): for each drafter diagnosed, what it
ran on and its figures, then its findings, the most severe first, each a severity chip and the
finding's sentence; a drafter with none says so. A severity is told by its word and its mark as
well as its colour (Okabe-Ito vermillion, orange and blue, told apart with colour blindness too),
in the theme's type size, so it reads on a projector. Hidden until a diagnosis is asked for."""

from __future__ import annotations

from html import escape

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout

from ..state.diagnoses import HEALTHY, MARKS, Entry, figures, of_other_prompts, sentence
from ..state.runs import PLAIN_LABEL
from ..state.session import View
from .theme import NORMAL, PRESENTATION, Theme, drafter_colours

#: Each severity's chip, (background, text) per theme: dark text on the light orange, white on the rest.
CHIPS = {
    "normal": {"error": ("#d55e00", "#ffffff"), "warn": ("#e69f00", "#000000"), "info": ("#0072b2", "#ffffff")},
    "presentation": {"error": ("#d55e00", "#ffffff"), "warn": ("#e69f00", "#000000"), "info": ("#56b4e9", "#000000")},
}
TIP = (
    "Run ▸ Diagnose: each ticked drafter (or the selected one) measured on the prompt, or on every prompt\n"
    "of the set, with these settings and every draft verified, then compared with what it should reach\n"
    "(its profile); each cause found is named, the most severe first: ✖ error, ▲ warn, ● info"
)


def chip(t: Theme, severity: str) -> str:
    bg, fg = CHIPS.get(t.name, CHIPS["normal"])[severity]
    return (
        f'<span style="background:{bg}; color:{fg}; font-weight:bold">'
        f"&nbsp;{MARKS[severity]}&nbsp;{severity.upper()}&nbsp;</span>"
    )


def entry_html(e: Entry, t: Theme, colour: str | None, *, busy: bool, first_waiting: bool) -> str:
    """One drafter's part of the list (also what a test reads): its name and figures on one line,
    then its findings."""
    head = (f'<span style="color:{colour}">■</span> ' if colour else "") + f"<b>{escape(e.label)}</b>"
    muted = f'<span style="color:{t.muted}">'
    if e.diagnosis is None:
        state = ("diagnosing …" if first_waiting else "waiting") if busy else (e.ended or "not diagnosed")
        return f"{head} {muted}· {escape(state)}</span>"
    rows = [f"{head} {muted}· {escape(figures(e.diagnosis))}</span>"]
    found = e.findings()
    if not found:
        ok = f'<span style="background:{t.accepted}; color:{t.cell_fg}; font-weight:bold">&nbsp;✔&nbsp;OK&nbsp;</span>'
        rows.append(f"{ok}&nbsp; {escape(HEALTHY)}")
    for f in found:
        rows.append(f"{chip(t, f.severity)}&nbsp; <b>{escape(f.code)}</b>: {escape(sentence(f))}")
    return "<br>".join(rows[:1]) + "".join(f'<p style="margin-top:4px">{r}</p>' for r in rows[1:])


#: Said in the title when the runs beside the list ran on prompts the diagnosis did not.
OTHER_PROMPTS = "diagnosed on other prompts than the runs beside it"


def title_html(view: View, t: Theme, shown: set[str] = frozenset()) -> str:
    """ "Diagnosis" and what it ran with (the same for every drafter of it); presenting, only the
    word (the findings' sentences name what matters), so a finding shows in the room there is.
    ``shown``: the prompts of the runs beside it; when the diagnosis ran on others, it says so."""
    stale = (
        f'<br><span style="color:{t.error}; font-size:{t.font_pt}pt">⚠ {OTHER_PROMPTS}</span>'
        if of_other_prompts(view.diagnoses, shown)
        else ""
    )
    if not view.diagnoses or t.name == PRESENTATION.name:
        return "Diagnosis" + stale
    return (
        f'Diagnosis <span style="color:{t.muted}; font-size:{t.font_pt}pt; font-weight:normal">'
        f"· {escape(view.diagnoses[0].what)}</span>" + stale
    )


def view_html(view: View, t: Theme) -> str:
    """The whole list: one part per drafter, in the order they were diagnosed; with several, each
    drafter's colour of the Compare table beside its name."""
    entries = view.diagnoses
    names = [r["label"] for r in view.rows if r["label"] != PLAIN_LABEL] + [e.label for e in entries]
    colours = drafter_colours(t, list(dict.fromkeys(names)), order=view.colour_order) if len(entries) > 1 else {}
    waiting = next((e for e in entries if e.diagnosis is None), None)
    parts = [entry_html(e, t, colours.get(e.label), busy=view.busy, first_waiting=e is waiting) for e in entries]
    return f'<hr style="color:{t.grid}">'.join(parts)


class DiagnosisPane(QFrame):
    """The list (scrolls when it is longer than the plots are tall); hidden with no diagnosis.
    ``beside``: the runs it stands beside, "run" (the Run tab's) or "compare" (the comparison's)."""

    def __init__(self, parent=None, *, beside: str = "run"):
        super().__init__(parent)
        self.beside = beside
        self.setObjectName("diagnosis")
        self.theme = NORMAL
        self.shown: tuple | None = None
        self.title = QLabel("Diagnosis")
        self.title.setObjectName("headline")
        self.title.setWordWrap(True)
        self.title.setToolTip(TIP)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.RichText)
        self.label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.label.setAlignment(Qt.AlignTop | Qt.AlignLeft)
        self.scroll = QScrollArea()
        self.scroll.setWidget(self.label)
        self.scroll.setWidgetResizable(True)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.scroll.setFrameShape(QFrame.NoFrame)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 4, 4, 4)
        lay.addWidget(self.title)
        lay.addWidget(self.scroll, 1)
        self.set_theme(NORMAL)
        self.hide()

    def set_theme(self, t: Theme) -> None:
        self.theme = t
        self.setStyleSheet(f"QFrame#diagnosis {{ background: {t.panel}; border: 1px solid {t.grid}; }}")
        self.label.setStyleSheet(f"background: {t.panel};")
        self.shown = None

    def show_view(self, view: View) -> None:
        if self.beside == "compare":
            prompts = {r.prompt for r in view.comparison}
        else:
            prompts = {view.speculative.prompt} if view.speculative is not None else set()
        drawn = (
            view.diagnoses,
            view.busy,
            tuple(r["label"] for r in view.rows),
            self.theme,
            view.colour_order,
            prompts,
        )
        if drawn == self.shown:
            return
        self.shown = drawn
        self.setVisible(bool(view.diagnoses))
        self.title.setText(title_html(view, self.theme, prompts))
        self.label.setText(view_html(view, self.theme))

    def plots(self) -> dict:
        return {}
