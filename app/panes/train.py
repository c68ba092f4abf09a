"""The Train tab: what to train (the choices on the left, ``app.state.training.TrainPlan``), and
the run on the right: its state, the exact ``dspark train`` command (to copy into a terminal),
its figures and its curves, read from the run's folder as the log grows.

The run is a child process (``app.state.training.Child``), never this process: the GUI thread
only starts it, signals it and looks at its folder. The log is read off the GUI thread, a piece
at a time (a 250 ms timer collects what the reader thread read); the folder is kept in the
settings, so after a restart the tab shows the last run, its curves and its state again.
"""

from __future__ import annotations

import functools
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QApplication,
    QGridLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ..files import settings
from ..state import train_log
from ..state import training as tr
from .plots import PlotBox, fit_title, make_plot, pen, style_plot
from .theme import NORMAL, Theme
from .train_form import TrainForm, row

POLL_MS = 250
CURVES_S = 1.0  # a running run's curves are drawn again at most this often
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


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.1f} h"


class TrainPane(QWidget):
    #: Compare with the starting drafter: (target, the new drafter, the starting one or "", held-out files)
    compare_asked = Signal(str, str, str, list)

    def __init__(self, prefs: settings.Settings | None = None, parent=None):
        super().__init__(parent)
        self.prefs, self.theme = prefs, NORMAL
        self.argv: list[str] = []  # the shown run's command
        self.out, self.child, self.output, self.pid = "", None, None, None
        self.reader: train_log.LogReader | None = None
        self.curves = train_log.Curves()
        self.pending: Future | None = None
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="train-log")
        self.state = tr.RunState(state="", sentence="")
        self.items: dict[str, list] = {}  # each plot's lines, made once
        self.best_mark = None  # the star on the best held-out measurement
        self.dirty = False
        self.held_drawn: tuple | None = None  # (the curves, their measurements, the theme) last drawn
        self.drawn_at, self.drawn_state = 0.0, ""  # when the curves were last drawn, and the run's state then
        self.held_parts: dict[str, tuple] = {}  # each held-out plot: (the curves, their measurements, the theme)
        self._build()
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self.poll)
        record = prefs.training_run() if prefs is not None else {}
        if record:
            self.open_run(record["out"], record)
        self._enable()

    # --- layout ------------------------------------------------------------------------
    def _build(self) -> None:
        self.form = TrainForm()
        self.form.asked.connect(lambda name: getattr(self, name)())
        scroll = QScrollArea()
        scroll.setWidget(self.form)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.message = QLabel(objectName="message", wordWrap=True)
        self.message.hide()
        self.status = QLabel(objectName="caption", wordWrap=True)
        self.command = QLineEdit(readOnly=True, placeholderText="the dspark train command of a run started here")
        self.copy = QPushButton("Copy")
        self.copy.setToolTip("the command, to run, resume (--resume) or finish (--resume --finish) it from a terminal")
        self.copy.clicked.connect(lambda: QApplication.clipboard().setText(self.command.text()))
        self.figures = QLabel(wordWrap=True)
        self.plots = {
            "loss": make_plot("Training loss", "loss", "step"),
            "tau": make_plot("Held-out τ (★ the best so far)", "τ (tokens a round)", "step"),
            "positions": make_plot("Acceptance at position k", "held-out acceptance", "step"),
            "speed": make_plot("Speed", "steps / training second", "step"),
        }
        # fixed once, not at each measurement (11 ms of the first one's draw)
        self.plots["positions"].setYRange(-0.04, 1.04, padding=0)
        _viridis()  # read from its file now, not while the first measurement is drawn (10 ms)
        empty = {
            "loss": "the loss of every step, once the run logs one",
            "tau": "τ on held-out prompts, every --eval-every steps",
            "positions": "acceptance of each draft position on held-out prompts",
            "speed": "steps per second of training",
        }
        self.boxes = {k: PlotBox(p, empty[k]) for k, p in self.plots.items()}
        plots = QGridLayout()
        for i, (key, box) in enumerate(self.boxes.items()):
            plots.addWidget(box, i // 2, i % 2)
            plots.setColumnStretch(i % 2, 1)
            # the cell's width, not the title's: a legend fitted before the window was laid out
            # asked for a wider plot than the cell, and the cell cut it
            self.plots[key].setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Ignored)
        right = QWidget()
        rl = QVBoxLayout(right)
        for w in (self.message, self.status, row(self.command, self.copy), self.figures):
            rl.addWidget(w)
        rl.addLayout(plots, 1)
        split = QSplitter()
        split.addWidget(scroll)
        split.addWidget(right)
        split.setStretchFactor(1, 1)
        split.setSizes([self.form.minimumSizeHint().width() + 24, 900])
        QVBoxLayout(self).addWidget(split)
        self.layout().setContentsMargins(0, 0, 0, 0)
        self._hold_figures_height()

    def _hold_figures_height(self) -> None:
        """Room for two lines of figures from the start: the first held-out measurement adds its
        cost to them, and a second line appearing then shrank the plots below, each fitted its
        title anew and all four were painted again, in the window's longest stall (55-70 ms of
        the GUI thread while a run held both cores)."""
        self.figures.setMinimumHeight(2 * self.figures.fontMetrics().lineSpacing())

    def show_choices(self, choices) -> None:
        """The app's target and drafters, the form's defaults."""
        self.form.show_choices(choices)

    def set_theme(self, t: Theme) -> None:
        self.theme = t
        for p in self.plots.values():
            style_plot(p, t)
        self._hold_figures_height()
        self.dirty = True
        self.draw()

    # --- the run ------------------------------------------------------------------------
    def start(self) -> bool:
        """Start: the plan checked (a refusal is one sentence here), then ``dspark train``."""
        if self.state.live:
            return self.say("a run is going on: pause or stop it first")
        plan, program = self.form.plan(), tr.dspark_program()
        why = tr.refusal(plan, program)
        if why:
            return self.say(why)
        self.curves = train_log.Curves()
        started = self.launch(tr.command(plan, program), plan.out)
        if started:
            self.form.new_out()
        return started

    def launch(self, argv: list[str], out: str) -> bool:
        name = f"{Path(out).name}-{time.strftime('%Y%m%d-%H%M%S')}"
        try:
            child = tr.Child(argv, settings.training_output(name))
        except OSError as e:
            return self.say(f"could not start dspark train: {e.strerror or e}")
        self.child, self.argv, self.out, self.output, self.pid = child, argv, out, child.output, child.pid
        if self.reader is None or self.reader.path.parent != Path(out):  # another folder: drop a read of the last
            self.reader, self.pending = train_log.LogReader(out), None
        self._keep()
        self.say("")
        self.show_command(argv)
        self.timer.start()
        self.poll()
        return True

    def show_command(self, argv: list[str]) -> None:
        self.command.setText(tr.shell_line(argv) if argv else "")
        self.command.setCursorPosition(0)  # the program and its first options in view, not the tail

    def _keep(self) -> None:
        if self.prefs is not None:
            record = {"out": self.out, "command": self.argv, "output": str(self.output or ""), "pid": self.pid}
            self.prefs.keep_training_run(record)

    def open_run(self, out: str, record: dict | None = None, wait: bool = False) -> bool:
        """Show the run in ``out`` (the last one at a start; ``--train-run``): its curves and
        state; ``wait`` reads the whole log now (a headless picture)."""
        record = record or {}
        if not Path(out).is_dir():
            return self.say(f"the training run folder {out} is not there")
        self.out, self.child = out, None
        self.argv = [a for a in record.get("command") or [] if isinstance(a, str)]
        # a run this app did not start (a terminal's, another machine's): the command it recorded
        self.argv = self.argv or tr.status_command(out, tr.dspark_program() or ["dspark"])
        self.output = Path(record["output"]) if record.get("output") else None
        self.pid = record.get("pid") if isinstance(record.get("pid"), int) else None
        self.reader, self.curves, self.pending = (
            train_log.LogReader(out),
            train_log.Curves(),
            None,
        )  # drop a read of another log
        self.show_command(self.argv)
        while wait:
            again, chunk = self.reader.read()
            self.curves.extend(chunk)
            wait = self.reader.behind
        self.timer.start()
        self.poll()
        self.dirty, self.held_drawn = True, None  # everything now, in this turn (a headless picture next)
        self.draw()
        return True

    def _signal(self, sig, doing: str) -> bool:
        pid = self.child.pid if self.child is not None else self.state.pid
        if sig is None or pid is None or not (self.child.send(sig) if self.child else tr.send(pid, sig)):
            return self.say("the run is not running")
        self.status.setText(doing)
        return True

    def pause(self) -> bool:
        return self._signal(tr.PAUSE, "pausing: the run writes its checkpoint and stops …")

    def resume(self) -> bool:
        if self.state.live or not self.state.resumable:
            return self.say("nothing to resume: the run is going on, finished, or has no checkpoint")
        return self.launch(tr.resume_command(self._command()), self.out)

    def finish(self) -> bool:
        """Stop keeping the best: a running run ends at its next step; a paused one is resumed
        to finish (``--resume --finish``). A process that has not yet written its status has not
        yet set its handler for the signal (it would end unsaved), so it is not sent then."""
        if self.state.live and not self.state.reported:
            return self.say("the run is starting: stop it once it has said so (a moment), or Pause it")
        if self.state.live:
            return self._signal(tr.FINISH, "stopping: the run keeps its best held-out checkpoint as the drafter …")
        if self.state.resumable:
            return self.launch(tr.resume_command(self._command(), finish=True), self.out)
        return self.say("nothing to stop: no run is going on or paused")

    def _command(self) -> list[str]:
        """The run's command; for a run this tab did not start, the least that resumes it."""
        program = tr.dspark_program() or ["dspark"]
        return self.argv or [*program, "train", "--target", self.form.plan().target, "--out", self.out]

    def compare(self) -> bool:
        if self.state.state != "finished":
            return self.say("the run has not finished: compare once it has")
        target = tr.option(self.argv, "--target") or self.form.plan().target
        start = tr.option(self.argv, "--from") or ""
        self.compare_asked.emit(target, self.out, start, tr.heldout_files(self.argv))
        return True

    def say(self, text: str) -> bool:
        self.message.setText(text)
        self.message.setVisible(bool(text))
        return False

    # --- watching ----------------------------------------------------------------------
    def poll(self) -> None:
        """Collect what the reader thread read and ask for more; look at the run's state."""
        if not self.out:
            return
        if self.pending is not None and self.pending.done():
            self._take(self.pending.result())
        if self.pending is None and self.reader is not None:
            self.pending = self.pool.submit(self.reader.read)
        last = self.curves.steps[-1] if self.curves.steps else None
        state = tr.run_state(self.out, child=self.child, last_step=last)
        if self.state.live and not state.live and self.reader is not None:
            # a run that ended while watched wrote its last lines, a few polls' worth: its curves
            # whole before its state is shown (read in the thread, the final measurement came a
            # poll after "finished", and a save of the plots at once found the held-out ones not
            # drawn). A long log opened after its run ended is still read in the thread.
            if self.pending is not None:
                self._take(self.pending.result())
            while self.reader.behind:
                self._take(self.reader.read())
        if state != self.state:
            self.state, self.dirty = state, True
            if not state.live and state.state == "failed":
                self.say(f"the run {state.sentence}")
            if state.pid != self.pid and state.pid is not None:
                self.pid = state.pid
                self._keep()
        # a running run's new steps are drawn once a second: each paint of the curves is the GUI
        # thread's time, taken from the run on the machine's cores (a new state or measurement at once)
        h = self.held_drawn
        measured = h is None or h[0] is not self.curves or h[1] != len(self.curves.held_steps)
        if measured or time.monotonic() >= self.drawn_at + CURVES_S or state.state != self.drawn_state:
            self.draw(split=state.live)  # a finished run: all at once, its curves whole for a save

    def _take(self, read: tuple[bool, train_log.Curves]) -> None:
        """A read of the log (whether it started over, its new lines) into the curves."""
        again, chunk = read
        if again:
            self.curves = train_log.Curves()
        self.curves.extend(chunk)
        self.pending, self.dirty = None, self.dirty or again or bool(chunk.steps or chunk.held_steps)

    def draw(self, split: bool = False) -> None:
        """The state, the figures and the curves that have new points; ``split`` (a poll while
        the run goes on): the held-out plots in the event loop's next turns."""
        if not self.dirty:
            return
        self.dirty, self.drawn_at, self.drawn_state = False, time.monotonic(), self.state.state
        self._enable()
        c, t = self.curves, self.theme
        self.status.setText(f"{Path(self.out).name}: {self.state.sentence}" if self.out else "no run yet")
        self.figures.setText(self._figures())
        for key in ("loss", "speed"):
            self.boxes[key].set_empty(not len(c.steps) > (key == "speed"))
        steps = c.array("steps")
        self._line("loss", [(*thin(steps, c.array("loss")), t.speculative, "")])
        self._speed(steps)
        held_now = (c, len(c.held_steps), t)
        if self.held_drawn is not None and all(a is b or a == b for a, b in zip(held_now, self.held_drawn)):
            return  # no new measurement: their plots are not painted again
        self.held_drawn = held_now
        if split:  # each a moment later, with its paint, not in one go (at once they took 55-85 ms):
            # zero-delay timers ran back to back, with no turn of the loop for anything else between
            # (the pane the receiver: no call after it is gone)
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
        if c is not self.curves or (drawn is not None and drawn[0] is c and drawn[1:] == now):
            return False
        self.held_parts[part] = (c, *now)
        return True

    def _tau(self, c: train_log.Curves) -> None:
        if not self._held_due("tau", c):
            return
        self.boxes["tau"].set_empty(not c.held_steps)
        held = np.asarray(c.held_steps, dtype=float)
        self._line("tau", [(held, np.asarray(c.tau), self.theme.speculative, "")], symbols=True)
        self._mark_best(held)
        finite = [x for x in c.tau if np.isfinite(x)]
        top = max(finite + [1.5]) * 1.1
        self.plots["tau"].setYRange(1.0 - (top - 1.0) * 0.05, top, padding=0)  # never below 1, but 1 in view

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

    def _speed(self, steps: np.ndarray) -> None:
        k = min(RATE_LINES, len(steps) - 1)
        if k >= 1:
            sec = self.curves.array("seconds")
            dt = sec[k:] - sec[:-k]
            rate = np.where(dt > 0, (steps[k:] - steps[:-k]) / np.where(dt > 0, dt, 1), np.nan)
            self._line("speed", [(*thin(steps[k:], rate, SPEED_POINTS), self.theme.speculative, "")])

    def _mark_best(self, held: np.ndarray) -> None:
        """A star on the run's best held-out measurement so far (the log marks each new best:
        the weights Stop, keep the best writes)."""
        w, c = self.plots["tau"], self.curves
        if self.best_mark is None or self.best_mark.scene() is not w.scene():  # made anew after a clear
            self.best_mark = pg.ScatterPlotItem(symbol="star", size=18, pen=pg.mkPen(self.theme.fg))
            w.addItem(self.best_mark)
        at = [i for i, b in enumerate(c.best) if b][-1:]
        self.best_mark.setBrush(pg.mkBrush(self.theme.correction))
        self.best_mark.setData([held[i] for i in at], [c.tau[i] for i in at])

    def _line(self, key: str, series, symbols: bool = False) -> None:
        """Each series' line, made once and given new data after (remaking the items and fitting
        the title on every poll kept the GUI thread busy for a third of a second on 2 shared cores)."""
        w, items = self.plots[key], self.items.setdefault(key, [])
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

    def _figures(self) -> str:
        c, parts = self.curves, []
        total = c.total or self.state.steps
        if c.steps:
            parts.append(f"step {c.steps[-1]:,}" + (f" of {total:,}" if total else ""))
        rate = c.steps_per_sec()
        if rate:
            parts.append(f"{rate:.2f} steps/s")
        tokens = c.tokens_per_sec(tr.block_size(self.out, self.argv)) if self.out else None
        if tokens:
            parts.append(f"{tokens:,.0f} tokens/s")
        every = tr.option(self.argv, "--eval-every")
        minutes = tr.option(self.argv, "--time-budget-minutes")
        budget = float(minutes) * 60 if minutes and minutes.replace(".", "", 1).isdigit() else None
        left = c.seconds_left(total, int(every) if every and every.isdigit() else None, budget)
        if left is not None and self.state.live:
            parts.append(f"about {_duration(left)} left")
        cost = c.eval_cost()
        if cost:
            parts.append(
                f"a held-out measurement takes {cost[0]:.1f} s, {cost[1]:.0%} of the run's time so far "
                "(not counted as training)"
            )
        return " · ".join(parts)

    def _enable(self) -> None:
        s = self.state
        finished = s.state == "finished" and bool(self.out) and (Path(self.out) / "config.json").is_file()
        enabled = {}
        for name, on in (
            ("start", not s.live),
            ("pause", s.live),
            ("resume", not s.live and s.resumable and s.state != "finished"),
            ("finish", s.live or (s.resumable and s.state in ("paused", "crashed"))),
            ("compare", finished),
        ):
            enabled[name] = on
        self.form.enable(enabled)

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        QTimer.singleShot(0, self._refit)  # once the cells have their widths

    def showEvent(self, e) -> None:
        super().showEvent(e)
        QTimer.singleShot(0, self._refit)

    def _refit(self) -> None:
        """Each title and legend fitted again to its plot's width now (a fit made before the
        window was laid out measured another width, and the cell cut the legend)."""
        for w in self.plots.values():
            if getattr(w, "drawn_keys", None):
                fit_title(w, self.theme, w.property("titles")[0], w.drawn_keys[1])
                # the plot was given the view's size while the old legend's width was its minimum
                w.getPlotItem().setGeometry(QRectF(0, 0, w.width(), w.height()))

    def shutdown(self) -> None:
        """Quitting: a run this tab started is paused (it writes its checkpoint on its own)."""
        self.timer.stop()
        if self.child is not None and self.child.running():
            self.child.send(tr.PAUSE)
        self.pool.shutdown(wait=False, cancel_futures=True)

    def plot_widgets(self) -> dict[str, pg.PlotWidget]:
        return {f"train-{k}": p for k, p in self.plots.items()}
