"""The comparison view: one result row per drafter plus plain decoding (pooled over the
prompts run), and one curve per drafter: acceptance by position, and decode tokens/sec with the
prompts drawn back to back (so six prompts make one line per drafter, not eighteen).

The table is the legend (each drafter's colour beside its name) and the selector: the selected
row is the drafter the header and the Run tab describe.

A ``dspark bench`` result opened from a file (``app.files.benchmark``) fills the same table with its
arms (medians over its trials) and the acceptance curves; in place of the tokens/sec curves,
which a benchmark does not keep, it draws the costs the benchmark measured. Costs measured
here (the auto policy's, or Run ▸ Measure costs) are drawn beside a live comparison."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..state.runs import PLAIN_LABEL
from ..state.session import View
from .header import SPEEDUP_TIP
from .plots import (
    TIP_COSTS,
    TIP_POSITION,
    TIP_TPS,
    PlotBox,
    draw_costs,
    fit_title,
    integer_ticks,
    make_plot,
    pen,
    rate_range,
    seconds_from_zero,
    style_plot,
    zero_based_range,
)
from .theme import NORMAL, Theme, drafter_colours, policy_style

COLUMNS = [
    ("label", "Drafter", "The drafter directory's name, or plain decoding; select a row to show it in the header"),
    (
        "runs",
        "Prompts",
        "Prompts finished by every drafter and plain decoding / asked for: every figure of the\n"
        "table pools exactly these (a prompt still running, or stopped, is left out of all of them)",
    ),
    ("tau", "τ", "Mean acceptance length: committed tokens per round, bonus/correction token included"),
    ("acceptance_rate", "Acceptance", "Accepted drafted tokens ÷ verified drafted tokens"),
    ("tokens_per_sec", "tok/s", "Pooled decode throughput: all tokens ÷ all decode seconds"),
    ("speedup", "Speedup", SPEEDUP_TIP + "\nPooled over the prompts: tokens ÷ seconds on each side."),
    (
        "per_position_acceptance",
        "Acceptance by position",
        "Position k: rounds that accepted drafts 1..k ÷ rounds that verified k",
    ),
    (
        "identical",
        "= plain",
        "✓ every greedy output equals plain decoding token for token; ≈ the only differences are\n"
        "numerical ties of a bf16 / quantised target; ✗ a real difference",
    ),
]
TIP_TPS_POOLED = TIP_TPS + "\nEach drafter's prompts are drawn back to back: one line per drafter."


def format_cell(key: str, row: dict) -> str:
    v = row.get(key)
    is_plain = row["label"] == PLAIN_LABEL
    if key == "label":  # a drafter's kind beside its name, when the run knew it
        return f"{v} · {row['kind']}" if row.get("kind") else v
    if key == "runs":
        if row.get("runs_text"):  # a benchmark's arm: prompts × repeats
            return row["runs_text"]
        return f"{row['finished']}/{row['planned']}" + (" · stopped" if row.get("stopped") else "")
    if key in ("tau", "acceptance_rate", "per_position_acceptance") and is_plain:
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
    focus_chosen = Signal(str)  # a person selected a drafter's row

    def __init__(self, parent=None):
        super().__init__(parent)
        self.theme = NORMAL
        self.rows: list[dict] = []
        self._drawn = None  # what the table and curves show (redrawn only when it changes)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        # Tab leaves the table: walking its cells moved the selected row, and so the drafter the
        # header describes, under a speaker's hands
        self.table.setTabKeyNavigation(False)
        for i, (_k, name, tip) in enumerate(COLUMNS):
            item = QTableWidgetItem(name)
            item.setToolTip(tip)
            self.table.setHorizontalHeaderItem(i, item)
        hh = self.table.horizontalHeader()
        hh.setSectionResizeMode(QHeaderView.ResizeToContents)
        hh.setStretchLastSection(False)
        hh.setSectionResizeMode(6, QHeaderView.Stretch)
        hh.setTextElideMode(Qt.ElideRight)  # a narrow window: "Acceptance by pos…", never cut mid-letter
        self.table.itemSelectionChanged.connect(self._selected)
        self.empty = QLabel(
            "Compare runs every ticked drafter, then plain decoding, on the prompt "
            "(or on every prompt of the set): one row per drafter appears here."
        )
        self.empty.setObjectName("caption")
        self.empty.setAlignment(Qt.AlignCenter)
        self.empty.setWordWrap(True)
        self.position = make_plot("Acceptance by position", "rate", "draft position k")
        self.position.setToolTip(TIP_POSITION)
        # short: "seconds of decoding, prompts back to back" was cut at 1280x800 (the tooltip says it)
        self.tps = make_plot("Decode tok/s", "tok/s", "seconds, prompts back to back")
        self.tps.setToolTip(TIP_TPS_POOLED)
        self.costs = make_plot("Measured cost on this machine", "ms", "drafts verified (rows = 1 + drafts)")
        self.costs.setToolTip(TIP_COSTS)
        self.boxes = [
            PlotBox(self.position, "one line per drafter, after a comparison"),
            PlotBox(self.tps, "one line per drafter and plain decoding, during a comparison"),
            PlotBox(self.costs, "the auto policy's measured costs, once measured"),
        ]
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.empty, 0)
        lay.addWidget(self.table, 0)
        self.plots_row = QHBoxLayout()
        for box in self.boxes:
            self.plots_row.addWidget(box, 1)
        lay.addLayout(self.plots_row, 1)
        self.set_theme(NORMAL)
        self._show_table(False)

    def beside_plots(self, widget: QWidget) -> None:
        """``widget`` at the right of the plots, as wide as one of them (the diagnosis, ``app.panes.results``)."""
        self.plots_row.addWidget(widget, 1)

    def plots(self) -> dict[str, pg.PlotWidget]:
        return {
            "compare_acceptance_by_position": self.position,
            "compare_tokens_per_sec": self.tps,
            "compare_costs": self.costs,
        }

    def set_theme(self, t: Theme) -> None:
        self.theme = t
        px = max(12, round(t.font_pt * 1.4))  # a swatch as tall as the row's type
        self.table.setIconSize(QSize(px, px))
        for w in self.plots().values():
            style_plot(w, t)
        self._drawn = None

    def _show_table(self, shown: bool) -> None:
        self.table.setVisible(shown)
        self.empty.setVisible(not shown)

    def _selected(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        if rows and 0 <= rows[0].row() < len(self.rows):
            label = self.rows[rows[0].row()]["label"]
            if label != PLAIN_LABEL:
                self.focus_chosen.emit(label)

    def show_view(self, view: View) -> None:
        """Draw the last comparison (a later single run leaves it in place)."""
        shown = (
            tuple((r.serial, len(r.rounds), r.done, r.verdict) for r in view.comparison),
            view.focus,
            id(view.bench),
            repr(view.costs),
            view.colour_order,
        )
        if shown == self._drawn:
            return  # a single run's rounds: nothing here changed
        self._drawn = shown
        rows = list(view.rows)
        self._show_table(bool(rows))
        for box in self.boxes:
            box.set_empty(not rows)
        bench = view.bench is not None
        self.boxes[1].setVisible(not bench)  # a benchmark keeps no tokens/sec curves
        self.boxes[2].setVisible(bool(view.costs))
        self.boxes[2].set_empty(not view.costs)
        runs_header = self.table.horizontalHeaderItem(1)
        runs_header.setText("Prompts × repeats" if bench else "Prompts")
        order = [row["label"] for row in rows]
        styles, colours = arm_styles(self.theme, rows, view.colour_order)
        self._fill_table(rows, order, view.focus, styles)
        self._draw(rows, order, view.comparison, styles)
        if view.costs:
            draw_costs(self.costs, view.costs, self.theme, colours)

    def _fill_table(self, rows: list[dict], order: list[str], focus: str | None, styles: dict) -> None:
        self.table.blockSignals(True)
        self.rows = rows
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, (key, _n, _t) in enumerate(COLUMNS):
                item = QTableWidgetItem(format_cell(key, row))
                if c:
                    item.setTextAlignment(Qt.AlignCenter)
                if key == "label":
                    item.setData(Qt.DecorationRole, QColor(styles[row["label"]][0]))
                    if row["drafter"]:
                        item.setToolTip(row["drafter"])
                if key == "speedup" and row["label"] != PLAIN_LABEL:
                    item.setToolTip(_speedup_note(row))
                self.table.setItem(r, c, item)
        if focus in order:
            self.table.selectRow(order.index(focus))
        self.table.blockSignals(False)
        rows_h = sum(self.table.rowHeight(i) for i in range(len(rows)))
        self.table.setMaximumHeight(self.table.horizontalHeader().sizeHint().height() + rows_h + 12)

    def _draw(self, rows: list[dict], order: list[str], runs, styles: dict) -> None:
        t = self.theme
        for w in self.plots().values():
            w.clear()
        width = max((len(row["per_position_acceptance"]) for row in rows), default=0)
        integer_ticks(self.position, range(1, width + 1))
        keys = []
        for row in rows:
            label = row["label"]
            colour, style = styles[label]
            keys.append((colour, label, style))
            if label == PLAIN_LABEL or not row["per_position_acceptance"]:
                continue
            rates = row["per_position_acceptance"]
            self.position.plot(
                np.arange(1, len(rates) + 1, dtype=float),
                np.array(rates, float),
                pen=pen(colour, style),
                symbol="o",
                symbolSize=8,
                symbolBrush=colour,
            )
        if width:
            self.position.setXRange(0.6, width + 0.4, padding=0)
            zero_based_range(self.position, 1.0, grow=1.0)
        fit_title(
            self.position, t, "Acceptance by position", [k for k, row in zip(keys, rows) if row["label"] != PLAIN_LABEL]
        )
        fit_title(self.tps, t, "Decode tok/s", keys)
        ys, xs = [], []
        for label in order:
            x, y, offset = [], [], 0.0
            for run in (r for r in runs if r.label == label and r.rounds):
                rx, ry = run.curve(offset)
                x += rx
                y += ry
                offset += run.decode_seconds()
            if x:
                self.tps.plot(np.array(x, float), np.array(y, float), pen=pen(*styles[label]))
                ys.append(y)
                xs.append(x)
        if ys:
            rate_range(self.tps, ys)
            seconds_from_zero(self.tps, [max(x) for x in xs])


def drafter_name(row: dict) -> str:
    """The drafter a comparison row or a benchmark arm ran (its directory's name)."""
    return Path(row["drafter"]).name if row.get("drafter") else row["label"]


def arm_styles(
    t: Theme, rows: list[dict], order: tuple[str, ...] = ()
) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """(row label -> (colour, line style), drafter name -> colour): one colour per drafter and
    one line style per verify policy, so a benchmark's arms of one drafter share its colour
    in the table, in every plot and in every export; plain decoding grey and dashed. ``order``:
    the session's (``View.colour_order``)."""
    colours = drafter_colours(t, [drafter_name(r) for r in rows if r["label"] != PLAIN_LABEL], order=order)
    return (
        {
            r["label"]: (t.plain, "dash")
            if r["label"] == PLAIN_LABEL
            else (colours[drafter_name(r)], policy_style(r.get("policy")))
            for r in rows
        },
        colours,
    )


def _speedup_note(row: dict) -> str:
    """The speedup cell's tooltip: how it was pooled, or a benchmark arm's spread and limit."""
    spread = row.get("speedup_spread")
    if not spread:
        return f"{row['compared_tokens']} tokens compared, pooled over the prompts"
    text = (
        f"median of {spread['n']} trials (dspark bench); middle half {spread['p25']:.2f}–{spread['p75']:.2f}×, "
        f"range {spread['min']:.2f}–{spread['max']:.2f}×"
    )
    if row.get("limit"):
        text += (
            f"\nlimit τ·step/(draft+verify) {row['limit']:.2f}×, efficiency {row['efficiency']:.2f}"
            if row.get("efficiency") is not None
            else f"\nlimit {row['limit']:.2f}×"
        )
    return text
