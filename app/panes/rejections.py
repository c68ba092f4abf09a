"""The Rejections tab (the rejection inspector's two views, issue #25): acceptance by context
length (the rounds bucketed by where in the sequence they drafted, each bar with its count of
rounds) and what a drafter gets wrong (its most frequent rejected drafted -> target token pairs,
with counts and the tokens' text). One colour per drafter, as on the other tabs: the Run tab's
run, or after a comparison every drafter of it. The data is ``app.state.inspector``'s, from
``dspark.metrics``; it is kept on the pane (``context``, ``wrong``) for the CSV export."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtWidgets import QHBoxLayout, QWidget

from ..state.inspector import bucket_name, context_view, drafter_names, drafter_runs, visible, wrong_view
from ..state.session import View
from .plots import IntegerAxis, PlotBox, fit_title, make_plot, style_plot, zero_based_range
from .theme import NORMAL, Theme, drafter_colours

TIP_CONTEXT = (
    "Acceptance by context length: the rounds that drafted, bucketed by their anchor's position\n"
    "(tokens before it in the sequence: the prompt's and the output's); each bar is the bucket's\n"
    "accepted drafts ÷ verified drafts, its number the rounds in it (dspark.metrics.by_context).\n"
    "Buckets are equal steps up to the furthest position reached (dspark.metrics.context_edges)."
)
TIP_WRONG = (
    "What it gets wrong: at each round's first rejected draft, the drafted token and the token the\n"
    "target committed there instead (its correction); the most frequent pairs, with how many\n"
    "rounds each (dspark.metrics.rejections: the share is over the rounds that rejected a draft)."
)
#: Characters of a token's text on the pairs' axis; a longer one keeps its start and its end
#: ("·Increme…Encoder", "·Increme…Decoder": code's tokens often differ only at the end).
PAIR_CHARS = 16


def pair_name(p: dict) -> str:
    """A (drafted -> target) pair as the axis shows it, whitespace visible."""

    def short(text: str) -> str:
        text = visible(text)
        head = PAIR_CHARS // 2
        return text if len(text) <= PAIR_CHARS else f"{text[:head]}…{text[-(PAIR_CHARS - head - 1) :]}"

    return f"“{short(p['drafted_text'])}” → “{short(p['target_text'])}”"


class RejectionsPane(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.theme = NORMAL
        self.context: tuple[tuple[int, ...], dict[str, list[dict]]] = ((), {})  # (edges, label -> buckets)
        self.wrong: tuple[list, dict[str, list[dict]]] = ([], {})  # (pairs shown, label -> its counts of them)
        self.colours: dict[str, str] = {}  # label -> its drafter's colour, in the theme drawn last
        self.names: dict[str, str] = {}  # label -> its drafter's name, which picks its colour
        self.order: tuple[str, ...] = ()  # the session's (View.colour_order)
        self._computed = self._drawn = None  # what the data and the plots are of
        self.by_context = make_plot(
            "Acceptance by context length", "acceptance", "tokens before the drafted position (bar label: rounds)"
        )
        self.by_context.setToolTip(TIP_CONTEXT)
        self.pairs = pg.PlotWidget(axisItems={"left": pg.AxisItem("left"), "bottom": IntegerAxis("bottom")})
        self.pairs.setMenuEnabled(False)
        self.pairs.setMouseEnabled(x=False, y=False)
        self.pairs.hideButtons()
        self.pairs.setProperty("titles", ("What it gets wrong", "drafted → target", "rounds"))
        self.pairs.getAxis("bottom").enableAutoSIPrefix(False)
        self.pairs.setToolTip(TIP_WRONG)
        self.boxes = {
            "context": PlotBox(self.by_context, "acceptance by where in the sequence it drafted, after a run"),
            "wrong": PlotBox(self.pairs, "the drafter's most frequent rejected tokens, after a run"),
        }
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        for box in self.boxes.values():
            lay.addWidget(box, 1)
        self.set_theme(NORMAL)

    def plots(self) -> dict[str, pg.PlotWidget]:
        return {"acceptance_by_context": self.by_context, "what_it_gets_wrong": self.pairs}

    def set_theme(self, t: Theme) -> None:
        self.theme = t
        for w in self.plots().values():
            style_plot(w, t)
        self._drawn = None

    def show_view(self, view: View) -> None:
        """The views of the last job: its run, or every drafter of its comparison. Drawn only on
        screen (a run's rounds arrive 25 times a second), computed whenever they changed."""
        groups = drafter_runs(view.runs, view.kind, view.speculative)
        key = tuple((label, tuple((r.serial, len(r.rounds)) for r in rs)) for label, rs in groups.items())
        if key != self._computed:
            self._computed = key
            self.context, self.wrong = context_view(groups), wrong_view(groups)
            self.names = drafter_names(groups)
        if not self.isVisible() or (key, self.theme, view.colour_order) == self._drawn:
            return
        self._drawn = (key, self.theme, view.colour_order)
        # in the theme drawn in: computed with the data, presentation mode's colours outlived it
        colours = drafter_colours(self.theme, list(dict.fromkeys(self.names.values())), order=view.colour_order)
        self.colours = {label: colours[name] for label, name in self.names.items()}
        self._draw_context()
        self._draw_pairs()

    def _draw_context(self) -> None:
        t, w = self.theme, self.by_context
        w.clear()
        edges, groups = self.context
        buckets = sorted({(b["from"], b["to"] or 0) for bs in groups.values() for b in bs})
        place = {b: i for i, b in enumerate(buckets)}
        n = max(len(groups), 1)
        width = 0.8 / n
        f = w.font()
        f.setPointSize(max(7, t.font_pt - 1))
        for j, (label, bs) in enumerate(groups.items()):
            colour = self.colours[label]
            for b in bs:
                if b["acceptance_rate"] is None:
                    continue
                x = place[(b["from"], b["to"] or 0)] - 0.4 + width * (j + 0.5)
                w.addItem(
                    pg.BarGraphItem(
                        x=[x],
                        height=[b["acceptance_rate"]],
                        width=width * 0.92,
                        brush=colour,
                        pen=pg.mkPen(t.fg, width=0.5),
                    )
                )
                text = pg.TextItem(f"{b['rounds']}", color=t.fg, anchor=(0.5, 1.0))
                text.setFont(f)
                text.setPos(x, b["acceptance_rate"])
                w.addItem(text)
        names = {(b["from"], b["to"] or 0): bucket_name(b) for bs in groups.values() for b in bs}
        w.getAxis("bottom").setTicks([[(i, names[b]) for b, i in place.items()], []])
        self.boxes["context"].set_empty(not buckets)
        if buckets:
            w.setXRange(-0.6, len(buckets) - 0.4, padding=0)
            zero_based_range(w, 1.0, grow=1.12)  # room above a full bar for its count
            w.getAxis("left").setTicks([[(v / 5, f"{v / 5:.1f}") for v in range(6)], []])  # no tick past 1
        fit_title(
            w, t, "Acceptance by context length", [(self.colours[k], k, "solid") for k in groups] if n > 1 else []
        )

    def _draw_pairs(self) -> None:
        t, w = self.theme, self.pairs
        w.clear()
        order, groups = self.wrong  # the most frequent over every drafter first
        names = {(p["drafted"], p["target"]): pair_name(p) for pairs in groups.values() for p in pairs}
        n, top = max(len(groups), 1), max((p["count"] for ps in groups.values() for p in ps), default=1)
        height = 0.8 / n
        f = w.font()
        f.setPointSize(max(7, t.font_pt - 1))
        for j, (label, pairs) in enumerate(groups.items()):
            mine = {(p["drafted"], p["target"]): p["count"] for p in pairs}
            for i, k in enumerate(order):
                if k not in mine:
                    continue
                y = len(order) - 1 - i + 0.4 - height * (j + 0.5)  # the most frequent on top
                w.addItem(
                    pg.BarGraphItem(
                        x0=[0],
                        y=[y],
                        height=height * 0.92,
                        width=[mine[k]],
                        brush=self.colours[label],
                        pen=pg.mkPen(t.fg, width=0.5),
                    )
                )
                text = pg.TextItem(f" {mine[k]}", color=t.fg, anchor=(0.0, 0.5))
                text.setFont(f)
                text.setPos(mine[k], y)
                w.addItem(text)
        w.getAxis("left").setTicks([[(len(order) - 1 - i, names[k]) for i, k in enumerate(order)], []])
        self.boxes["wrong"].set_empty(not order)
        if order:
            w.setYRange(-0.6, len(order) - 0.4, padding=0)
            w.setXRange(0, top * 1.2, padding=0)
        keys = [(self.colours[k], k, "solid") for k in groups] if n > 1 else []
        fit_title(w, t, "What it gets wrong", keys)
