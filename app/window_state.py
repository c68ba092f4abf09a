"""The window's state across sessions (a mixin of ``MainWindow``): where it sits on the screen,
and the models, prompt and settings it restores and saves (``app.settings``)."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QRect
from PySide6.QtGui import QGuiApplication

from . import geometry
from .panes.controls import TYPED


class StateMixin:
    # --- settings and quitting -------------------------------------------------------------
    def place_on_screen(self) -> None:
        """The saved geometry (else the default size), fitted to the screen's available area."""
        geo = self.prefs.get("window/geometry", QByteArray(), QByteArray) if self.prefs else QByteArray()
        if geo.isEmpty() or not self.restoreGeometry(geo):
            self.setGeometry(geometry.default_rect(self.available_area()))
        self.fit_to_screen()

    def available_area(self) -> QRect:
        """Where the window's inside may go: the screen's available area less the frame."""
        screen = self.screen() or QGuiApplication.primaryScreen()
        return geometry.client_area(screen.availableGeometry(), self.frameGeometry(), self.geometry())

    def fit_to_screen(self) -> None:
        if not (self.isMaximized() or self.isFullScreen()):
            self.setGeometry(geometry.fit(self.geometry(), self.available_area()))

    def restore(self, target: str | None, drafters: list[str], load: bool = True) -> None:
        """Show these models (already chosen by main: command line, last used or demo), and
        load them unless ``load`` is False (a replay needs no model)."""
        p = self.prefs
        if p is not None:
            unreadable = []
            self.controls.set_config(p.section("config"), lambda name, value: unreadable.append(name))
            if unreadable:
                self.statusBar().showMessage(f"the settings file had unreadable values for {', '.join(unreadable)}: "
                                             f"defaults are used")
            self.controls.recent_drafters = p.recent("drafters")
        self.controls.set_target(target, p.recent("targets") if p else [])
        self.controls.blockSignals(not load)  # adding a drafter asks for a load
        for d in drafters:
            self.controls.add_drafter(d)
        self.controls.blockSignals(False)
        typed = [t for t in p.get("prompt/typed", [], list) if isinstance(t, str) and t.strip()] if p else []
        if typed:
            self.controls.prompt_sets[TYPED] = typed
            self.controls.prompt_set.addItem(TYPED)
        set_name = p.get("prompt/set", "", str) if p else ""
        if set_name:
            self.controls.prompt_set.setCurrentText(set_name)
        text = p.get("prompt/text", "", str) if p else ""
        if text:
            self.controls.prompt.setPlainText(text)
        else:
            self.controls.select_prompt(0)
        if load:
            self.load_models()

    def save_settings(self) -> None:
        p = self.prefs
        if p is None:
            return
        p.set("window/geometry", self.presenter.normal_geometry if self.presenter.active else self.saveGeometry())
        p.set("prompt/typed", self.controls.prompt_sets.get(TYPED, []))
        p.set("models/target", self.controls.target_path())
        p.set("models/drafters", self.controls.drafter_paths())
        p.set("prompt/set", self.controls.prompt_set.currentText())
        p.set("prompt/text", self.controls.prompt_text())
        for k, v in self.controls.config().items():
            p.set(f"config/{k}", "" if v is None else str(v))
        p.sync()

