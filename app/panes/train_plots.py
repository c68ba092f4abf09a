"""The Train tab's four plots of a run's curves (``app.state.train_log.Curves``): the training
loss and the speed of every logged step, held-out tau and acceptance by position at each held-out
measurement. Drawn so that a long run costs the GUI thread what a short one does: lines made once
and given new data, long curves thinned, the held-out plots painted only when a measurement is
new and, while the run goes on, one at a time in the event loop's next turns."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, QTimer
from PySide6.QtWidgets import QGridLayout, QSizePolicy, QWidget

from ..state import train_log
from .plots import PlotBox, fit_title, make_plot, pen, style_plot
from .theme import NORMAL, Theme

APART_MS = 20  # between the parts of a new held-out measurement's draw
RATE_LINES = 10  # step lines a point of the speed curve spans
THIN = 1000  # points a curve draws at most
#: The speed curve's points at most: its steps per second zig-zag, and Qt strokes a 2-px zig-zag of
#: 1,000 points in 90-170 ms of the GUI thread (1,000 to 20,000 logged steps, measured), 200 in 10-14.
SPEED_POINTS = 200


def position_colour(k: int, width: int) -> str:
    """Draft position k of ``width`` on a dark-to-light ramp (viridis, short of its pale end):
    later positions lighter, whatever their number (the series colours run out at 6)."""
    return _viridis().map(0.8 * k / max(width - 1, 1), mode="qcolor").name()


@functools.cache
def _viridis():
    return pg.colormap.get("viridis")  # read from pyqtgraph's file at each call: 9 ms of the first draw


def thin(x: np.ndarray, y: np.ndarray, points: int = THIN) -> tuple[np.ndarray, np.ndarray]:
    """At most about ``points`` points: past that each is the mean of k steps (the last kept
    as it is), so a long run's curve costs the GUI thread what a short one's does."""
    if len(x) <= points:
        return x, y
    k = -(-len(x) // points)
    m = len(x) // k
    xs = np.concatenate([x[: m * k : k], x[-1:]])
    return xs, np.concatenate([y[: m * k].reshape(m, k).mean(axis=1), y[-1:]])


class TrainPlots(QWidget):
    """The four plots, two by two. ``current()``: the curves the tab shows now (a held-out plot
    drawn a turn later is not drawn for curves the tab has since replaced)."""

    def __init__(self, current: Callable[[], train_log.Curves], parent=None):
        super().__init__(parent)
        self.current, self.theme = current, NORMAL
        self.items: dict[str, list] = {}  # each plot's lines, made once
        self.best_mark = None  # the star on the best held-out measurement
        self.held_drawn: tuple | None = None  # (the curves, their measurements, the theme) last drawn
        self.held_parts: dict[str, tuple] = {}  # each held-out plot: (the curves, their measurements, the theme)
        self.widgets = {
            "loss": make_plot("Training loss", "loss", "step"),
            "tau": make_plot("Held-out τ (★ the best so far)", "τ (tokens a round)", "step"),
            "positions": make_plot("Acceptance at position k", "held-out acceptance", "step"),
            "speed": make_plot("Speed", "steps / training second", "step"),
        }
        # fixed once, not at each measurement (11 ms of the first one's draw)
        self.widgets["positions"].setYRange(-0.04, 1.04, padding=0)
        _viridis()  # read from its file now, not while the first measurement is drawn (10 ms)
        empty = {
            "loss": "the loss of every step, once the run logs one",
            "tau": "τ on held-out prompts, every --eval-every steps",
            "positions": "acceptance of each draft position on held-out prompts",
            "speed": "steps per second of training",
        }
        self.boxes = {k: PlotBox(p, empty[k]) for k, p in self.widgets.items()}
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        for i, (key, box) in enumerate(self.boxes.items()):
            grid.addWidget(box, i // 2, i % 2)
            grid.setColumnStretch(i % 2, 1)
            # the cell's width, not the title's: a legend fitted before the window was laid out
            # asked for a wider plot than the cell, and the cell cut it
            self.widgets[key].setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Ignored)

    def set_theme(self, t: Theme) -> None:
        self.theme = t
        for p in self.widgets.values():
            style_plot(p, t)

    def forget_held(self) -> None:
        """The held-out plots are drawn again at the next :meth:`draw`, whatever was drawn before."""
        self.held_drawn = None

    def held_new(self, c: train_log.Curves) -> bool:
        """Whether ``c`` holds a held-out measurement the plots have not drawn."""
        h = self.held_drawn
        return h is None or h[0] is not c or h[1] != len(c.held_steps)

    def draw(self, c: train_log.Curves, t: Theme, split: bool = False) -> None:
        """The loss and speed curves of ``c``, and its held-out plots when a measurement is new;
        ``split`` (a poll while the run goes on): the held-out plots in the event loop's next turns."""
        self.theme = t
        for key in ("loss", "speed"):
            self.boxes[key].set_empty(not len(c.steps) > (key == "speed"))
        steps = c.array("steps")
        self._line("loss", [(*thin(steps, c.array("loss")), t.speculative, "")])
        self._speed(c, steps)
        held_now = (c, len(c.held_steps), t)
        if self.held_drawn is not None and all(a is b or a == b for a, b in zip(held_now, self.held_drawn)):
            return  # no new measurement: their plots are not painted again
        self.held_drawn = held_now
        if split:  # each a moment later, with its paint, not in one go (at once they took 55-85 ms):
            # zero-delay timers ran back to back, with no turn of the loop for anything else between
            # (the plots the receiver: no call after they are gone)
            then = lambda: self._tau(c) or QTimer.singleShot(APART_MS, self, lambda: self._positions(c))
            QTimer.singleShot(APART_MS, self, then)
        else:
            self._tau(c)
            self._positions(c)

    def _held_due(self, part: str, c: train_log.Curves) -> bool:
        """Whether held-out plot ``part`` is to be drawn for ``c``: not for another run's curves
        (a turn that came after a new run was opened), not twice for the same measurements."""
        now = (len(c.held_steps), self.theme)
        drawn = self.held_parts.get(part)
        if c is not self.current() or (drawn is not None and drawn[0] is c and drawn[1:] == now):
            return False
        self.held_parts[part] = (c, *now)
        return True

    def _tau(self, c: train_log.Curves) -> None:
        if not self._held_due("tau", c):
            return
        self.boxes["tau"].set_empty(not c.held_steps)
        held = np.asarray(c.held_steps, dtype=float)
        self._line("tau", [(held, np.asarray(c.tau), self.theme.speculative, "")], symbols=True)
        self._mark_best(c, held)
        finite = [x for x in c.tau if np.isfinite(x)]
        top = max(finite + [1.5]) * 1.1
        self.widgets["tau"].setYRange(1.0 - (top - 1.0) * 0.05, top, padding=0)  # never below 1, but 1 in view

    def _positions(self, c: train_log.Curves) -> None:
        if not self._held_due("positions", c):
            return
        self.boxes["positions"].set_empty(not c.held_steps)
        held = np.asarray(c.held_steps, dtype=float)  # as they are now: more may have come
        width = max((len(p) for p in c.positions), default=0)
        self._line(
            "positions",
            [
                (
                    held,
                    np.asarray([p[k] if k < len(p) else np.nan for p in c.positions]),
                    position_colour(k, width),
                    f"{k + 1}",
                )
                for k in range(width)
            ],
            symbols=True,
        )

    def _speed(self, c: train_log.Curves, steps: np.ndarray) -> None:
        k = min(RATE_LINES, len(steps) - 1)
        if k >= 1:
            sec = c.array("seconds")
            dt = sec[k:] - sec[:-k]
            rate = np.where(dt > 0, (steps[k:] - steps[:-k]) / np.where(dt > 0, dt, 1), np.nan)
            self._line("speed", [(*thin(steps[k:], rate, SPEED_POINTS), self.theme.speculative, "")])

    def _mark_best(self, c: train_log.Curves, held: np.ndarray) -> None:
        """A star on the run's best held-out measurement so far (the log marks each new best:
        the weights Stop, keep the best writes)."""
        w = self.widgets["tau"]
        if self.best_mark is None or self.best_mark.scene() is not w.scene():  # made anew after a clear
            self.best_mark = pg.ScatterPlotItem(symbol="star", size=18, pen=pg.mkPen(self.theme.fg))
            w.addItem(self.best_mark)
        at = [i for i, b in enumerate(c.best) if b][-1:]
        self.best_mark.setBrush(pg.mkBrush(self.theme.correction))
        self.best_mark.setData([held[i] for i in at], [c.tau[i] for i in at])

    def _line(self, key: str, series, symbols: bool = False) -> None:
        """Each series' line, made once and given new data after (remaking the items and fitting
        the title on every poll kept the GUI thread busy for a third of a second on 2 shared cores)."""
        w, items = self.widgets[key], self.items.setdefault(key, [])
        keys = [
            (colour, f"k = {name}" if i == 0 else name, "solid")
            for i, (_x, _y, colour, name) in enumerate(series)
            if name
        ]
        if len(items) != len(series) or getattr(w, "drawn_keys", None) != (self.theme, keys):
            w.clear()
            items.clear()
            for _x, _y, colour, _name in series:
                # the symbol with the item (set after it, each setter redrew its points: 4 times)
                marks = {"symbol": "o", "symbolSize": 6, "symbolBrush": colour} if symbols else {}
                items.append(w.plot(pen=pen(colour, width=2), connect="finite", **marks))
            w.drawn_keys = (self.theme, keys)
            fit_title(w, self.theme, w.property("titles")[0], keys)
        for item, (x, y, _colour, _name) in zip(items, series):
            item.setData(x, y, connect="finite")

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        QTimer.singleShot(0, self, self._refit)  # once the cells have their widths

    def showEvent(self, e) -> None:
        super().showEvent(e)
        QTimer.singleShot(0, self, self._refit)

    def _refit(self) -> None:
        """Each title and legend fitted again to its plot's width now (a fit made before the
        window was laid out measured another width, and the cell cut the legend)."""
        for w in self.widgets.values():
            if getattr(w, "drawn_keys", None):
                fit_title(w, self.theme, w.property("titles")[0], w.drawn_keys[1])
                # the plot was given the view's size while the old legend's width was its minimum
                w.getPlotItem().setGeometry(QRectF(0, 0, w.width(), w.height()))

    def plot_widgets(self) -> dict[str, pg.PlotWidget]:
        return {f"train-{k}": p for k, p in self.widgets.items()}
