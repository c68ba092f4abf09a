"""The main window: wires the panes to the worker thread.

Threading (see shared/reference/app.md): one long-lived QThread runs ``app.worker.Worker``;
the window talks to it through queued signals and gets plain data back, always into bound
methods of this GUI-thread object. Those slots only store events; a 40 ms timer redraws the
panes from what was stored. Stop sets the worker's ``threading.Event`` directly.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QByteArray, QThread, QTimer, Qt, Signal, Slot
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog, QLabel, QMainWindow, QScrollArea, QSplitter, QTabWidget, QVBoxLayout, QWidget,
)

from app import export, settings
from app.compare import CompareView
from app.panes.controls import ControlPanel, drafter_label
from app.panes.draft_grid import DraftPane
from app.panes.header import HeaderStrip
from app.panes.plots import PlotsPane
from app.panes.text_view import TextPane
from app.presentation import Presenter
from app.prompts import prompt_sets
from app.runs import BASELINE, RunRecord
from app.theme import NORMAL, Theme, palette, stylesheet
from app.worker import Worker

REFRESH_MS = 40


class MainWindow(QMainWindow):
    request_load = Signal(dict)
    request_job = Signal(dict)
    request_shutdown = Signal()
    job_finished = Signal(dict)  # {"job", "ok", "cancelled"}, emitted on the GUI thread

    def __init__(self, prefs: settings.Settings | None = None):
        super().__init__()
        self.setWindowTitle("DSpark Studio")
        self.prefs = prefs
        self.theme = NORMAL
        self.runs: list[RunRecord] = []
        self.by_key: dict[int, RunRecord] = {}
        self.job_id, self.job_kind, self.busy = 0, "run", False
        self.loaded_target: str | None = None
        self._dirty = False
        self._text_key, self._text_rounds = None, 0
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
        self.controls = ControlPanel(prompt_sets())
        self.controls_scroll = QScrollArea()
        self.controls_scroll.setObjectName("controls")
        self.controls_scroll.setWidget(self.controls)
        self.controls_scroll.setWidgetResizable(True)
        self.controls_scroll.setMinimumWidth(300)
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
        top = QSplitter(Qt.Horizontal)
        top.addWidget(self.text)
        top.addWidget(self.drafts)
        top.setSizes([520, 420])
        self.run_split = QSplitter(Qt.Vertical)
        self.run_split.addWidget(top)
        self.run_split.addWidget(self.plots)
        self.run_split.setSizes([430, 300])
        self.compare = CompareView()
        self.tabs = QTabWidget()
        self.tabs.addTab(self.run_split, "Run")
        self.tabs.addTab(self.compare, "Compare")

        right = QWidget()
        right.setObjectName("panel")
        rl = QVBoxLayout(right)
        rl.setContentsMargins(4, 4, 4, 4)
        for w in (self.message, self.prompt_label, self.header):
            rl.addWidget(w)
        rl.addWidget(self.tabs, 1)
        self.split = QSplitter(Qt.Horizontal)
        self.split.addWidget(self.controls_scroll)
        self.split.addWidget(right)
        self.split.setStretchFactor(1, 1)
        self.split.setSizes([330, 1070])
        self.setCentralWidget(self.split)
        self._menus()
        self.statusBar().showMessage("starting …")

    def _menus(self) -> None:
        def act(menu, text, slot, key=None):
            a = QAction(text, self)
            if key:
                a.setShortcut(QKeySequence(key))
            a.triggered.connect(slot)
            menu.addAction(a)
            self.addAction(a)  # shortcuts keep working while the menu bar is hidden
            return a

        m = self.menuBar().addMenu("&File")
        act(m, "Open target…", self.controls._browse_target, "Ctrl+O")
        act(m, "Add drafter…", self.controls._browse_drafter, "Ctrl+D")
        m.addSeparator()
        act(m, "Export run as JSON…", lambda: self.export_data("json", False))
        act(m, "Export run as CSV…", lambda: self.export_data("csv", False))
        act(m, "Export comparison as JSON…", lambda: self.export_data("json", True))
        act(m, "Export comparison as CSV…", lambda: self.export_data("csv", True))
        act(m, "Save plots as PNG…", self.export_pngs, "Ctrl+Shift+S")
        m.addSeparator()
        act(m, "Quit", self.close, "Ctrl+Q")
        m = self.menuBar().addMenu("&Run")
        act(m, "Run", self.start_run, "Ctrl+R")
        act(m, "Stop", self.stop, "Ctrl+.")
        act(m, "Compare drafters", self.start_compare, "Ctrl+Shift+R")
        act(m, "Next prompt", lambda: self.controls.step_prompt(1), "Ctrl+Right")
        m = self.menuBar().addMenu("&View")
        act(m, "Presentation mode", lambda: self.presenter.toggle(), "F11")

    def apply_theme(self, t: Theme) -> None:
        self.theme = t
        self.setPalette(palette(t))
        self.setStyleSheet(stylesheet(t))
        for pane in (self.text, self.drafts, self.plots, self.compare):
            pane.set_theme(t)
        self._text_key = None  # re-render the text in the new colours
        self._dirty = True
        self.refresh()

    # --- worker ---------------------------------------------------------------------------
    def _start_worker(self) -> None:
        self.thread_ = QThread(self)
        self.thread_.setObjectName("dspark-model-owner")
        self.worker = Worker()
        self.worker.moveToThread(self.thread_)
        self.request_load.connect(self.worker.load)
        self.request_job.connect(self.worker.run_job)
        self.request_shutdown.connect(self.worker.shutdown)
        self.worker.status.connect(self.on_status)
        self.worker.failed.connect(self.on_failed)
        self.worker.loaded.connect(self.on_loaded)
        self.worker.run_started.connect(self.on_run_started)
        self.worker.round_done.connect(self.on_round)
        self.worker.run_done.connect(self.on_run_done)
        self.worker.job_done.connect(self.on_job_done)
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
            self.request_load.emit({"target": target, "drafters": self.controls.drafter_paths()})

    # --- user actions ---------------------------------------------------------------------
    @Slot(str)
    def on_target_chosen(self, path: str) -> None:
        if self.prefs is not None:
            self.controls.set_target(path, self.prefs.add_recent("targets", path))
        self.load_models()

    @Slot()
    def on_drafters_changed(self) -> None:
        if self.prefs is not None:
            for p in reversed(self.controls.drafter_paths()):
                self.controls.recent_drafters = self.prefs.add_recent("drafters", p)
        if self.controls.target_path() and not self.busy:
            self.load_models()

    def start_run(self) -> None:
        drafter = self.controls.run_drafter()
        runs = [{"label": drafter_label(drafter), "drafter": drafter}] if drafter else []
        self._submit("run", runs + [{"label": BASELINE, "drafter": None}], [self.controls.prompt_text()])

    def start_compare(self) -> None:
        runs = [{"label": drafter_label(p), "drafter": p} for p in self.controls.checked_drafters()]
        prompts = self.controls.prompts() if self.controls.all_prompts.isChecked() else [self.controls.prompt_text()]
        self._submit("compare", runs + [{"label": BASELINE, "drafter": None}], prompts)
        self.tabs.setCurrentWidget(self.compare)

    def _submit(self, kind: str, runs: list[dict], prompts: list[str]) -> None:
        if self.busy:
            return
        if not self.controls.target_path():
            self.on_failed("no target model chosen: pick a target directory")
            return
        self.job_id += 1
        self.job_kind, self.busy = kind, True
        self.runs, self.by_key = [], {}
        self._text_key = None
        self.message.hide()
        self.prompt_label.setText(prompts[0].strip().splitlines()[0][:120] if prompts and prompts[0].strip() else "")
        self.controls.set_busy(True)
        self.worker.cancel_event.clear()
        self.request_job.emit({
            "id": self.job_id, "target": self.controls.target_path(), "prompts": prompts,
            "runs": runs, "config": self.controls.config(),
        })
        self._dirty = True

    def stop(self) -> None:
        if self.busy:
            self.worker.cancel()
            self.statusBar().showMessage("stopping …")

    # --- worker signals (GUI thread; store only, the timer redraws) ------------------------
    @Slot(str)
    def on_status(self, text: str) -> None:
        self.statusBar().showMessage(text)

    @Slot(str)
    def on_failed(self, text: str) -> None:
        self.message.setText(text)
        self.message.show()
        self.statusBar().showMessage(text)

    @Slot(dict)
    def on_loaded(self, info: dict) -> None:
        self.loaded_target = info["target"]
        for p in self.controls.drafter_paths():
            self.controls.mark_drafter(p, info["errors"].get(p))
        if not info["errors"] and not self.busy:
            self.message.hide()
        notes = [f"{Path(p).name}: {d['note']}" for p, d in info["drafters"].items() if d.get("note")]
        if notes:
            self.statusBar().showMessage("; ".join(notes))

    @Slot(dict)
    def on_run_started(self, info: dict) -> None:
        if info["job"] != self.job_id:
            return
        rec = RunRecord(info["key"], info["label"], info["method"], info["prompt"], info["prompt_index"],
                        info["drafter"], info["config"])
        self.runs.append(rec)
        self.by_key[rec.key] = rec
        self.message.hide()  # earlier load errors stay marked (⚠) in the drafter list
        self._dirty = True

    @Slot(object)
    def on_round(self, payload) -> None:
        key, ev, texts = payload
        rec = self.by_key.get(key)
        if rec is not None:
            rec.rounds.append(ev)
            rec.drafted_text.append(texts)
            self._dirty = True

    @Slot(object)
    def on_run_done(self, payload) -> None:
        key, summary = payload
        rec = self.by_key.get(key)
        if rec is not None:
            rec.summary = summary
            self._dirty = True

    @Slot(dict)
    def on_job_done(self, info: dict) -> None:
        if info["job"] != self.job_id:
            return
        self.busy = False
        self.controls.set_busy(False)
        self._dirty = True
        self.refresh()
        if self.runs and any(r.done for r in self.runs):
            export.save_history(settings.history_dir(), self.runs, self.loaded_target, self.job_kind == "compare")
        if info["cancelled"]:
            self.statusBar().showMessage("stopped: kept what was generated")
        self.job_finished.emit(info)

    # --- drawing --------------------------------------------------------------------------
    def shown_runs(self) -> tuple[RunRecord | None, RunRecord | None]:
        """The speculative run the Run tab shows (the latest), and the baseline of its prompt."""
        spec = next((r for r in reversed(self.runs) if r.method == "speculative"), None)
        bases = [r for r in self.runs if r.method == "baseline"]
        if spec is not None:
            base = next((r for r in bases if r.prompt_index == spec.prompt_index), None)
        else:
            base = bases[-1] if bases else None
        return spec, base

    @Slot()
    def refresh(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        spec, base = self.shown_runs()
        shown = spec if spec is not None else base
        if shown is None or shown.key != self._text_key:
            self._text_key = shown.key if shown else None
            self._text_rounds = 0
            self.text.text.clear_tokens(shown.prompt if shown else "")
        if shown is not None and len(shown.rounds) > self._text_rounds:
            new = shown.rounds[self._text_rounds:]
            self.text.text.append_tokens([t for r in new for t in r.committed])
            self._text_rounds += len(new)
        self.drafts.set_rounds(spec.rounds if spec else [], spec.drafted_text if spec else [])
        self.plots.show_runs(spec, base)
        self.header.show_runs(spec, base)
        if self.job_kind == "compare":
            self.compare.show_runs(self.runs)

    # --- export ---------------------------------------------------------------------------
    def export_data(self, fmt: str, comparison: bool, path: str | None = None) -> Path | None:
        """The last job's runs (a run, or a comparison with its table rows) as JSON or CSV."""
        runs = self.runs
        if not runs:
            self.on_failed("nothing to export yet: run or compare first")
            return None
        if path is None:
            name = f"{'comparison' if comparison else 'run'}.{fmt}"
            path, _ = QFileDialog.getSaveFileName(self, "Export", str(settings.exports_dir() / name), f"*.{fmt}")
            if not path:
                return None
        try:
            if fmt == "json":
                out = export.write_json(path, runs, self.loaded_target, comparison)
            else:
                out = export.write_csv(path, runs, comparison)
        except OSError as e:
            self.on_failed(f"could not write {path}: {e.strerror or e}")
            return None
        self.statusBar().showMessage(f"exported {out}")
        return out

    def plot_widgets(self) -> dict[str, QWidget]:
        return {**self.plots.plots(), "draft_rows": self.drafts, "text": self.text,
                **self.compare.plots(), "window": self}

    def export_pngs(self, folder: str | None = None) -> list[Path]:
        if folder is None:
            folder = QFileDialog.getExistingDirectory(self, "Save plots as PNG into", str(settings.exports_dir()))
            if not folder:
                return []
        out = export.write_pngs(folder, self.plot_widgets())
        self.statusBar().showMessage(f"saved {len(out)} PNG files to {folder}")
        return out

    # --- settings and quitting -------------------------------------------------------------
    def restore(self, target: str | None, drafters: list[str]) -> None:
        """Show these models (already chosen by main: command line, last used or demo)."""
        p = self.prefs
        if p is not None:
            geo = p.get("window/geometry", QByteArray(), QByteArray)
            if not geo.isEmpty():
                self.restoreGeometry(geo)
            self.controls.set_config({k[7:]: p.get(k, None, str) for k in p.q.allKeys()
                                      if k.startswith("config/") and p.get(k, None, str) not in (None, "")})
            self.controls.recent_drafters = p.recent("drafters")
        self.controls.set_target(target, p.recent("targets") if p else [])
        for d in drafters:
            self.controls.add_drafter(d)
        set_name = p.get("prompt/set", "", str) if p else ""
        if set_name:
            self.controls.prompt_set.setCurrentText(set_name)
        text = p.get("prompt/text", "", str) if p else ""
        if text:
            self.controls.prompt.setPlainText(text)
        else:
            self.controls.select_prompt(0)
        self.load_models()

    def save_settings(self) -> None:
        p = self.prefs
        if p is None:
            return
        if not self.presenter.active:
            p.set("window/geometry", self.saveGeometry())
        p.set("models/target", self.controls.target_path())
        p.set("models/drafters", self.controls.drafter_paths())
        p.set("prompt/set", self.controls.prompt_set.currentText())
        p.set("prompt/text", self.controls.prompt_text())
        for k, v in self.controls.config().items():
            p.set(f"config/{k}", "" if v is None else str(v))
        p.sync()

    def closeEvent(self, e) -> None:
        self.timer.stop()
        self.save_settings()
        self.shutdown_worker()
        super().closeEvent(e)
