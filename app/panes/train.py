"""The Train tab: what to train (the choices on the left, ``app.state.training.TrainPlan``), and
the run on the right: its state, the exact ``dspark train`` command (to copy into a terminal),
its figures and its curves, read from the run's folder as the log grows.

The run is a child process (``app.state.training.Child``), never this process: the GUI thread
only starts it, signals it and looks at its folder. The log is read off the GUI thread, a piece
at a time (a 250 ms timer collects what the reader thread read); the folder is kept in the
settings, so after a restart the tab shows the last run, its curves and its state again.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ..files import settings
from ..state import train_log
from ..state import training as tr
from .theme import NORMAL, Theme
from .train_form import TrainForm, row
from .train_plots import TrainPlots

POLL_MS = 250
CURVES_S = 1.0  # a running run's curves are drawn again at most this often


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
        self.dirty = False
        self.drawn_at, self.drawn_state = 0.0, ""  # when the curves were last drawn, and the run's state then
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
        self.plots = TrainPlots(current=lambda: self.curves)
        right = QWidget()
        rl = QVBoxLayout(right)
        for w in (self.message, self.status, row(self.command, self.copy), self.figures):
            rl.addWidget(w)
        rl.addWidget(self.plots, 1)
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
        self.plots.set_theme(t)
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
        self.dirty = True  # everything now, in this turn (a headless picture next)
        self.plots.forget_held()
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
        if (
            self.plots.held_new(self.curves)
            or time.monotonic() >= self.drawn_at + CURVES_S
            or state.state != self.drawn_state
        ):
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
        self.plots.draw(c, t, split=split)

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

    def shutdown(self) -> None:
        """Quitting: a run this tab started is paused (it writes its checkpoint on its own)."""
        self.timer.stop()
        if self.child is not None and self.child.running():
            self.child.send(tr.PAUSE)
        self.pool.shutdown(wait=False, cancel_futures=True)

    def plot_widgets(self) -> dict[str, pg.PlotWidget]:
        return self.plots.plot_widgets()
