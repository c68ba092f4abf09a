"""The main window: the controller between the person, the session and the worker thread.

What the person chose and what ran live in the Qt-free ``Session`` (the choices in
``session.choices``). Widgets show it and say what the person did; the window applies that to
the session and redraws: the left-hand panel from the choices, the right-hand side
(``app.panes.results``) from ``session.view()``, each only when its part changed (a 40 ms timer, and
at once after a person's action). No widget reaches into another.

Threading (MLX arrays belong to the thread that made them): one long-lived QThread runs
``Worker``; the window talks to it through queued signals and gets ``app.state.messages`` back, always
into a bound method of this GUI-thread object, which hands them to the session. Stop sets the
worker's ``threading.Event`` directly. Menus are ``app.window.menus``; the File menu's dialogs and steps
``file_menu`` (over the steps of ``app.files``); presentation mode's rules ``presentation``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from PySide6.QtCore import QByteArray, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QMainWindow,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from dspark import advice, blas
from dspark.config import GenerationConfig
from dspark.prompts import prompt_sets

from ..files import replay, run_export, settings
from ..panes.config_form import form_values
from ..panes.controls import ActionBar, ControlPanel
from ..panes.results import ResultsPanel
from ..panes.theme import NORMAL, PRESENTATION, Theme, palette, scaled, stylesheet
from ..panes.train import TrainPane
from ..state import diagnoses
from ..state.messages import Exported, Failed, JobDone, Loaded, LoadRequest, Status
from ..state.playlist import Playlist
from ..state.session import COMPARE_TAB, Session
from ..state.training import TRAIN_TAB, compare_set
from ..state.wording import in_app
from ..worker import WorkerThread
from . import file_menu, geometry, help_menu, kept_choices
from .menus import build_menus
from .presentation import Presenter

REFRESH_MS = 40
#: Short: it stands beside every status message while presenting.
PRESENTATION_KEYS = "Space → next · ← back · Ctrl+1-4 tabs · Esc"


class MainWindow(QMainWindow):
    job_finished = Signal(dict)  # {"job", "ok", "cancelled"}, emitted on the GUI thread

    def __init__(self, prefs: settings.Settings | None = None):
        super().__init__()
        self.setWindowTitle("DSpark Studio")
        self.prefs = prefs
        self.theme = NORMAL
        self.session = Session({s.name: list(s.prompts) for s in prompt_sets().values()})
        self.session.choices.set_config(form_values(GenerationConfig, {}))
        self._drawn = (-1, -1)  # the session's and the choices' versions on screen
        self.download = None  # the Download dialog, once opened
        self.device_check = None  # the first-launch GPU check's answer (dspark.device), once shown
        self.about_box = None
        self.playlist = Playlist()  # saved runs opened for replay
        self.player = replay.Player(self.on_message, self)  # replays deliver as the worker does
        self.normal_geometry = QByteArray()  # before presentation mode: what leaving restores and the settings keep
        self.presenter = Presenter(lambda: self.busy, self._replaying, self)
        self._build()
        build_menus(self)
        self.engine = WorkerThread(self.on_message, self)  # the model-owner thread
        self.presenter.changed.connect(self._presenting)
        self.presenter.step.connect(self._present_step)
        self.presenter.notice.connect(self.statusBar().showMessage)
        self.presentation_keys = []  # Space / → next, ← previous, Esc leaves: only while presenting
        for key, slot in (
            (Qt.Key_Space, self.presenter.next),
            (Qt.Key_Right, self.presenter.next),
            (Qt.Key_Left, self.presenter.previous),
            (Qt.Key_Escape, self.presenter.leave),
        ):
            sc = QShortcut(QKeySequence(key), self, context=Qt.WindowShortcut, enabled=False)
            sc.activated.connect(slot)
            self.presentation_keys.append(sc)
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        self.timer.start()
        self.apply_theme(NORMAL)

    # --- layout ---------------------------------------------------------------------------
    def _build(self) -> None:
        self.controls = ControlPanel()
        self.actions = ActionBar()
        self._connect_controls()
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
        ll.addWidget(self.actions)
        self.results = ResultsPanel()
        self.results.tab_chosen.connect(partial(self._chose, self.session.show_tab, ""))
        self.results.focus_chosen.connect(partial(self._chose, self.session.set_focus, ""))
        self.train = TrainPane(self.prefs)  # the Train tab: dspark train as a child process
        self.train.compare_asked.connect(self.compare_trained)
        self.results.add_tab(TRAIN_TAB, self.train, "Train", "Train a drafter with dspark train, and watch its curves")
        self.split = QSplitter(Qt.Horizontal)
        self.split.addWidget(self.left)
        self.split.addWidget(self.results)
        self.split.setStretchFactor(1, 1)
        self.split.setSizes([330, 1070])
        self.setCentralWidget(self.split)
        self.statusBar().showMessage("starting …")
        self.blas_note = QLabel()  # stays in the status bar: every speed on screen depends on it
        self.blas_note.setObjectName("note")
        if blas.is_slow():
            self.blas_note.setText(f"⚠ slow matrix products: {blas.describe()}")
            self.blas_note.setToolTip(
                "mlx[cpu] on Linux links a reference BLAS; with Debian's OpenBLAS\n"
                "installed the app loads it itself (dspark.blas) and runs many times faster."
            )
            self.statusBar().addPermanentWidget(self.blas_note)
        # while presenting, the keys stay said: the mode's first notice went with the next
        # status ("loading target …" at once when started with --presentation)
        self.keys_hint = QLabel(PRESENTATION_KEYS)
        self.keys_hint.setObjectName("caption")
        self.keys_hint.hide()
        self.statusBar().addPermanentWidget(self.keys_hint)

    def _connect_controls(self) -> None:
        """Each of the panel's signals: a change of the choices, then (for the models) a load."""
        c, a, ch = self.controls, self.actions, self.session.choices
        for signal, apply, load in (
            (c.target_chosen, ch.set_target, "always"),
            (c.drafter_added, partial(ch.add_drafter, select=True), "idle"),
            (c.drafter_removed, ch.remove_drafter, "idle"),
            (c.drafter_ticked, ch.tick, "idle"),
            (c.drafter_selected, lambda p: ch.select(p or None), ""),
            (c.prompt_edited, ch.set_prompt, ""),
            (c.prompt_stepped, ch.step_prompt, ""),
            (c.prompt_set_chosen, ch.choose_set, ""),
            (a.all_prompts_toggled, ch.set_all_prompts, ""),
            (c.config_edited, ch.set_config, ""),
        ):
            signal.connect(partial(self._chose, apply, load))
        a.run_clicked.connect(self.start_run)
        a.stop_clicked.connect(self.stop)
        a.compare_clicked.connect(self.start_compare)

    def _chose(self, apply, load: str, *args) -> None:
        """``apply`` the person's choice; ``load``: "always" (a target), "idle" (the drafters,
        unless a run is on) or "" (nothing to load)."""
        notice = apply(*args)
        if isinstance(notice, str):
            self.statusBar().showMessage(notice)
        if load == "always" or (load == "idle" and self.session.choices.target and not self.busy):
            self.load_models()
        self.refresh()

    def on_target_chosen(self, path: str) -> None:
        """Load it; it joins the recent targets once it has loaded (``on_loaded``)."""
        self._chose(self.session.choices.set_target, "always", path)

    def add_drafter(self, path: str, select: bool = False) -> None:
        self._chose(partial(self.session.choices.add_drafter, select=select), "idle", path)

    def step_prompt(self, delta: int) -> None:
        self._chose(self.session.choices.step_prompt, "", delta)

    def show_hint(self, text: str) -> None:
        """A word for a first start (``app.startup.FIRST_START``), above the choices: a permanent
        widget of the status bar took the room of every message there."""
        self.controls.show_hint(text)

    def show_tab(self, tab: str) -> None:
        """View ▸ Run / Compare / Rejections (Ctrl+1 2 3): a key for each tab, presenting too."""
        self._chose(self.session.show_tab, "", tab)

    def apply_theme(self, t: Theme) -> None:
        self.theme = t
        self.setPalette(palette(t))
        # dialogs are windows of their own and take the application's palette, not the window's:
        # under the stylesheet's white type the Open-run dialog's file names were white on white
        QApplication.instance().setPalette(palette(t))
        self.setStyleSheet(stylesheet(t))
        self.results.set_theme(t)
        self.train.set_theme(t)
        self.controls.ensurePolished()  # the panel as wide as its widgets at this type size, no wider
        bar = self.controls_scroll.verticalScrollBar().sizeHint().width()
        self.controls_scroll.setMinimumWidth(max(300, self.controls.minimumSizeHint().width() + bar + 4))
        self._drawn = (-1, -1)
        self.refresh()

    # --- models ---------------------------------------------------------------------------
    def load_models(self) -> None:
        c = self.session.choices
        if c.target:
            self.engine.load(LoadRequest(c.target, tuple(c.usable())))

    def restore(self, target: str | None, drafters: list[str], load: bool = True) -> None:
        """Show these models (already chosen: command line, last used or demo) and the saved
        prompt and settings, and load the models unless ``load`` is False (a replay needs none)."""
        self._chose(
            partial(kept_choices.restore, self.prefs, self.session.choices), "always" if load else "", target, drafters
        )

    # --- runs -----------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.session.busy or self.player.playing  # playing: a replay's files being read, too

    def start_run(self) -> None:
        """A speculative run with the selected drafter, then plain decoding; shown on the Run tab."""
        self._submit(self.session.run_job())

    def start_compare(self) -> None:
        """Every ticked drafter that can run, then plain decoding; shown on the Compare tab."""
        self._submit(self.session.compare_job())

    def diagnose(self) -> bool:
        """Run ▸ Diagnose (``app.state.diagnoses``): each ticked drafter in turn (none ticked: the selected
        one) on what Compare would run, on the worker (``dspark.diagnose``); the findings appear
        beside the plots, the runs shown stay. Stop ends it; Run waits for it, said."""
        job = self.session.diagnose_job()
        if job is not None:
            self.engine.diagnose(job)
        self.said()
        return job is not None

    def compare_trained(self, target: str, new: str, start: str, heldout: list[str]) -> None:
        """The Train tab's "Compare with the starting drafter": its target, the new drafter and the
        one it started from ticked, on the run's held-out prompts (else the prompt set's)."""
        c = self.session.choices
        name, prompts = compare_set(new, heldout)
        if name is None:
            self.on_failed(prompts)
            return
        if target and target != c.target:
            self.on_target_chosen(target)
        for path in (start, new):
            if path:
                self.add_drafter(path, select=path == new)
                c.tick(path, True)
        if prompts:
            c.add_set(name, prompts)
            c.choose_set(name)
        c.set_all_prompts(True)
        self.show_tab(COMPARE_TAB)
        self.start_compare()

    def open_training(self, folder: str, wait: bool = False) -> bool:
        """``--train-run DIR``: that run on the Train tab (``wait``: its whole log read now)."""
        self.show_tab(TRAIN_TAB)
        self.statusBar().showMessage(f"the training run in {folder}")
        return self.train.open_run(folder, wait=wait)

    def _submit(self, job) -> None:
        if job is not None:
            self.engine.run(job)
        self.said()

    def stop(self) -> None:
        if self.player.playing:
            self.player.stop()
        elif self.busy:
            self.engine.cancel()
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
        elif isinstance(msg, Exported):
            self.session.clear_message()
            self.statusBar().showMessage(msg.text)
        elif self.session.apply(msg):
            if isinstance(msg, JobDone):
                self.on_job_done(msg)

    def on_failed(self, text: str) -> None:
        self.session.fail(in_app(text))
        self.said()

    def said(self) -> None:
        """Whatever the last action did, on screen now; its sentence also in the status bar."""
        if self.session.message:
            self.statusBar().showMessage(self.session.message)
        self.refresh()

    def on_loaded(self, info: Loaded) -> None:
        """Mark each drafter's result; only what loaded joins the recent lists."""
        c = self.session.choices
        self.session.loaded(info)
        if self.prefs is not None:
            c.set_target(c.target or info.target, self.prefs.add_recent("targets", c.target or info.target))
            for p in reversed(list(info.drafters)):
                c.recent_drafters = self.prefs.add_recent("drafters", p)
        notes = list(info.notes) + [f"{Path(p).name}: {d.note}" for p, d in info.drafters.items() if d.note]
        if notes:
            self.statusBar().showMessage("; ".join(notes))
        self.refresh()

    def on_job_done(self, msg: JobDone) -> None:
        try:
            self.refresh()
            diagnosis = self.session.job is not None and self.session.job.kind == diagnoses.KIND
            if not self.session.replay and not diagnosis:  # a diagnosis leaves the shown runs as they were
                problem = run_export.keep_in_history(self.session, self.prefs)
                if problem:
                    self.statusBar().showMessage(problem)
                else:
                    self._say_why_nothing_paid()
            if msg.cancelled:
                self.statusBar().showMessage(
                    "stopped: "
                    + ("the drafters diagnosed by then keep their findings" if diagnosis else "kept what was generated")
                )
        finally:  # whatever happened above, the job is over (a headless run waits for this)
            self.presenter.job_ended()
            self.job_finished.emit({"job": msg.job, "ok": msg.ok, "cancelled": msg.cancelled})

    def _say_why_nothing_paid(self) -> None:
        """A finished run that bought nothing for a clear reason (a slow BLAS; auto decoding every
        token plainly): the reason and its remedy in the status bar (dspark.advice)."""
        speculative = next((r for r in self.session.shown_runs() if r is not None and r.method == "speculative"), None)
        if speculative is None or not speculative.done or speculative.summary is None:
            return
        config = speculative.config
        note = advice.after_run(
            speculative.summary, policy=str(config.get("policy", "fixed")), block_size=config.get("block_size")
        )
        if note:
            self.statusBar().showMessage(note)

    # --- files: replay, export, benchmarks (the dialogs and steps: app.window.file_menu) ------------
    def choose_replay(self) -> None:
        file_menu.choose_replay(self)

    def open_replay(self, paths: list[str], speed: str | None = None) -> bool:
        return file_menu.open_replay(self, paths, speed)

    def play_recording(self, index: int) -> bool:
        return file_menu.play_recording(self, index)

    def export_data(self, fmt: str, comparison: bool, path: str | None = None) -> Path | None:
        return file_menu.export_data(self, fmt, comparison, path)

    def export_rejections(self, folder: str | None = None) -> list[Path]:
        return file_menu.export_rejections(self, folder)

    def plot_widgets(self) -> dict[str, QWidget]:
        return {**self.results.plot_widgets(), **self.train.plot_widgets(), "window": self}

    def export_pngs(self, folder: str | None = None) -> list[Path]:
        return file_menu.export_pngs(self, folder)

    def open_bench(self, path: str) -> bool:
        return file_menu.open_bench(self, path)

    def save_comparison(self, folder: str | None = None) -> Path | None:
        return file_menu.save_comparison(self, folder)

    def measure_costs(self, remeasure: bool = True) -> bool:
        return file_menu.measure_costs(self, remeasure)

    def export_drafter(self, request=None) -> bool:
        return file_menu.export_drafter(self, request)

    def show_device_check(self, check) -> None:
        help_menu.show_device_check(self, check)

    def show_about(self) -> None:
        help_menu.show_about(self)

    def open_download(self):
        return file_menu.open_download(self)

    # --- presentation mode and the window's place ------------------------------------------------
    @Slot(bool)
    def _presenting(self, on: bool) -> None:
        """No controls or menus, the prompt shown large, every type size the window's, full screen."""
        if on:
            self._was_maximized = self.isMaximized()
            self.normal_geometry, self._normal_rect = self.saveGeometry(), self.geometry()
        for sc in self.presentation_keys:
            sc.setEnabled(on)
        self.keys_hint.setVisible(on)
        self.results.set_presenting(on)
        if not on:  # normal type first: beside the large type the controls would widen the window's minimum
            self.apply_theme(NORMAL)
        self.left.setVisible(not on)
        self.menuBar().setVisible(not on)
        if on:
            self.apply_theme(self.presentation_theme())
            self.setFocus()
            if self.presenter.fullscreen:
                self.showFullScreen()
        else:
            geometry.leave_full_screen(self, self._normal_rect, self._was_maximized, self.presenter.fullscreen)

    def presentation_theme(self) -> Theme:
        """Every type size in proportion to what the audience sees: the screen when full screen."""
        size = self.screen().geometry().size() if self.presenter.fullscreen and self.screen() else self.size()
        return scaled(PRESENTATION, size.width(), size.height())

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        if self.presenter.active and not self.presenter.fullscreen:  # full screen: the screen's size already
            QTimer.singleShot(0, self._rescale)

    def _rescale(self) -> None:
        if self.presenter.active and self.presentation_theme() != self.theme:
            self.apply_theme(self.presentation_theme())

    def _present_step(self, delta: int) -> None:
        if self._replaying():
            self.play_recording(self.playlist.index + delta)
        else:
            self.step_prompt(delta)
            self.start_run()

    def _replaying(self) -> bool:
        return bool(self.session.replay and self.playlist)

    def place_on_screen(self) -> None:
        """The saved geometry (else the default size), fitted to the screen's available area."""
        saved = self.prefs.get("window/geometry", QByteArray(), QByteArray) if self.prefs else None
        geometry.place(self, saved, self.available_area())

    def available_area(self):
        return geometry.available_area(self)

    # --- drawing ------------------------------------------------------------------------------
    @Slot()
    def refresh(self) -> None:
        """Redraw what changed: the left-hand panel from the choices, the rest from one view."""
        drawn = (self.session.version, self.session.choices.version)
        if drawn == self._drawn:
            return
        if drawn[1] != self._drawn[1]:
            self.controls.show_choices(self.session.choices)
            self.train.show_choices(self.session.choices)
            self.actions.show_choices(self.session.choices)
        if drawn[0] != self._drawn[0]:
            view = self.session.view()
            self.actions.set_busy(view.busy)
            self.results.show_view(view)
        self._drawn = drawn

    def closeEvent(self, e) -> None:
        self.timer.stop()
        if self.prefs is not None:
            kept_choices.save(
                self.prefs, self.session.choices, self.normal_geometry if self.presenter.active else self.saveGeometry()
            )
        if self.download is not None:
            self.download.shutdown()
        self.train.shutdown()
        self.engine.shutdown()
        super().closeEvent(e)
