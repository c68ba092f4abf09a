"""The comparison view: one result row per drafter plus plain decoding (pooled over the
prompts run), and overlaid curves: acceptance by position and tokens/sec over time."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QHBoxLayout, QHeaderView, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from .panes.plots import TIP_POSITION, TIP_TPS, integer_ticks, make_plot, style_plot
from .runs import BASELINE
from .session import View
from .theme import NORMAL, Theme

COLUMNS = [
    ("label", "Drafter", "The drafter directory's name, or plain decoding"),
    ("runs", "Runs", "Prompts run (finished / started)"),
    ("tau", "τ", "Mean acceptance length: committed tokens per round, bonus/correction token included"),
    ("acceptance_rate", "Acceptance", "Accepted drafted tokens ÷ verified drafted tokens"),
    ("tokens_per_sec", "tok/s", "Pooled decode throughput: all tokens ÷ all decode seconds"),
    ("speedup", "Speedup", "tok/s ÷ plain decoding's tok/s on the same prompts and target"),
    ("per_position_acceptance", "Acceptance by position", "Position k: rounds that accepted drafts 1..k ÷ rounds that verified k"),
    ("identical", "= plain", "✓ every greedy output equals plain decoding token for token; ≈ the only differences are\n"
                             "numerical ties of a bf16 / quantised target; ✗ a real difference"),
]


def format_cell(key: str, row: dict) -> str:
    v = row.get(key)
    is_base = row["label"] == BASELINE
    if key == "label":
        return v
    if key == "runs":
        return f"{row['finished']}/{row['runs']}"
    if key in ("tau", "acceptance_rate", "per_position_acceptance") and is_base:
        return "–"
    if key == "tau":
        return f"{v:.2f}"
    if key == "acceptance_rate":
        return f"{v:.0%}"
    if key == "tokens_per_sec":
        return f"{v:.1f}" if v else "…"
    if key == "speedup":
        return f"{v:.2f}×" if v else "–"
    if key == "per_position_acceptance":
        return " ".join(f"{x:.2f}" for x in v)
    if key == "identical":
        return v or "–"
    return str(v)


class CompareView(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.theme = NORMAL
        self.rows: list[dict] = []
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.verticalHeader().setVisible(False)
        for i, (_k, name, tip) in enumerate(COLUMNS):
            item = QTableWidgetItem(name)
            item.setToolTip(tip)
            self.table.setHorizontalHeaderItem(i, item)
        hh = self.table.horizontalHeader()
        hh.setSectionResizeMode(QHeaderView.ResizeToContents)
        hh.setStretchLastSection(False)
        hh.setSectionResizeMode(6, QHeaderView.Stretch)
        self.position = make_plot("Acceptance by position", "rate", "draft position k")
        self.position.setToolTip(TIP_POSITION)
        self.position.setYRange(-0.05, 1.05, padding=0)
        self.position.addLegend(offset=(-10, 10))
        self.tps = make_plot("Tokens / second", "tok/s", "seconds")
        self.tps.setToolTip(TIP_TPS)
        self.tps.addLegend(offset=(-10, 10))
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.table, 0)
        plots = QHBoxLayout()
        plots.addWidget(self.position)
        plots.addWidget(self.tps)
        lay.addLayout(plots, 1)
        self.set_theme(NORMAL)

    def plots(self) -> dict[str, pg.PlotWidget]:
        return {"compare_acceptance_by_position": self.position, "compare_tokens_per_sec": self.tps}

    def set_theme(self, t: Theme) -> None:
        self.theme = t
        for w in self.plots().values():
            style_plot(w, t)

    def colour(self, i: int, label: str) -> str:
        return self.theme.base if label == BASELINE else self.theme.series[i % len(self.theme.series)]

    def show_view(self, view: View) -> None:
        if view.kind != "compare":
            return  # keeps the last comparison on its tab
        runs = view.runs
        self.rows = list(view.rows)
        self.table.setRowCount(len(self.rows))
        rows_h = sum(self.table.rowHeight(i) for i in range(len(self.rows)))
        self.table.setMaximumHeight(self.table.horizontalHeader().sizeHint().height() + rows_h + 12)
        for r, row in enumerate(self.rows):
            for c, (key, _n, _t) in enumerate(COLUMNS):
                item = QTableWidgetItem(format_cell(key, row))
                if c:
                    item.setTextAlignment(Qt.AlignCenter)
                if key == "label" and row["drafter"]:
                    item.setToolTip(row["drafter"])
                self.table.setItem(r, c, item)
        for w in self.plots().values():
            w.getPlotItem().legend.clear()
            w.clear()
        order = [row["label"] for row in self.rows]
        width = max((len(row["per_position_acceptance"]) for row in self.rows), default=0)
        integer_ticks(self.position, range(1, width + 1))
        shown = set()
        for row in self.rows:
            if row["label"] == BASELINE or not row["per_position_acceptance"]:
                continue
            i = order.index(row["label"])
            rates = row["per_position_acceptance"]
            self.position.plot(np.arange(1, len(rates) + 1, dtype=float), np.array(rates, float),
                               pen=pg.mkPen(self.colour(i, row["label"]), width=2.5),
                               symbol="o", symbolSize=7, symbolBrush=self.colour(i, row["label"]),
                               name=row["label"])
        for run in runs:
            if not run.rounds:
                continue
            i = order.index(run.label)
            x, y = run.curve()
            style = Qt.DashLine if run.label == BASELINE else Qt.SolidLine
            self.tps.plot(np.array(x, float), np.array(y, float),
                          pen=pg.mkPen(self.colour(i, run.label), width=2.5, style=style),
                          name=None if run.label in shown else run.label)
            shown.add(run.label)
