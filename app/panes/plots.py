"""The live plots: acceptance by position, the accepted-length histogram, decode tokens/sec
over time. Items are made once and updated in place by ``show_view`` (called from the window's
refresh timer, never per token). The numbers come from ``dspark.metrics`` via ``Run``.

Read at a distance: no plot draws axes before it has data (a caption says what will appear),
counts are whole numbers, rates start at 0, seconds are seconds (no SI "x0.001" scaling), and
what each line is stands in the title, never on top of the curves."""

from __future__ import annotations

from functools import partial
from html import escape

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QGridLayout, QLabel, QWidget

from dspark import metrics

from ..state.session import View
from .theme import NORMAL, Theme, drafter_colours

pg.setConfigOptions(antialias=True)

WINDOW_TOKENS = 32  # the moving window of the tokens/sec curves (dspark.metrics.rate_curve)

TIP_POSITION = (
    "Acceptance by position: for draft position k, the share of rounds that verified\n"
    "position k in which drafts 1..k were all accepted.\n"
    "Denominator: rounds whose verify width was at least k (dspark.metrics.per_position_acceptance)."
)
TIP_HIST = (
    "Accepted length: how many rounds accepted 0, 1, 2, ... drafted tokens.\n"
    "tau (mean acceptance length) = committed tokens per round, the target's\n"
    "correction or bonus token included, so a round that accepts nothing counts 1."
)
TIP_TPS = (
    f"Decode tokens/sec over a moving window: at the end of each round, the last {WINDOW_TOKENS} (or more,\n"
    "whole rounds) committed tokens divided by the seconds they took, from the moment the prompt\n"
    "was processed; points start after 8 tokens (dspark.metrics.rate_curve). The speculative run\n"
    "and plain mlx-lm decoding of the same prompt on the same loaded target."
)


class IntegerAxis(pg.AxisItem):
    """An axis of counts: ticks only at whole numbers."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float):
        levels = [(s, o) for s, o in super().tickSpacing(minVal, maxVal, size) if s >= 1]
        return levels or [(1.0, 0.0)]


def make_plot(title: str, left: str, bottom: str, integer_y: bool = False) -> pg.PlotWidget:
    axes = {"left": IntegerAxis("left")} if integer_y else None
    w = pg.PlotWidget(axisItems=axes)
    w.setMenuEnabled(False)
    w.setMouseEnabled(x=False, y=False)
    w.hideButtons()
    w.setProperty("titles", (title, left, bottom))
    for name in ("left", "bottom"):
        w.getAxis(name).enableAutoSIPrefix(False)  # "seconds", never "seconds (x0.001)"
    return w


#: How a line is drawn, by name (``app.panes.theme.policy_style``), and the glyph its legend key shows.
LINE_STYLES = {
    "solid": Qt.SolidLine,
    "dash": Qt.DashLine,
    "dot": Qt.DotLine,
    "dashdot": Qt.DashDotLine,
    "dashdotdot": Qt.DashDotDotLine,
}
GLYPHS = {"solid": "━━", "dash": "╍╍", "dot": "┉┉", "dashdot": "━╍", "dashdotdot": "━┉"}


def pen(colour: str, style: str = "solid", width: float = 3) -> object:
    return pg.mkPen(colour, width=width, style=LINE_STYLES[style])


#: A title too long for its plot on one line, in fewer words: wrapped, a narrow plot's title took
#: two or three of its lines. The plot's tooltip and its axes' labels say what the words left out.
SHORT_TITLES = {
    "Acceptance by position": "Acceptance by k",
    "Acceptance by context length": "By context length",
    "Measured cost on this machine": "Measured cost",
}


def fit_title(w: pg.PlotWidget, t: Theme, title: str, keys: list[tuple[str, str, str]] = (), note: str = "") -> None:
    """The title on one line and, on lines below it, ``note`` (a figure of the plot's) and its
    legend, one key per line drawn: (colour, name, style), as many keys to a line as fit. The
    title never wraps: too long for the plot, it is said in fewer words (``SHORT_TITLES``), and
    past those, in its first words and "…" (the plot's tooltip says it whole). A title or a key
    wider than the plot widens it past the widget, which then cuts the ends of the axes. Kept with
    the plot, so ``PlotBox`` fits it again when it is resized."""
    w.legend_keys = (t, title, list(keys), note)
    room = w.width() - 8  # the title spans the plot's width (``set_title``), less its text's margins

    def fits(lines: list[str]) -> bool:
        set_title(w, t, "<br>".join(lines))
        return w.getPlotItem().titleLabel.item.boundingRect().width() <= room

    short = SHORT_TITLES.get(title, title)
    head = next((h for h in (title, short) if fits([escape(h)])), None)
    if head is None:  # narrower still: its first words, and "…" where the rest was
        words = short.split(" ")
        n = next((n for n in range(len(words) - 1, 0, -1) if fits([escape(" ".join(words[:n]) + " …")])), 1)
        head = " ".join(words[:n]) + " …"
    lines = [escape(head)] + ([f'<span style="color:{t.muted}">{escape(note)}</span>'] if note else [])
    spans = [
        f'<span style="color:{colour}; white-space:nowrap">{escape(GLYPHS[style])} {escape(name)}</span>'
        for colour, name, style in keys
    ]  # a key never wraps inside itself
    for per_line in range(max(len(spans), 1), 0, -1):  # the fewest lines whose widest fits
        keyed = ["&nbsp;&nbsp;&nbsp;".join(spans[i : i + per_line]) for i in range(0, len(spans), per_line)]
        if fits(lines + keyed):
            break


#: The title's cell of pyqtgraph's plot layout (Qt takes it by position): row, column, rows, columns;
#: row 0, over the left axis, the data and the right axis.
TITLE_CELL = (0, 0, 1, 3)


def set_title(w: pg.PlotWidget, t: Theme, html: str) -> None:
    """The title, over the plot's whole width (pyqtgraph centres it over the data alone, whose
    width a narrow plot's title did not fit), its row as tall as its text (pyqtgraph fixes it at
    30 px, which cuts a two-line title, or a presentation-size one)."""
    item = w.getPlotItem()
    if not getattr(w, "title_spans", False):
        item.layout.removeItem(item.titleLabel)
        item.layout.addItem(item.titleLabel, *TITLE_CELL)
        w.title_spans = True
    w.setTitle(html, color=t.fg, size=f"{t.font_pt + 1}pt")
    h = int(item.titleLabel.item.boundingRect().height()) + 2
    item.titleLabel.setMaximumHeight(h)
    item.layout.setRowFixedHeight(0, h)


def style_plot(w: pg.PlotWidget, t: Theme) -> None:
    title, left, bottom = w.property("titles")
    w.setBackground(t.panel)
    fit_title(w, t, title)
    # pyqtgraph sets an axis label 5 px out from its axis: past the plot's edge, which cut it
    w.getPlotItem().layout.setContentsMargins(5, 1, 2, 5)
    w.label_pt = t.font_pt
    for name, text in (("left", left), ("bottom", bottom)):
        ax = w.getAxis(name)
        ax.setPen(pg.mkPen(t.grid))
        ax.setTextPen(pg.mkPen(t.fg))
        ax.setLabel(text, color=t.muted, **{"font-size": f"{t.font_pt}pt"})
        f = w.font()
        f.setPointSize(t.font_pt)
        ax.setStyle(tickFont=f)
    if not getattr(w, "labels_kept_inside", False):
        for part in (w.getPlotItem(), w.getAxis("left"), w.getAxis("bottom")):
            part.geometryChanged.connect(partial(keep_labels_inside, w))
        w.labels_kept_inside = True
    keep_labels_inside(w)
    w.showGrid(x=False, y=True, alpha=0.25)


#: An axis label longer than its plot is wide, in fewer words (the plot's tooltip says the rest).
SHORT_LABELS = {
    "seconds, prompts back to back": "seconds, back to back",
    "drafts verified (rows = 1 + drafts)": "drafts verified",
    "tokens before the drafted position (bar label: rounds)": "tokens before the position",
}


def keep_labels_inside(w: pg.PlotWidget) -> None:
    """Each axis label inside the plot: in fewer words (``SHORT_LABELS``) when it is longer than
    the plot is wide, and moved along its axis until its ends are inside (pyqtgraph centres it
    on the axis, and a label longer than the axis stood past the plot's edge, cut). Again
    whenever the plot or an axis is laid out anew (pyqtgraph places the label then)."""
    item = w.getPlotItem()
    _title, left, bottom = w.property("titles")
    font = QFont(w.font())
    font.setPointSize(getattr(w, "label_pt", NORMAL.font_pt))
    fm = QFontMetrics(font)
    for name, full, room in (("left", left, item.height()), ("bottom", bottom, item.width())):
        ax = w.getAxis(name)
        text = full if fm.horizontalAdvance(full) + 8 <= room - 7 else SHORT_LABELS.get(full, full)
        if ax.labelText != text:
            ax.setLabel(text)  # in the style it has
        label, at = ax.label, ax.mapToItem(item, QPointF(0, 0))
        length = label.boundingRect().width()  # along its axis (a left axis' label is turned)
        if name == "bottom":  # pyqtgraph's place, centred; then no further left or right than the plot
            x = int(ax.width() / 2 - length / 2)
            label.setX(max(-at.x(), min(x, item.width() - at.x() - length)))
        else:
            y = int(ax.height() / 2 + length / 2)  # its lower end: the text runs upwards from it
            label.setY(min(item.height() - at.y(), max(y, length - at.y())))


def integer_ticks(w: pg.PlotWidget, values) -> None:
    """A tick at each whole number, each labelled while the labels fit the plot's width side by
    side; past that every 2nd, 5th, 10th ... (a narrow plot of 12 draft positions drew "91011").
    Kept with the plot, so ``PlotBox`` labels them again when it is resized."""
    values = [int(v) for v in values]
    w.tick_values = values
    ax = w.getAxis("bottom")
    fm = QFontMetrics(ax.style["tickFont"] or w.font())
    need = max((fm.horizontalAdvance(str(v)) for v in values), default=0) + fm.horizontalAdvance("  ")
    room = max(w.width() - w.getAxis("left").width() - 12, 1)  # the axis's length
    step = next((k for k in (1, 2, 5, 10, 20, 50, 100) if len(values) / k * need <= room), 200)
    first = values[0] if values else 0
    ax.setTicks(
        [
            [(float(v), str(v)) for v in values if (v - first) % step == 0],
            [(float(v), "") for v in values if (v - first) % step],
        ]
    )


TIP_COSTS = (
    "This machine's measured costs (dspark.costs), which the auto verify policy schedules by:\n"
    "solid, the target's verify forward of the anchor and w drafts (w = 0..G) with the drafter's taps;\n"
    "dashed, one drafted block (its time in the legend); grey, one plain decoding step.\n"
    "Each is a median of timed runs, cached per machine, model and MLX version."
)


def draw_costs(w: pg.PlotWidget, costs: dict, t: Theme, colours: dict[str, str] | None = None) -> None:
    """Each drafter's verify cost by width, its draft cost, and the plain step, from
    ``{name: Costs.to_dict()}``, each drafter in its colour of ``colours`` (the table's and the
    other plots'); the legend is the title (``fit_title``)."""
    w.clear()
    colours = drafter_colours(t, list(colours or {}) + list(costs), colours)
    keys, top, width = [], 0.0, 0
    for name, c in costs.items():
        colour = colours[name]
        v = [float(x) for x in c["verify_ms"]]
        w.plot(
            np.arange(len(v), dtype=float), np.array(v), pen=pen(colour), symbol="o", symbolSize=8, symbolBrush=colour
        )
        w.addItem(pg.InfiniteLine(pos=float(c["draft_ms"]), angle=0, pen=pen(colour, "dash", 2)))
        keys.append((colour, f"{name} (draft {float(c['draft_ms']):.1f} ms)", "solid"))
        top, width = max(top, max(v), float(c["draft_ms"])), max(width, len(v))
    if costs:
        step = float(next(iter(costs.values()))["step_ms"])
        w.addItem(pg.InfiniteLine(pos=step, angle=0, pen=pen(t.plain, "solid", 2)))
        keys.append((t.plain, f"plain step {step:.1f} ms", "solid"))
        w.setYRange(0, max(top, step) * 1.15, padding=0)
        w.setXRange(-0.4, width - 0.6, padding=0)
        integer_ticks(w, range(width))
    fit_title(w, t, w.property("titles")[0], keys)


class PlotBox(QWidget):
    """A plot, covered (before it has data) by a caption saying what it will show: no empty
    axes. The plot stays shown underneath, so the first data of a run costs no first show of a
    pyqtgraph view (hundreds of milliseconds of the GUI thread on a busy machine)."""

    def __init__(self, plot: pg.PlotWidget, empty: str, parent=None):
        super().__init__(parent)
        self.plot = plot
        self.empty = QLabel(f"<b>{escape(plot.property('titles')[0])}</b><br>{escape(empty)}")
        self.empty.setObjectName("placeholder")
        self.empty.setAlignment(Qt.AlignCenter)
        self.empty.setWordWrap(True)
        lay = QGridLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(plot, 0, 0)
        lay.addWidget(self.empty, 0, 0)  # the same cell, on top
        self.empty.raise_()
        plot.setProperty("empty", True)

    def set_empty(self, empty: bool) -> None:
        self.empty.setVisible(empty)
        self.plot.setProperty("empty", empty)  # a PNG export skips a plot with nothing drawn

    @property
    def is_empty(self) -> bool:
        return not self.empty.isHidden()

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        if e.oldSize().width() != e.size().width() and getattr(self.plot, "legend_keys", None):
            self.plot.resize(e.size())  # the title fits the new width, not the old one
            fit_title(self.plot, *self.plot.legend_keys)
        if e.oldSize().width() != e.size().width() and getattr(self.plot, "tick_values", None):
            self.plot.resize(e.size())
            integer_ticks(self.plot, self.plot.tick_values)


def zero_based_range(w: pg.PlotWidget, top: float, grow: float = 1.12) -> None:
    """A y axis from 0 to ``top`` (times ``grow``) with its end labels shown: the range reaches
    half a label beyond each end (with the grid on, pyqtgraph drops a label that sticks out)."""
    top = top if top > 0 else 1.0
    ax = w.getAxis("left")
    half = QFontMetrics(ax.style["tickFont"] or w.font()).height() / 2 + 2
    px = max(w.getPlotItem().getViewBox().height(), 4 * half)
    span = top * grow
    margin = span * half / (px - 2 * half)
    w.setYRange(-margin, span + (margin if grow == 1.0 else 0.0), padding=0)


def rate_range(w: pg.PlotWidget, ys) -> None:
    """A rate axis from 0 to a little above the highest point."""
    zero_based_range(w, max((float(np.max(y)) for y in ys if len(y)), default=1.0))


def seconds_from_zero(w: pg.PlotWidget, ends) -> None:
    """A seconds axis from 0 (decoding's start) to the last point: left to pyqtgraph, a replay's
    few points were padded to start at -3 s."""
    end = max((float(e) for e in ends), default=0.0)
    w.setXRange(0.0, end * 1.03 if end > 0 else 1.0, padding=0)


class PlotsPane(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.theme = NORMAL
        self.position = make_plot("Acceptance by position", "rate", "draft position k")
        self.position.setToolTip(TIP_POSITION)
        self.pos_bars = pg.BarGraphItem(x=[], height=[], width=0.7)
        self.position.addItem(self.pos_bars)
        # "accepted drafts per round" was cut at its end on a plot narrowed by a diagnosis beside it
        self.hist = make_plot("Accepted length", "rounds", "accepted drafts", integer_y=True)
        self.hist.setToolTip(TIP_HIST)
        self.hist_bars = pg.BarGraphItem(x=[], height=[], width=0.7)
        self.hist.addItem(self.hist_bars)
        self.tps = make_plot("Decode tok/s", "tok/s", "seconds of decoding")
        self.tps.setToolTip(TIP_TPS)
        self.speculative_curve = self.tps.plot([], [])
        self.plain_curve = self.tps.plot([], [])
        self.pause_marks: list[pg.InfiniteLine] = []  # where a pause of the machine was left out
        self.boxes = {
            "position": PlotBox(self.position, "per draft position, after a speculative run"),
            "hist": PlotBox(self.hist, "rounds by accepted drafts, after a speculative run"),
            "tps": PlotBox(self.tps, "speculative and plain decoding, during a run"),
        }
        lay = QGridLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        for c, box in enumerate(self.boxes.values()):
            lay.addWidget(box, 0, c)
            lay.setColumnStretch(c, 1)
        self.set_theme(NORMAL)

    def plots(self) -> dict[str, pg.PlotWidget]:
        return {"acceptance_by_position": self.position, "accepted_length": self.hist, "tokens_per_sec": self.tps}

    def _mark_pauses(self, runs) -> None:
        """A dashed line on the tok/s plot at each pause of the machine (``dspark.metrics.pauses``),
        labelled with what the header leaves out of the rates."""
        for line in self.pause_marks:
            self.tps.removeItem(line)
        self.pause_marks = []
        for run in runs:
            for i, seconds in metrics.pauses(run.rounds):
                line = pg.InfiniteLine(
                    pos=metrics.decode_seconds(run.rounds[i]),
                    angle=90,
                    pen=pen(self.theme.fg, "dash", 1.0),
                    label=f"pause {seconds:.1f} s",
                    labelOpts={"position": 0.9, "color": self.theme.fg},
                )
                self.tps.addItem(line)
                self.pause_marks.append(line)

    def set_theme(self, t: Theme) -> None:
        self.theme = t
        for w in self.plots().values():
            style_plot(w, t)
        fit_title(self.tps, t, "Decode tok/s", [(t.speculative, "speculative", "solid"), (t.plain, "plain", "dash")])
        self.pos_bars.setOpts(brush=t.accepted, pen=pg.mkPen(t.fg, width=0.5))
        self.hist_bars.setOpts(brush=t.bonus, pen=pg.mkPen(t.fg, width=0.5))
        self.speculative_curve.setPen(pen(t.speculative, "solid", 2.5))
        self.plain_curve.setPen(pen(t.plain, "dash", 2.5))

    def show_view(self, view: View) -> None:
        """Redraw from the speculative run and the plain run (either may be None)."""
        speculative, plain = view.speculative, view.plain
        t = self.theme
        # rounds that drafted: auto's plain steps are events too, but nothing drafted was measured
        f = speculative.figures() if speculative is not None and speculative.rounds else None
        has_speculative = f is not None and f.rounds > 0
        if has_speculative:
            rates = f.per_position_acceptance
            self.pos_bars.setOpts(x=np.arange(1, len(rates) + 1, dtype=float), height=np.array(rates, float))
            self.position.setXRange(0.4, max(len(rates), 1) + 0.6, padding=0)
            zero_based_range(self.position, 1.0, grow=1.0)
            integer_ticks(self.position, range(1, len(rates) + 1))
            hist = f.accepted_histogram
            self.hist_bars.setOpts(x=np.arange(len(hist), dtype=float), height=np.array(hist, float))
            self.hist.setXRange(-0.6, max(len(hist) - 1, 1) + 0.6, padding=0)
            zero_based_range(self.hist, max(max(hist, default=1), 1))
            integer_ticks(self.hist, range(len(hist)))
            fit_title(self.hist, t, "Accepted length", note=f"τ\u00a0=\u00a0{f.tau:.2f}")  # τ's figure never split
        else:
            self.pos_bars.setOpts(x=[], height=[])
            self.hist_bars.setOpts(x=[], height=[])
            fit_title(self.hist, t, "Accepted length")  # no τ over empty axes
        self.boxes["position"].set_empty(not has_speculative)
        self.boxes["hist"].set_empty(not has_speculative)
        curves, ends = [], []
        for run, curve in ((speculative, self.speculative_curve), (plain, self.plain_curve)):
            x, y = run.curve() if run is not None and run.rounds else ([], [])
            curve.setData(np.array(x, float), np.array(y, float))
            curves.append(y)
            ends += x[-1:]
        self._mark_pauses([r for r in (speculative, plain) if r is not None and r.rounds])
        self.boxes["tps"].set_empty(not any(curves))
        if any(curves):
            rate_range(self.tps, curves)
            seconds_from_zero(self.tps, ends)
