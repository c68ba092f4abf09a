"""The live plots: acceptance by position, the accepted-length histogram, tokens/sec over
time. Items are made once and updated in place by ``show_runs`` (called from the window's
refresh timer, never per token). The numbers come from ``dspark.metrics`` via ``RunRecord``."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QGridLayout, QWidget

from ..session import View
from ..theme import NORMAL, Theme

pg.setConfigOptions(antialias=True)

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
    "Decode tokens/sec since the prompt was processed (cumulative), for the speculative run\n"
    "and plain mlx-lm decoding of the same prompt on the same loaded target."
)


def make_plot(title: str, left: str, bottom: str) -> pg.PlotWidget:
    w = pg.PlotWidget()
    w.setMenuEnabled(False)
    w.setMouseEnabled(x=False, y=False)
    w.hideButtons()
    w.setProperty("titles", (title, left, bottom))
    return w


def style_plot(w: pg.PlotWidget, t: Theme) -> None:
    title, left, bottom = w.property("titles")
    w.setBackground(t.panel)
    size = f"{t.font_pt + 1}pt"
    w.setTitle(title, color=t.fg, size=size)
    for name, text in (("left", left), ("bottom", bottom)):
        ax = w.getAxis(name)
        ax.setPen(pg.mkPen(t.grid))
        ax.setTextPen(pg.mkPen(t.fg))
        ax.setLabel(text, color=t.muted, **{"font-size": f"{t.font_pt}pt"})
        f = w.font()
        f.setPointSize(t.font_pt)
        ax.setStyle(tickFont=f)
    w.showGrid(x=False, y=True, alpha=0.25)
    legend = w.getPlotItem().legend
    if legend is not None:
        legend.setLabelTextColor(t.fg)
        legend.setLabelTextSize(size)
        for _sample, label in legend.items:  # existing labels re-render with the new size
            label.setText(label.text, color=t.fg, size=size)


def integer_ticks(w: pg.PlotWidget, values) -> None:
    w.getAxis("bottom").setTicks([[(float(v), str(v)) for v in values], []])


class PlotsPane(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.theme = NORMAL
        self.position = make_plot("Acceptance by position", "rate", "draft position k")
        self.position.setYRange(-0.05, 1.05, padding=0)
        self.position.setToolTip(TIP_POSITION)
        self.pos_bars = pg.BarGraphItem(x=[], height=[], width=0.7)
        self.position.addItem(self.pos_bars)
        self.hist = make_plot("Accepted length", "rounds", "accepted drafts per round")
        self.hist.setToolTip(TIP_HIST)
        self.hist_bars = pg.BarGraphItem(x=[], height=[], width=0.7)
        self.hist.addItem(self.hist_bars)
        self.tps = make_plot("Tokens / second", "tok/s", "seconds")
        self.tps.setToolTip(TIP_TPS)
        self.tps.addLegend(offset=(-10, 10))
        self.spec_curve = self.tps.plot([], [], name="speculative")
        self.base_curve = self.tps.plot([], [], name="plain decoding")
        lay = QGridLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.position, 0, 0)
        lay.addWidget(self.hist, 0, 1)
        lay.addWidget(self.tps, 0, 2)
        for c in range(3):
            lay.setColumnStretch(c, 1)
        self.set_theme(NORMAL)

    def plots(self) -> dict[str, pg.PlotWidget]:
        return {"acceptance_by_position": self.position, "accepted_length": self.hist, "tokens_per_sec": self.tps}

    def set_theme(self, t: Theme) -> None:
        self.theme = t
        for w in self.plots().values():
            style_plot(w, t)
        self.pos_bars.setOpts(brush=t.accepted, pen=pg.mkPen(t.fg, width=0.5))
        self.hist_bars.setOpts(brush=t.bonus, pen=pg.mkPen(t.fg, width=0.5))
        self.spec_curve.setPen(pg.mkPen(t.spec, width=2.5))
        self.base_curve.setPen(pg.mkPen(t.base, width=2.5, style=pg.QtCore.Qt.DashLine))

    def show_view(self, view: View) -> None:
        """Redraw from the speculative run and the baseline run (either may be None)."""
        spec, base = view.spec, view.base
        if spec is not None and spec.rounds:
            f = spec.figures()
            rates = f.per_position_acceptance
            self.pos_bars.setOpts(x=np.arange(1, len(rates) + 1, dtype=float), height=np.array(rates, float))
            self.position.setXRange(0.4, max(len(rates), 1) + 0.6, padding=0)
            integer_ticks(self.position, range(1, len(rates) + 1))
            hist = f.accepted_histogram
            self.hist_bars.setOpts(x=np.arange(len(hist), dtype=float), height=np.array(hist, float))
            self.hist.setXRange(-0.6, max(len(hist) - 1, 1) + 0.6, padding=0)
            integer_ticks(self.hist, range(len(hist)))
            self.hist.setTitle(f"Accepted length  (τ = {f.tau:.2f})", color=self.theme.fg,
                               size=f"{self.theme.font_pt + 1}pt")
            x, y = spec.curve()
            self.spec_curve.setData(np.array(x, float), np.array(y, float))
        else:
            self.pos_bars.setOpts(x=[], height=[])
            self.hist_bars.setOpts(x=[], height=[])
            self.spec_curve.setData([], [])
        if base is not None and base.rounds:
            x, y = base.curve()
            self.base_curve.setData(np.array(x, float), np.array(y, float))
        else:
            self.base_curve.setData([], [])
