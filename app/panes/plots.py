"""The live plots: acceptance by position, the accepted-length histogram, decode tokens/sec
over time. Items are made once and updated in place by ``show_view`` (called from the window's
refresh timer, never per token). The numbers come from ``dspark.metrics`` via ``Run``.

Read at a distance: no plot draws axes before it has data (a caption says what will appear),
counts are whole numbers, rates start at 0, seconds are seconds (no SI "x0.001" scaling), and
what each line is stands in the title, never on top of the curves."""

from __future__ import annotations

from html import escape

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QGridLayout, QLabel, QWidget

from ..session import View
from ..theme import NORMAL, Theme

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


KEYS_PER_LINE = 3  # a benchmark's nine arms in one line would widen the plot past the window


def title_html(t: Theme, title: str, keys: list[tuple[str, str, bool]] = (), per_line: int = KEYS_PER_LINE) -> str:
    """A plot title and, on a line below it, its legend: (colour, name, dashed) per line drawn
    (two short lines keep a narrow plot readable where one long one would widen the window)."""
    keys = [f'<span style="color:{colour}">{"╍╍" if dashed else "━━"}&nbsp;{escape(name)}</span>'
            for colour, name, dashed in keys]
    lines = ["&nbsp;&nbsp;&nbsp;".join(keys[i : i + per_line]) for i in range(0, len(keys), per_line)]
    return "<br>".join([escape(title), *lines])


def set_title(w: pg.PlotWidget, t: Theme, html: str) -> None:
    """The title, its row as tall as its text (pyqtgraph fixes it at 30 px, which cuts a
    two-line title, or a presentation-size one)."""
    w.setTitle(html, color=t.fg, size=f"{t.font_pt + 1}pt")
    item = w.getPlotItem()
    h = int(item.titleLabel.item.boundingRect().height()) + 2
    item.titleLabel.setMaximumHeight(h)
    item.layout.setRowFixedHeight(0, h)


def style_plot(w: pg.PlotWidget, t: Theme) -> None:
    title, left, bottom = w.property("titles")
    w.setBackground(t.panel)
    set_title(w, t, escape(title))
    for name, text in (("left", left), ("bottom", bottom)):
        ax = w.getAxis(name)
        ax.setPen(pg.mkPen(t.grid))
        ax.setTextPen(pg.mkPen(t.fg))
        ax.setLabel(text, color=t.muted, **{"font-size": f"{t.font_pt}pt"})
        f = w.font()
        f.setPointSize(t.font_pt)
        ax.setStyle(tickFont=f)
    w.showGrid(x=False, y=True, alpha=0.25)


def integer_ticks(w: pg.PlotWidget, values) -> None:
    w.getAxis("bottom").setTicks([[(float(v), str(v)) for v in values], []])


TIP_COSTS = (
    "This machine's measured costs (dspark.costs), which the auto verify policy schedules by:\n"
    "solid, the target's verify forward of the anchor and w drafts (w = 0..G) with the drafter's taps;\n"
    "dashed, one drafted block (its time in the legend); grey, one plain decoding step.\n"
    "Each is a median of timed runs, cached per machine, model and MLX version."
)


def draw_costs(w: pg.PlotWidget, costs: dict, t: Theme) -> None:
    """Each drafter's verify cost by width, its draft cost, and the plain step, from
    ``{name: Costs.to_dict()}``; the legend is the title (``title_html``)."""
    w.clear()
    keys, top, width = [], 0.0, 0
    for i, (name, c) in enumerate(costs.items()):
        colour = t.series[i % len(t.series)]
        v = [float(x) for x in c["verify_ms"]]
        w.plot(np.arange(len(v), dtype=float), np.array(v), pen=pg.mkPen(colour, width=3), symbol="o",
               symbolSize=8, symbolBrush=colour)
        w.addItem(pg.InfiniteLine(pos=float(c["draft_ms"]), angle=0, pen=pg.mkPen(colour, width=2, style=Qt.DashLine)))
        keys.append((colour, f"{name} (draft {float(c['draft_ms']):.1f} ms)", False))
        top, width = max(top, max(v), float(c["draft_ms"])), max(width, len(v))
    if costs:
        step = float(next(iter(costs.values()))["step_ms"])
        w.addItem(pg.InfiniteLine(pos=step, angle=0, pen=pg.mkPen(t.base, width=2)))
        keys.append((t.base, f"plain step {step:.1f} ms", False))
        w.setYRange(0, max(top, step) * 1.15, padding=0)
        w.setXRange(-0.4, width - 0.6, padding=0)
        integer_ticks(w, range(width))
    set_title(w, t, title_html(t, w.property("titles")[0], keys, per_line=2))


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

    def set_empty(self, empty: bool) -> None:
        self.empty.setVisible(empty)

    @property
    def is_empty(self) -> bool:
        return not self.empty.isHidden()


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


class PlotsPane(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.theme = NORMAL
        self.position = make_plot("Acceptance by position", "rate", "draft position k")
        self.position.setToolTip(TIP_POSITION)
        self.pos_bars = pg.BarGraphItem(x=[], height=[], width=0.7)
        self.position.addItem(self.pos_bars)
        self.hist = make_plot("Accepted length", "rounds", "accepted drafts per round", integer_y=True)
        self.hist.setToolTip(TIP_HIST)
        self.hist_bars = pg.BarGraphItem(x=[], height=[], width=0.7)
        self.hist.addItem(self.hist_bars)
        self.tps = make_plot("Decode tok/s", "tok/s", "seconds of decoding")
        self.tps.setToolTip(TIP_TPS)
        self.spec_curve = self.tps.plot([], [])
        self.base_curve = self.tps.plot([], [])
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

    def set_theme(self, t: Theme) -> None:
        self.theme = t
        for w in self.plots().values():
            style_plot(w, t)
        set_title(self.tps, t, title_html(t, "Decode tok/s", [(t.spec, "speculative", False), (t.base, "plain", True)]))
        self.pos_bars.setOpts(brush=t.accepted, pen=pg.mkPen(t.fg, width=0.5))
        self.hist_bars.setOpts(brush=t.bonus, pen=pg.mkPen(t.fg, width=0.5))
        self.spec_curve.setPen(pg.mkPen(t.spec, width=2.5))
        self.base_curve.setPen(pg.mkPen(t.base, width=2.5, style=Qt.DashLine))

    def show_view(self, view: View) -> None:
        """Redraw from the speculative run and the baseline run (either may be None)."""
        spec, base = view.spec, view.base
        t = self.theme
        has_spec = spec is not None and bool(spec.rounds)
        if has_spec:
            f = spec.figures()
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
            set_title(self.hist, t, escape(f"Accepted length  (τ = {f.tau:.2f})"))
        else:
            self.pos_bars.setOpts(x=[], height=[])
            self.hist_bars.setOpts(x=[], height=[])
            set_title(self.hist, t, escape("Accepted length"))  # no τ over empty axes
        self.boxes["position"].set_empty(not has_spec)
        self.boxes["hist"].set_empty(not has_spec)
        curves = []
        for run, curve in ((spec, self.spec_curve), (base, self.base_curve)):
            x, y = run.curve() if run is not None and run.rounds else ([], [])
            curve.setData(np.array(x, float), np.array(y, float))
            curves.append(y)
        self.boxes["tps"].set_empty(not any(curves))
        if any(curves):
            rate_range(self.tps, curves)
