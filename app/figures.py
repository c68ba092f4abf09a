"""Figures of a ``dspark bench`` result, drawn with the app's own plot styling, as PNG files:
``dspark-studio --bench-figures BENCH_OUT_DIR [--presentation]`` (plotting stays in the app; the
``dspark`` library never imports Qt). It reads ``summary.json`` and writes ``speedup.png`` (each
arm's median speedup over plain mlx-lm decoding, with the middle half of its trials),
``acceptance.png`` (acceptance by draft position per arm) and ``costs.png`` (this machine's measured
verify cost by width, and the draft's), and prints each path."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from dspark.errors import DsparkError

from .files.benchmark import read_bench
from .panes.compare import arm_styles
from .panes.plots import draw_costs, fit_title, integer_ticks, make_plot, pen, style_plot
from .panes.theme import NORMAL, PRESENTATION
from .state.runs import bench_costs, bench_rows

SIZE = (1200, 700)


def _figures(doc: dict, theme):
    """The three figures of a benchmark, drawn; long because each plot's styling is spelled out in turn."""
    arms = [a for a in doc["arms"] if "speedup" in a]
    # the colours and line styles of the Compare tab: one colour per drafter, one style per policy
    styles, colours = arm_styles(theme, bench_rows(doc))
    style = {a["arm"]: styles.get(a["arm"], (theme.plain, "dash")) for a in doc["arms"]}
    out = {}

    w = make_plot(
        f"Speedup over plain mlx-lm decoding ({doc['prompts']['count']} prompts x "
        f"{doc['settings']['repeats']}, {doc['settings']['max_tokens']} tokens)",
        "x plain",
        "",
    )
    xs = list(range(len(arms)))
    w.addItem(
        pg.BarGraphItem(
            x=xs, height=[a["speedup"] for a in arms], width=0.6, brushes=[style[a["arm"]][0] for a in arms], pen=None
        )
    )
    lo = [a["speedup"] - a["speedup_spread"]["p25"] for a in arms]
    hi = [a["speedup_spread"]["p75"] - a["speedup"] for a in arms]
    w.addItem(
        pg.ErrorBarItem(
            x=np.array(xs, float),
            y=np.array([a["speedup"] for a in arms]),
            top=np.array(hi),
            bottom=np.array(lo),
            beam=0.2,
            pen=pg.mkPen(theme.fg, width=2),
        )
    )
    w.addItem(pg.InfiniteLine(pos=1.0, angle=0, pen=pg.mkPen(theme.plain, width=2, style=Qt.DashLine)))
    w.getAxis("bottom").setTicks([[(i, a["arm"]) for i, a in enumerate(arms)], []])
    w.setYRange(0, max([1.2] + [a["speedup_spread"]["p75"] * 1.1 for a in arms]), padding=0)
    out["speedup"] = w

    w = make_plot(
        "Acceptance by draft position (rounds with drafts 1..k accepted / rounds verifying k)",
        "rate",
        "draft position k",
    )
    keys = []
    for a in (a for a in arms if a.get("per_position_acceptance")):
        ys = a["per_position_acceptance"]
        colour, line = style[a["arm"]]
        w.plot(list(range(1, len(ys) + 1)), ys, pen=pen(colour, line), symbol="o", symbolBrush=colour)
        keys.append((colour, f"{a['arm']} (tau {a['tau']:.2f})", line))
    w.setYRange(0, 1.05, padding=0)
    integer_ticks(w, range(1, 1 + max([len(a.get("per_position_acceptance") or []) for a in arms], default=1)))
    out["acceptance"] = w

    w = make_plot("Measured cost on this machine", "ms", "drafts verified (rows = 1 + drafts)")
    style_plot(w, theme)
    w.resize(*SIZE)
    draw_costs(w, bench_costs(doc), theme, colours)
    out["costs"] = w
    for name, widget in out.items():
        if name != "costs":  # styled before drawing: its title is its legend
            style_plot(widget, theme)
    out["acceptance"].resize(*SIZE)
    fit_title(out["acceptance"], theme, out["acceptance"].property("titles")[0], keys)
    return out


def plot(folder: Path, presentation: bool = False) -> list[Path]:
    doc = read_bench(folder)  # checked whole, through the bounded reader, as the app opens one
    app = QApplication.instance() or QApplication(sys.argv[:1])  # noqa: F841  (widgets need one)
    paths = []
    for name, w in _figures(doc, PRESENTATION if presentation else NORMAL).items():
        w.resize(*SIZE)
        w.show()
        QApplication.processEvents()
        path = folder / f"{name}.png"
        if w.grab().save(str(path)):
            paths.append(path)
        w.close()
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dspark_studio.figures", description=__doc__.splitlines()[0])
    p.add_argument("folder", help="a dspark bench --out folder (with summary.json)")
    p.add_argument("--presentation", action="store_true", help="the high-contrast presentation theme")
    a = p.parse_args(argv)
    folder = Path(a.folder)
    if not (folder / "summary.json").is_file():
        print(f"figures: no summary.json in {folder}", file=sys.stderr)
        return 2
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # files, not a window: whatever display there is
    try:
        paths = plot(folder, a.presentation)
    except DsparkError as e:
        print(f"figures: {e}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
