"""The main window: wires the panes to the session and the session to the worker thread.

Threading (MLX arrays belong to the thread that made them): one long-lived QThread runs ``Worker``; the window
talks to it through queued signals and gets ``app.messages`` back, always into a bound method
of this GUI-thread object. That slot only hands the message to the Qt-free ``Session``; a 40 ms
timer redraws every pane from ``session.view()`` when something changed. Stop sets the
worker's ``threading.Event`` directly. Replay and export live in ``window_files``, the window's
place and saved settings in ``window_state``, the benchmark actions in ``benchmarks``.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QThread, QTimer, Qt, Signal, Slot
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QLabel, QMainWindow, QScrollArea, QSplitter, QTabWidget, QVBoxLayout, QWidget

from . import export, replay, settings
from .benchmarks import BenchActions
from .compare import CompareView
from .messages import Failed, JobDone, Loaded, LoadRequest, Arm, Status
from .panes.controls import ControlPanel, drafter_label
from .panes.draft_grid import DraftPane
from .panes.header import HeaderStrip
from .panes.plots import PlotsPane
from .panes.text_view import TextPane
from .presentation import Presenter
from dspark import blas
from dspark.prompts import prompt_sets
from .runs import BASELINE, Run
from .session import COMPARE_TAB, RUN_TAB, Session
from .theme import NORMAL, Theme, palette, stylesheet
from .window_files import FilesMixin
from .window_state import StateMixin
from .worker import Worker

REFRESH_MS = 40


class MainWindow(FilesMixin, StateMixin, QMainWindow):
    request_load = Signal(object)
    request_job = Signal(object)
    request_costs = Signal(object)
    request_shutdown = Signal()
    job_finished = Signal(dict)  # {"job", "ok", "cancelled"}, emitted on the GUI thread

    def __init__(self, prefs: settings.Settings | None = None):
        super().__init__()
        self.setWindowTitle("DSpark Studio")
        self.prefs = prefs
        self.theme = NORMAL
        self.session = Session()
        self.loaded_target: str | None = None
        self.environment: dict = {}  # the worker's record of the machine, for saved benchmarks
        self._drawn = -1  # the session version the panes show
        self.download = None  # the Download dialog, once opened
        self.player = replay.Player(self.on_message, self)  # replays deliver as the worker does
        self.playlist: list[replay.Recording] = []  # File ▸ Open run or benchmark…: Space / → plays the next
        self.playing = -1  # the playlist's recording on screen
        self.replay_speed = "1×"
        self.benchmarks = BenchActions(self)
        self._build()
        self._start_worker()
        self.presenter = Presenter(self)
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        self.timer.start()
        self.apply_theme(NORMAL)

    # --- layout ---------------------------------------------------------------------------
    def _build(self) -> None:
        self.controls = ControlPanel({s.name: list(s.prompts) for s in prompt_sets().values()})
        self.controls_scroll = QScrollArea()
        self.controls_scroll.setObjectName("controls")
        self.controls_scroll.setWidget(self.controls)
        self.controls_scroll.setWidgetResizable(True)
        self.controls_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)  # apply_theme sizes it
        self.left = QWidget()  # the scrolling choices, and Run / Stop / Compare always in view below
        ll = QVBoxLayout(self.left)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.setSpacing(0)
        ll.addWidget(self.controls_scroll, 1)
        ll.addWidget(self.controls.actions)
        self.controls.notice.connect(self.statusBar().showMessage)
        self.controls.target_chosen.connect(self.on_target_chosen)
        self.controls.drafters_changed.connect(self.on_drafters_changed)
        self.controls.run_clicked.connect(self.start_run)
        self.controls.stop_clicked.connect(self.stop)
        self.controls.compare_clicked.connect(self.start_compare)

        self.message = QLabel()
        self.message.setObjectName("message")
        self.message.setWordWrap(True)
        self.message.hide()
        self.prompt_label = QLabel()
        self.prompt_label.setObjectName("prompt")
        self.prompt_label.hide()
        self.header = HeaderStrip()
        self.text = TextPane()
        self.drafts = DraftPane()
        self.plots = PlotsPane()
        self.compare = CompareView()
        self.panes = [self.header, self.text, self.drafts, self.plots, self.compare]
        top = QSplitter(Qt.Horizontal)
        top.addWidget(self.text)
        top.addWidget(self.drafts)
        top.setSizes([520, 420])
        self.run_split = QSplitter(Qt.Vertical)
        self.run_split.addWidget(top)
        self.run_split.addWidget(self.plots)
        self.run_split.setSizes([430, 300])
        self.tabs = QTabWidget()
        self.tabs.addTab(self.run_split, "Run")
        self.tabs.addTab(self.compare, "Compare")
        self.tabs.currentChanged.connect(self._tab_changed)
        self.compare.focus_chosen.connect(self.session.set_focus)

        right = QWidget()
        right.setObjectName("panel")
        rl = QVBoxLayout(right)
        rl.setContentsMargins(4, 4, 4, 4)
        for w in (self.message, self.prompt_label, self.header):
            rl.addWidget(w)
        rl.addWidget(self.tabs, 1)
        self.split = QSplitter(Qt.Horizontal)
        self.split.addWidget(self.left)
        self.split.addWidget(right)
        self.split.setStretchFactor(1, 1)
        self.split.setSizes([330, 1070])
        self.setCentralWidget(self.split)
        self._menus()
        self.statusBar().showMessage("starting …")
        self.blas_note = QLabel()  # stays in the status bar: every speed on screen depends on it
        self.blas_note.setObjectName("note")
        if blas.is_slow():
            self.blas_note.setText(f"⚠ slow matrix products: {blas.describe()}")
            self.blas_note.setToolTip("mlx[cpu] on Linux links a reference BLAS; with Debian's OpenBLAS\n"
                                      "installed the app loads it itself (dspark.blas) and runs many times faster.")
            self.statusBar().addPermanentWidget(self.blas_note)

    def _menus(self) -> None:
        def act(menu, text, slot, key=None):
            a = QAction(text, self)
            if key:
                a.setShortcut(QKeySequence(key))
            a.triggered.connect(lambda _checked=False: slot())
            menu.addAction(a)
            self.addAction(a)  # shortcuts keep working while the menu bar is hidden
            return a

        m = self.menuBar().addMenu("&File")
        act(m, "Open target…", self.controls.browse_target, "Ctrl+O")
        act(m, "Open run or benchmark…", self.choose_replay, "Ctrl+Shift+O")
        act(m, "Add drafter…", self.controls.browse_drafter, "Ctrl+D")
        act(m, "Download…", self.open_download)
        m.addSeparator()
        act(m, "Export run as JSON…", lambda: self.export_data("json", False))
        act(m, "Export run as CSV…", lambda: self.export_data("csv", False))
        act(m, "Export comparison as JSON…", lambda: self.export_data("json", True))
        act(m, "Export comparison as CSV…", lambda: self.export_data("csv", True))
        act(m, "Save comparison as benchmark…", self.benchmarks.save_comparison)
        act(m, "Save plots as PNG…", self.export_pngs, "Ctrl+Shift+S")
        m.addSeparator()
        act(m, "Quit", self.close, "Ctrl+Q")
        m = self.menuBar().addMenu("&Run")
        act(m, "Run", self.start_run, "Ctrl+R")
        act(m, "Stop", self.stop, "Ctrl+.")
        act(m, "Compare drafters", self.start_compare, "Ctrl+Shift+R")
        act(m, "Measure costs (auto policy)", self.benchmarks.measure_costs)
        act(m, "Next prompt", lambda: self.controls.step_prompt(1), "Ctrl+Right")
        act(m, "Previous prompt", lambda: self.controls.step_prompt(-1), "Ctrl+Left")
        m.addSeparator()
        speeds = m.addMenu("Replay speed")
        group = QActionGroup(self)
        for name in replay.SPEEDS:
            a = speeds.addAction(name)
            a.setCheckable(True)
            a.setChecked(name == self.replay_speed)
            a.triggered.connect(lambda _checked=False, name=name: setattr(self, "replay_speed", name))
            group.addAction(a)
        m = self.menuBar().addMenu("&View")
        act(m, "Presentation mode", lambda: self.presenter.toggle(), "F11")

    def apply_theme(self, t: Theme) -> None:
        self.theme = t
        self.setPalette(palette(t))
        self.setStyleSheet(stylesheet(t))
        for pane in self.panes:
            pane.set_theme(t)
        self.controls.ensurePolished()  # the panel as wide as its widgets at this type size, no wider
        bar = self.controls_scroll.verticalScrollBar().sizeHint().width()
        self.controls_scroll.setMinimumWidth(max(300, self.controls.minimumSizeHint().width() + bar + 4))
        self._drawn = -1
        self.refresh()

    def open_download(self):
        """The Download dialog (made once; a download finishes even if it is closed)."""
        if self.download is None:
            from .download import DownloadDialog

            self.download = DownloadDialog(self)
            self.download.chosen.connect(self.on_downloaded)
        self.download.show()
        return self.download

    @Slot(str, str)
    def on_downloaded(self, kind: str, path: str) -> None:
        if kind == "drafter":
            self.controls.add_drafter(path, select=True)
        else:
            self.controls.set_target(path, self.prefs.recent("targets") if self.prefs else [])
            self.on_target_chosen(path)

    def set_presenting(self, on: bool) -> None:
        """Presentation mode's chrome: no controls or menus, the prompt shown large."""
        self.left.setVisible(not on)
        self.menuBar().setVisible(not on)
        self.prompt_label.setVisible(on)
        self.header.set_compact(on)

    # --- worker ---------------------------------------------------------------------------
    def _start_worker(self) -> None:
        self.thread_ = QThread(self)
        self.thread_.setObjectName("dspark-model-owner")
        self.worker = Worker()
        self.worker.moveToThread(self.thread_)
        self.request_load.connect(self.worker.load)
        self.request_job.connect(self.worker.run_job)
        self.request_costs.connect(self.worker.measure_costs)
        self.request_shutdown.connect(self.worker.shutdown)
        self.worker.message.connect(self.on_message)
        self.thread_.start()

    def shutdown_worker(self) -> None:
        """Stop any run, free the models on their own thread, and wait for it to end."""
        if self.thread_.isRunning():
            self.worker.cancel()
            self.request_shutdown.emit()
            if not self.thread_.wait(120_000):
                self.thread_.quit()
                self.thread_.wait(5_000)

    def load_models(self) -> None:
        target = self.controls.target_path()
        if target:
            self.request_load.emit(LoadRequest(target, tuple(self.controls.usable_drafters())))

    # --- user actions ---------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.session.busy

    @Slot(str)
    def on_target_chosen(self, path: str) -> None:
        """Load it; it joins the recent targets once it has loaded (``on_loaded``)."""
        self.load_models()

    @Slot()
    def on_drafters_changed(self) -> None:
        if self.controls.target_path() and not self.busy:
            self.load_models()

    def start_run(self) -> None:
        """A speculative run with the selected drafter, then plain decoding; shown on the Run tab."""
        drafter = self.controls.run_drafter()
        if drafter and self.controls.drafter_error(drafter):
            self.on_failed(f"cannot run with {self.controls.drafter_error(drafter)}: select another drafter")
            return  # nothing started, nothing shown is lost
        runs = [Arm(drafter_label(drafter), drafter)] if drafter else []
        if self._submit("run", runs + [Arm(BASELINE, None)], [self.controls.prompt_text()]):
            self.tabs.setCurrentWidget(self.run_split)  # never leave an old comparison on screen

    def start_compare(self) -> None:
        """Every ticked drafter that can run (known bad ones are skipped), then plain decoding."""
        paths = self.controls.checked_drafters()
        runs = [Arm(drafter_label(p), p) for p in paths]
        prompts = self.controls.prompts() if self.controls.all_prompts.isChecked() else [self.controls.prompt_text()]
        selected = self.controls.run_drafter()
        focus = drafter_label(selected) if selected in paths else None
        if self._submit("compare", runs + [Arm(BASELINE, None)], prompts, focus):
            self.tabs.setCurrentWidget(self.compare)

    def _submit(self, kind: str, runs: list[Arm], prompts: list[str], focus: str | None = None) -> bool:
        target = self.controls.target_path()
        if not target:
            self.on_failed("no target model chosen: pick a target directory")
            return False
        job = self.session.new_job(kind, target, prompts, runs, self.controls.config(), focus)
        if job is None:
            return False
        self.message.hide()
        self.prompt_label.setText(self.controls.prompt_caption() if kind == "run" or len(prompts) == 1 else
                                  f"{len(prompts)} prompts of {self.controls.prompt_set.currentText()}")
        self.controls.set_busy(True)
        self.worker.cancel_event.clear()
        self.request_job.emit(job)
        return True

    def stop(self) -> None:
        if self.player.playing:
            self.player.stop()
        elif self.busy:
            self.worker.cancel()
            self.statusBar().showMessage("stopping …")

    # --- worker messages (GUI thread; the session stores, the timer redraws) ---------------
    @Slot(object)
    def on_message(self, msg) -> None:
        if isinstance(msg, Status):
            self.statusBar().showMessage(msg.text)
        elif isinstance(msg, Failed):
            self.on_failed(msg.text)
        elif isinstance(msg, Loaded):
            self.on_loaded(msg)
        elif self.session.apply(msg):
            if isinstance(msg, JobDone):
                self.on_job_done(msg)

    def on_failed(self, text: str) -> None:
        self.message.setText(text)
        self.message.show()
        self.statusBar().showMessage(text)

    def on_loaded(self, info: Loaded) -> None:
        """Mark each drafter's result; only what loaded joins the recent lists."""
        if info.target != self.loaded_target:
            self.session.costs.clear()  # measured on the previous target
        self.loaded_target = info.target
        self.environment = info.environment
        for p in self.controls.drafter_paths():
            d = info.drafters.get(p)
            detail = (f"{d.format} drafter, {d.block_size} drafts per round, {d.params:,} parameters"
                      + (", confidence head" if d.confidence else "")) if d else None
            if d is not None or p in info.errors:
                self.controls.mark_drafter(p, info.errors.get(p), detail)
            if d is not None:
                self.controls.set_trained(p, d.block_size)
        if self.prefs is not None:
            recent = self.prefs.add_recent("targets", self.controls.target_path() or info.target)
            self.controls.set_target(self.controls.target_path(), recent)
            for p in reversed(list(info.drafters)):
                self.controls.recent_drafters = self.prefs.add_recent("drafters", p)
        if not info.errors and not self.busy:
            self.message.hide()
        notes = list(info.notes) + [f"{Path(p).name}: {d.note}" for p, d in info.drafters.items() if d.note]
        if notes:
            self.statusBar().showMessage("; ".join(notes))

    def on_job_done(self, msg: JobDone) -> None:
        try:
            self.controls.set_busy(False)
            self.refresh()
            runs = self.session.runs
            if runs and any(r.done for r in runs) and not self.session.replay:
                keep = self.prefs.get("history/keep", settings.HISTORY_KEEP, int) if self.prefs else None
                max_mb = self.prefs.get("history/max_mb", settings.HISTORY_MAX_MB, int) if self.prefs else None
                problem = export.save_history(runs, self.loaded_target, self.session.shown_kind == "compare",
                                              self.session.prompt_count, keep,
                                              max_mb * 2**20 if max_mb is not None else None)
                if problem:
                    self.statusBar().showMessage(problem)
            if msg.cancelled:
                self.statusBar().showMessage("stopped: kept what was generated")
        finally:  # whatever happened above, the job is over (a headless run waits for this)
            self.job_finished.emit({"job": msg.job, "ok": msg.ok, "cancelled": msg.cancelled})

    # --- drawing --------------------------------------------------------------------------
    def shown_runs(self) -> tuple[Run | None, Run | None]:
        return self.session.shown_runs()

    @property
    def runs(self) -> list[Run]:
        return self.session.runs

    @Slot(int)
    def _tab_changed(self, _index: int) -> None:
        self.session.show_tab(COMPARE_TAB if self.tabs.currentWidget() is self.compare else RUN_TAB)
        self.refresh()

    @Slot()
    def refresh(self) -> None:
        if self._drawn == self.session.version:
            return
        self._drawn = self.session.version
        view = self.session.view()
        for pane in self.panes:
            pane.show_view(view)

    def closeEvent(self, e) -> None:
        self.timer.stop()
        self.save_settings()
        if self.download is not None:
            self.download.shutdown()
        self.shutdown_worker()
        super().closeEvent(e)
