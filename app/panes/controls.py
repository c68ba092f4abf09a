"""The left-hand panel: target and drafter pickers, the prompt, generation settings, and
Run / Stop / Compare. It only gathers choices; the window acts on them.

The Run / Stop / Compare bar (``actions``) is a separate widget the window pins below the
scrolling panel, so it is on screen at any window height. A prompt typed by hand is never lost
to ◀ ▶ or a change of set: it is kept in the set "Typed prompts"."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QFileDialog, QGroupBox, QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QMenu,
    QPlainTextEdit, QPushButton, QToolButton, QVBoxLayout, QWidget,
)

from dspark.config import GenerationConfig

from .settings_form import SettingsForm

PATH_ROLE = Qt.UserRole
TYPED = "Typed prompts"  # the set a typed prompt is kept in when ◀ ▶ or another set replaces it
ERROR_ROLE = Qt.UserRole + 1  # why a drafter cannot be used (None: it can, or it is not loaded yet)


def drafter_label(path: str) -> str:
    return Path(path).name or path


class ControlPanel(QWidget):
    target_chosen = Signal(str)
    drafters_changed = Signal()
    run_clicked = Signal()
    stop_clicked = Signal()
    compare_clicked = Signal()
    notice = Signal(str)  # something for the status bar

    def __init__(self, prompt_sets: dict[str, list[str]], parent=None):
        super().__init__(parent)
        self.setObjectName("controlsInner")
        self.prompt_sets = prompt_sets
        self.recent_drafters: list[str] = []
        self.trained: dict[str, int] = {}  # drafter path -> the block size it was trained at
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)

        g = QGroupBox("Target model")
        gl = QHBoxLayout(g)
        self.target = QComboBox()
        self.target.setEditable(True)
        self.target.setInsertPolicy(QComboBox.NoInsert)
        # a long path scrolls inside the box; it never widens the panel (or the window)
        self.target.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.target.setMinimumContentsLength(12)
        self.target.setToolTip("A Gemma-4 model directory (config.json, *.safetensors, tokenizer). Recent ones are listed.")
        self.target.activated.connect(self._target_activated)
        self.target.lineEdit().editingFinished.connect(self._target_activated)
        browse = QPushButton("…")
        browse.setToolTip("Choose a target directory")
        browse.clicked.connect(self.browse_target)
        gl.addWidget(self.target, 1)
        gl.addWidget(browse)
        lay.addWidget(g)

        g = QGroupBox("Drafters")
        gl = QVBoxLayout(g)
        self.drafters = QListWidget()
        self.drafters.setToolTip("Run uses the selected drafter; Compare uses every ticked one.\n"
                                 "With no drafter, Run does plain decoding only.")
        self.drafters.setMaximumHeight(110)
        self.drafters.itemChanged.connect(lambda _item: self.drafters_changed.emit())
        row = QHBoxLayout()
        add = QToolButton()
        add.setText("Add…")
        add.setPopupMode(QToolButton.MenuButtonPopup)
        add.clicked.connect(self.browse_drafter)
        self.recent_menu = QMenu(add)
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        add.setMenu(self.recent_menu)
        remove = QPushButton("Remove")
        remove.clicked.connect(self._remove_drafter)
        row.addWidget(add)
        row.addWidget(remove)
        row.addStretch(1)
        gl.addWidget(self.drafters)
        gl.addLayout(row)
        lay.addWidget(g)

        g = QGroupBox("Prompt")
        gl = QVBoxLayout(g)
        row = QHBoxLayout()
        self.prompt_set = QComboBox()
        self.prompt_set.addItems(list(prompt_sets))
        self.prompt_set.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.prompt_set.setMinimumContentsLength(10)
        self.prompt_set.setToolTip("Prompt set: ◀ ▶ step through it (Space / → in presentation mode)")
        prev_b, next_b = QPushButton("◀"), QPushButton("▶")
        for b in (prev_b, next_b):
            b.setFixedWidth(34)
        prev_b.clicked.connect(lambda: self.step_prompt(-1))
        next_b.clicked.connect(lambda: self.step_prompt(1))
        self.counter = QLabel()  # "3 / 12": where ◀ ▶ are in the set
        self.counter.setObjectName("caption")
        self.counter.setToolTip("This prompt's place in the set (\"typed\": not one of the set's)")
        row.addWidget(self.prompt_set, 1)
        row.addWidget(prev_b)
        row.addWidget(self.counter)
        row.addWidget(next_b)
        self.prompt = QPlainTextEdit()
        self.prompt.setPlaceholderText("Type a prompt, or pick one from a set")
        self.prompt.setMinimumHeight(70)
        self.prompt.textChanged.connect(self._update_counter)
        self.prompt_index = -1
        gl.addLayout(row)
        gl.addWidget(self.prompt, 1)
        lay.addWidget(g, 1)

        g = QGroupBox("Generation")
        gl = QVBoxLayout(g)
        self.form = SettingsForm(GenerationConfig)
        gl.addWidget(self.form)
        self.block_note = QLabel()  # a block size beyond what the selected drafter was trained at
        self.block_note.setObjectName("note")
        self.block_note.setWordWrap(True)
        self.block_note.hide()
        gl.addWidget(self.block_note)
        lay.addWidget(g)
        self.form.widget("block_size").valueChanged.connect(self._update_block_note)
        self.drafters.currentItemChanged.connect(self._update_block_note)

        self.actions = QWidget()  # pinned by the window below the scrolling panel
        self.actions.setObjectName("actions")
        al = QVBoxLayout(self.actions)
        al.setContentsMargins(6, 4, 6, 4)
        row = QHBoxLayout()
        self.run_b = QPushButton("Run")
        self.run_b.setObjectName("primary")
        self.run_b.setToolTip("Speculative run with the selected drafter, then plain decoding (Ctrl+R)")
        self.stop_b = QPushButton("Stop")
        self.stop_b.setToolTip("Stop within one round, keeping what was generated (Ctrl+.)")
        self.compare_b = QPushButton("Compare")
        self.compare_b.setToolTip("Every ticked drafter, then plain decoding, one after another")
        self.run_b.clicked.connect(self.run_clicked)
        self.stop_b.clicked.connect(self.stop_clicked)
        self.compare_b.clicked.connect(self.compare_clicked)
        for b in (self.run_b, self.stop_b, self.compare_b):
            row.addWidget(b)
        al.addLayout(row)
        self.all_prompts = QCheckBox("Compare on every prompt of the set")
        al.addWidget(self.all_prompts)
        self.set_busy(False)
        self._set_shown = self.prompt_set.currentText()
        self.prompt_set.currentTextChanged.connect(self._set_changed)

    # --- target ---------------------------------------------------------------------------
    def set_target(self, path: str | None, recent: list[str]) -> None:
        self.target.blockSignals(True)
        self.target.clear()
        self.target.addItems([p for p in recent if p])
        self.target.setEditText(path or "")
        self.target.blockSignals(False)

    def target_path(self) -> str:
        return self.target.currentText().strip()

    def _target_activated(self, *_):
        if self.target_path():
            self.target_chosen.emit(self.target_path())

    def browse_target(self) -> None:
        d = QFileDialog.getExistingDirectory(self, "Target model directory", self.target_path())
        if d:
            self.target.setEditText(d)
            self.target_chosen.emit(d)

    # --- drafters -------------------------------------------------------------------------
    def add_drafter(self, path: str, checked: bool = True, select: bool = False) -> None:
        """Add a drafter directory (ticked, and selected when asked or when none is); one that
        is not a directory comes in marked, unticked and unselected."""
        if path in self.drafter_paths():
            return
        self.drafters.blockSignals(True)
        item = QListWidgetItem(drafter_label(path))
        item.setData(PATH_ROLE, path)
        item.setToolTip(path)
        item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
        item.setCheckState(Qt.Checked if checked else Qt.Unchecked)
        self.drafters.addItem(item)
        if select or self.drafters.currentRow() < 0:
            self.drafters.setCurrentItem(item)
        self.drafters.blockSignals(False)
        if not Path(path).expanduser().is_dir():
            self.mark_drafter(path, f"drafter {drafter_label(path)}: not a directory: {path}")
        self.drafters_changed.emit()

    def _items(self):
        return [self.drafters.item(i) for i in range(self.drafters.count())]

    def drafter_paths(self) -> list[str]:
        return [item.data(PATH_ROLE) for item in self._items()]

    def usable_drafters(self) -> list[str]:
        """Every drafter not known to be bad (those the worker should load)."""
        return [item.data(PATH_ROLE) for item in self._items() if not item.data(ERROR_ROLE)]

    def checked_drafters(self) -> list[str]:
        """The ticked drafters Compare runs (never one known to be bad)."""
        return [item.data(PATH_ROLE) for item in self._items()
                if item.checkState() == Qt.Checked and not item.data(ERROR_ROLE)]

    def drafter_error(self, path: str) -> str | None:
        """Why this drafter cannot be used, or None."""
        return next((item.data(ERROR_ROLE) for item in self._items() if item.data(PATH_ROLE) == path), None)

    def run_drafter(self) -> str | None:
        item = self.drafters.currentItem()
        if item is None:
            checked = self.checked_drafters()
            return checked[0] if checked else None
        return item.data(PATH_ROLE)

    def mark_drafter(self, path: str, error: str | None, detail: str | None = None) -> None:
        """Show a drafter's load result: its format in the tooltip, or ⚠ and the reason, and
        then it is unticked and unselected (Run falls back to a good one, Compare skips it)."""
        for item in self._items():
            if item.data(PATH_ROLE) != path:
                continue
            self.drafters.blockSignals(True)
            item.setData(ERROR_ROLE, error)
            item.setText(drafter_label(path) + ("  ⚠" if error else ""))
            item.setToolTip(path + (f"\n{error}" if error else f"\n{detail}" if detail else ""))
            if error:
                item.setCheckState(Qt.Unchecked)
                if self.drafters.currentItem() is item:
                    good = [i for i in self._items() if not i.data(ERROR_ROLE)]
                    if good:
                        self.drafters.setCurrentItem(good[0])
                    else:
                        self.drafters.setCurrentRow(-1)
                        self.drafters.clearSelection()
            self.drafters.blockSignals(False)

    def browse_drafter(self) -> None:
        start = self.run_drafter() or self.target_path()
        d = QFileDialog.getExistingDirectory(self, "Drafter directory", start)
        if d:
            self.add_drafter(d, select=True)

    def _fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        for p in self.recent_drafters:
            self.recent_menu.addAction(p, lambda p=p: self.add_drafter(p, select=True))
        if not self.recent_drafters:
            self.recent_menu.addAction("(no recent drafters)").setEnabled(False)

    def _remove_drafter(self) -> None:
        row = self.drafters.currentRow()
        if row >= 0:
            self.drafters.takeItem(row)
            self.drafters_changed.emit()

    # --- prompt ---------------------------------------------------------------------------
    def prompts(self) -> list[str]:
        return self.prompt_sets.get(self.prompt_set.currentText(), [])

    def select_prompt(self, index: int) -> None:
        ps = self.prompts()
        if ps:
            self.prompt_index = index % len(ps)
            self.prompt.setPlainText(ps[self.prompt_index])
        self._update_counter()

    def step_prompt(self, delta: int) -> None:
        self.keep_typed()
        self.select_prompt(self.prompt_index + delta)

    def is_typed(self, in_set: str | None = None) -> bool:
        """The prompt box holds something that is not a prompt of the set (typed by hand)."""
        text = self.prompt_text()
        return bool(text.strip()) and text not in self.prompt_sets.get(in_set or self.prompt_set.currentText(), [])

    def keep_typed(self, in_set: str | None = None) -> None:
        """Keep a typed prompt in the set TYPED before something replaces it."""
        if not self.is_typed(in_set):
            return
        kept = self.prompt_sets.setdefault(TYPED, [])
        if self.prompt_text() not in kept:
            kept.append(self.prompt_text())
        if self.prompt_set.findText(TYPED) < 0:
            self.prompt_set.blockSignals(True)
            self.prompt_set.addItem(TYPED)
            self.prompt_set.blockSignals(False)
        self.notice.emit(f"your prompt is kept in the prompt set \"{TYPED}\"")

    def _set_changed(self, name: str) -> None:
        self.keep_typed(self._set_shown)
        self._set_shown = name
        self.select_prompt(len(self.prompts()) - 1 if name == TYPED else 0)

    def _update_counter(self) -> None:
        ps = self.prompts()
        on_set = 0 <= self.prompt_index < len(ps) and ps[self.prompt_index] == self.prompt_text()
        self.counter.setText(f"{self.prompt_index + 1} / {len(ps)}" if on_set else "typed" if ps else "")

    def prompt_text(self) -> str:
        return self.prompt.toPlainText()

    def prompt_caption(self) -> str:
        """"Prompt k of N · its first line" (or "Your prompt · …" for a typed one): for the
        counter beside ◀ ▶ and the presentation mode's prompt line."""
        text = self.prompt_text().strip().splitlines()
        first = text[0][:100] if text else ""
        ps = self.prompts()
        if 0 <= self.prompt_index < len(ps) and ps[self.prompt_index] == self.prompt_text():
            return f"Prompt {self.prompt_index + 1} of {len(ps)} · {first}"
        return f"Your prompt · {first}"

    # --- settings -------------------------------------------------------------------------
    def config(self) -> dict:
        """GenerationConfig fields."""
        return self.form.values()

    def set_config(self, raw: dict, on_error=None) -> None:
        self.form.set_values(raw, on_error)

    def _update_block_note(self, *_) -> None:
        """Say so when the block size asks the selected drafter for more drafts than it was
        trained to make (they are accepted rarely, and nothing else would warn)."""
        path = self.run_drafter()
        trained = self.trained.get(path) if path else None
        asked = self.config().get("block_size")
        if trained and asked and asked > trained:
            self.block_note.setText(f"{drafter_label(path)} was trained at {trained} drafts per round: "
                                    f"block size {asked} asks for {asked - trained} more than it learned "
                                    f"(they are rarely accepted).")
            self.block_note.show()
        else:
            self.block_note.hide()

    def set_trained(self, path: str, block_size: int) -> None:
        self.trained[path] = block_size
        self._update_block_note()

    def set_busy(self, busy: bool) -> None:
        self.run_b.setEnabled(not busy)
        self.compare_b.setEnabled(not busy)
        self.stop_b.setEnabled(busy)
