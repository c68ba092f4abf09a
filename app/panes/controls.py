"""The left-hand panel: target and drafter pickers, the prompt, generation settings, and
Run / Stop / Compare. It shows the session's ``Choices`` (``show_choices``) and says what the
person did through its signals; the window applies that to the session. It keeps no choice of
its own: a drafter's load error, the prompt's place in its set and the settings live there.

The Run / Stop / Compare bar (``ActionBar``) is a widget of its own that the window pins below
the scrolling panel, so it is on screen at any window height."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from dspark.config import GenerationConfig

from ..state.choices import Choices, drafter_label
from .config_form import ConfigForm

PATH_ROLE = Qt.UserRole  # which drafter an item shows (its directory)
#: Keys the window's shortcuts own even while the prompt box has the focus (it would move its cursor).
PASSED_ON = (QKeySequence("Ctrl+Right"), QKeySequence("Ctrl+Left"))


class PromptBox(QPlainTextEdit):
    """The prompt: Tab moves the focus on (a prompt is code, but a keyboard must get out), and
    Ctrl+→ / Ctrl+← step the prompt set as they do everywhere else in the window."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setTabChangesFocus(True)

    def event(self, e) -> bool:
        if e.type() == QEvent.ShortcutOverride and QKeySequence(e.keyCombination()) in PASSED_ON:
            e.ignore()  # not taken here: the shortcut fires
            return False
        return super().event(e)


class ControlPanel(QWidget):
    target_chosen = Signal(str)
    drafter_added = Signal(str)  # a directory the person picked: added and selected
    drafter_removed = Signal(str)
    drafter_ticked = Signal(str, bool)
    drafter_selected = Signal(str)
    prompt_edited = Signal(str)
    prompt_stepped = Signal(int)
    prompt_set_chosen = Signal(str)
    config_edited = Signal(dict)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("controlsInner")
        self.choices = Choices()  # the choices on screen (``show_choices``); read here, never changed
        self._shown = None  # what each part shows, so a redraw touches only what changed
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        # a first start's word on what is open (the demo models) and how to open one's own: here,
        # wrapped above the choices it is about, where in the status bar it cut every message short
        self.hint = QLabel()
        self.hint.setObjectName("caption")
        self.hint.setWordWrap(True)
        self.hint.hide()
        lay.addWidget(self.hint)
        lay.addWidget(self._target_group())
        lay.addWidget(self._drafters_group())
        lay.addWidget(self._prompt_group(), 1)
        lay.addWidget(self._generation_group())

    # --- building -------------------------------------------------------------------------
    def _target_group(self) -> QGroupBox:
        g = QGroupBox("Target model")
        gl = QHBoxLayout(g)
        self.target = QComboBox()
        self.target.setEditable(True)
        self.target.setInsertPolicy(QComboBox.NoInsert)
        # a long path scrolls inside the box; it never widens the panel (or the window)
        self.target.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.target.setMinimumContentsLength(12)
        self.target.setToolTip(
            "A Gemma-4 model directory (config.json, *.safetensors, tokenizer). Recent ones are listed."
        )
        self.target.activated.connect(self._target_activated)
        self.target.lineEdit().editingFinished.connect(self._target_activated)
        browse = QPushButton("…")
        browse.setToolTip("Choose a target directory (Ctrl+O)")
        browse.clicked.connect(self.browse_target)
        gl.addWidget(self.target, 1)
        gl.addWidget(browse)
        return g

    def _drafters_group(self) -> QGroupBox:
        g = QGroupBox("Drafters")
        gl = QVBoxLayout(g)
        self.drafters = QListWidget()
        self.drafters.setToolTip(
            "Run uses the selected drafter; Compare uses every ticked one.\n"
            "With no drafter, Run does plain decoding only."
        )
        self.drafters.setMaximumHeight(110)
        self.drafters.itemChanged.connect(self._item_changed)
        self.drafters.currentItemChanged.connect(self._current_changed)
        row = QHBoxLayout()
        add = QToolButton()
        add.setText("Add…")
        add.setToolTip("Add a drafter directory (Ctrl+D); the arrow lists recent ones")
        add.setPopupMode(QToolButton.MenuButtonPopup)
        add.clicked.connect(self.browse_drafter)
        self.recent_menu = QMenu(add)
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        add.setMenu(self.recent_menu)
        self.remove_b = QPushButton("Remove")
        self.remove_b.clicked.connect(self._remove_drafter)
        row.addWidget(add)
        row.addWidget(self.remove_b)
        row.addStretch(1)
        gl.addWidget(self.drafters)
        gl.addLayout(row)
        return g

    def _prompt_group(self) -> QGroupBox:
        g = QGroupBox("Prompt")
        gl = QVBoxLayout(g)
        row = QHBoxLayout()
        self.prompt_set = QComboBox()
        self.prompt_set.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.prompt_set.setMinimumContentsLength(10)
        self.prompt_set.setToolTip("Prompt set: ◀ ▶ step through it (Ctrl+← / Ctrl+→; Space / → in presentation mode)")
        self.prompt_set.currentTextChanged.connect(self.prompt_set_chosen)
        prev_b, next_b = QPushButton("◀"), QPushButton("▶")
        for b in (prev_b, next_b):
            b.setFixedWidth(34)
        prev_b.clicked.connect(lambda: self.prompt_stepped.emit(-1))
        next_b.clicked.connect(lambda: self.prompt_stepped.emit(1))
        self.counter = QLabel()  # "3 / 12": where ◀ ▶ are in the set
        self.counter.setObjectName("caption")
        self.counter.setToolTip("This prompt's place in the set (\"typed\": not one of the set's)")
        # the set's name on a row of its own: beside ◀ k / N ▶ the box was clipped to a few letters
        row.addWidget(prev_b)
        row.addWidget(self.counter, 1, Qt.AlignCenter)
        row.addWidget(next_b)
        self.prompt = PromptBox()
        self.prompt.setPlaceholderText("Type a prompt, or pick one from a set")
        self.prompt.setMinimumHeight(70)
        self.prompt.textChanged.connect(lambda: self.prompt_edited.emit(self.prompt.toPlainText()))
        gl.addWidget(self.prompt_set)
        gl.addLayout(row)
        gl.addWidget(self.prompt, 1)
        return g

    def _generation_group(self) -> QGroupBox:
        g = QGroupBox("Generation")
        gl = QVBoxLayout(g)
        self.form = ConfigForm(GenerationConfig)
        self.form.changed.connect(lambda: self.config_edited.emit(self.form.values()))
        gl.addWidget(self.form)
        return g

    # --- showing the choices ----------------------------------------------------------------
    def show_choices(self, c: Choices) -> None:
        """Show ``c``, touching only the widgets whose part of it changed (a redraw never moves
        the cursor of a box being typed in, nor a list being scrolled)."""
        self.choices = c
        parts = {
            "target": (c.target, tuple(c.recent_targets)),
            "drafters": (tuple((d.path, d.checked, d.error, d.detail) for d in c.drafters), c.selected),
            "sets": (tuple(c.prompt_sets), c.set_name),
            "prompt": (c.prompt, c.counter()),
            "config": tuple(sorted(c.config.items(), key=lambda kv: kv[0])),
        }
        shown = self._shown or {}
        self._shown = parts
        for key, draw in (
            ("target", self._show_target),
            ("drafters", self._show_drafters),
            ("sets", self._show_sets),
            ("prompt", self._show_prompt),
            ("config", self._show_config),
        ):
            if shown.get(key) != parts[key]:
                draw(c)

    def _show_target(self, c: Choices) -> None:
        self.target.blockSignals(True)
        self.target.clear()
        self.target.addItems([p for p in c.recent_targets if p])
        self.target.setEditText(c.target)
        self.target.blockSignals(False)

    def _show_drafters(self, c: Choices) -> None:
        """An item per drafter, kept while it is listed (a redraw keeps the person's place);
        one that went is taken out, one that came put in at its place."""
        self.drafters.blockSignals(True)
        paths = c.paths()
        for i in reversed(range(self.drafters.count())):
            if self.drafters.item(i).data(PATH_ROLE) not in paths:
                self.drafters.takeItem(i)
        for i, d in enumerate(c.drafters):
            if i >= self.drafters.count() or self.drafters.item(i).data(PATH_ROLE) != d.path:
                item = QListWidgetItem()
                item.setData(PATH_ROLE, d.path)
                item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
                self.drafters.insertItem(i, item)
        for i, d in enumerate(c.drafters):
            item = self.drafters.item(i)
            item.setText(d.shown + ("  ⚠" if d.error else ""))
            item.setToolTip(d.path + (f"\n{d.error}" if d.error else f"\n{d.detail}" if d.detail else ""))
            item.setCheckState(Qt.Checked if d.checked else Qt.Unchecked)
            if d.path == c.selected:
                self.drafters.setCurrentItem(item)
        if c.selected is None:
            self.drafters.setCurrentRow(-1)
            self.drafters.clearSelection()
        self.drafters.blockSignals(False)

    def _show_sets(self, c: Choices) -> None:
        self.prompt_set.blockSignals(True)
        if [self.prompt_set.itemText(i) for i in range(self.prompt_set.count())] != list(c.prompt_sets):
            self.prompt_set.clear()
            self.prompt_set.addItems(list(c.prompt_sets))
        self.prompt_set.setCurrentText(c.set_name)
        # a long set name is elided in the box at 1280x800: its whole name is a hover away
        self.prompt_set.setToolTip(
            f"{c.set_name}: ◀ ▶ step through it (Ctrl+← / Ctrl+→; Space / → in presentation mode)"
        )
        self.prompt_set.blockSignals(False)

    def _show_prompt(self, c: Choices) -> None:
        if self.prompt.toPlainText() != c.prompt:
            self.prompt.blockSignals(True)
            self.prompt.setPlainText(c.prompt)
            self.prompt.blockSignals(False)
        self.counter.setText(c.counter())

    def _show_config(self, c: Choices) -> None:
        if c.config and self.form.values() != c.config:
            self.form.blockSignals(True)
            self.form.set_values(c.config)
            self.form.blockSignals(False)

    def show_hint(self, text: str) -> None:
        self.hint.setText(text)
        self.hint.setVisible(bool(text))

    def config(self) -> dict:
        """The settings form's values (``GenerationConfig`` fields), as the person left them."""
        return self.form.values()

    def target_path(self) -> str:
        """The path in the target box (typed, perhaps not chosen yet)."""
        return self.target.currentText().strip()

    # --- what the person does ---------------------------------------------------------------
    def _target_activated(self, *_) -> None:
        if self.target_path():
            self.target_chosen.emit(self.target_path())

    def browse_target(self) -> None:
        d = QFileDialog.getExistingDirectory(self, "Target model directory", self.target_path())
        if d:
            self.target_chosen.emit(d)

    def browse_drafter(self) -> None:
        start = self.choices.run_drafter() or self.target_path()
        d = QFileDialog.getExistingDirectory(self, "Drafter directory", start)
        if d:
            self.drafter_added.emit(d)

    def _fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        for p in self.choices.recent_drafters:
            self.recent_menu.addAction(p, lambda p=p: self.drafter_added.emit(p))
        if not self.choices.recent_drafters:
            self.recent_menu.addAction("(no recent drafters)").setEnabled(False)

    def _remove_drafter(self) -> None:
        item = self.drafters.currentItem()
        if item is not None:
            self.drafter_removed.emit(item.data(PATH_ROLE))

    def _item_changed(self, item: QListWidgetItem) -> None:
        self.drafter_ticked.emit(item.data(PATH_ROLE), item.checkState() == Qt.Checked)

    def _current_changed(self, item: QListWidgetItem | None, _previous=None) -> None:
        self.drafter_selected.emit(item.data(PATH_ROLE) if item is not None else "")


class ActionBar(QWidget):
    """Run / Stop / Compare, whether Compare takes every prompt of the set, and the note of a
    block size past what the selected drafter was trained at: here, always in view, where under
    the settings it was below the fold of a 1280x800 window."""

    run_clicked = Signal()
    stop_clicked = Signal()
    compare_clicked = Signal()
    all_prompts_toggled = Signal(bool)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("actions")
        al = QVBoxLayout(self)
        al.setContentsMargins(6, 4, 6, 4)
        self.block_note = QLabel()
        self.block_note.setObjectName("note")
        self.block_note.setWordWrap(True)
        self.block_note.hide()
        al.addWidget(self.block_note)
        row = QHBoxLayout()
        self.run_b = QPushButton("Run")
        self.run_b.setObjectName("primary")
        self.run_b.setToolTip("Speculative run with the selected drafter, then plain decoding (Ctrl+R)")
        self.stop_b = QPushButton("Stop")
        self.stop_b.setToolTip("Stop within one round, keeping what was generated (Ctrl+.)")
        self.compare_b = QPushButton("Compare")
        self.compare_b.setToolTip("Every ticked drafter, then plain decoding, one after another (Ctrl+Shift+R)")
        self.run_b.clicked.connect(self.run_clicked)
        self.stop_b.clicked.connect(self.stop_clicked)
        self.compare_b.clicked.connect(self.compare_clicked)
        for b in (self.run_b, self.stop_b, self.compare_b):
            row.addWidget(b)
        al.addLayout(row)
        self.all_prompts = QCheckBox("Compare on every prompt of the set")
        self.all_prompts.toggled.connect(self.all_prompts_toggled)
        al.addWidget(self.all_prompts)
        self.set_busy(False)

    def show_choices(self, c: Choices) -> None:
        self.all_prompts.blockSignals(True)
        self.all_prompts.setChecked(c.all_prompts)
        self.all_prompts.blockSignals(False)
        note = c.block_note()
        self.block_note.setText(note or "")
        self.block_note.setVisible(bool(note))

    def set_busy(self, busy: bool) -> None:
        self.run_b.setEnabled(not busy)
        self.compare_b.setEnabled(not busy)
        self.stop_b.setEnabled(busy)


__all__ = ["ActionBar", "ControlPanel", "PromptBox", "drafter_label"]
