"""The Train tab's choices: the target, what to produce, the data, when to stop, how often to
measure on held-out prompts, the output folder; read whole as a ``TrainPlan``
(``app.state.training``). The buttons say what the person asked for (``asked``); the tab
decides and enables them."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from ..files import settings
from ..state import training as tr

#: What "Produce" offers: (its words, the kind, DSpark's Markov head); None: go on from a drafter.
PRODUCE = (
    ("new DSpark drafter (block)", ("block", True)),
    ("new DFlash-style drafter", ("block", False)),
    ("new EAGLE-3 head", ("eagle3", True)),
    ("new Gemma-4 assistant", ("assistant", True)),
    ("more training of a drafter", None),
)
BUTTONS = (
    ("start", "Start", "dspark train with these choices, in a process of its own"),
    ("pause", "Pause", "SIGTERM: the run writes a checkpoint and stops; Resume goes on from it"),
    ("resume", "Resume", "the run's own command with --resume: on from its checkpoint"),
    (
        "finish",
        "Stop, keep the best",
        "SIGUSR1 (a paused run: --resume --finish): the run ends, writes its best held-out checkpoint as "
        "the drafter, evaluates it and reports",
    ),
    ("compare", "Compare with the starting drafter", "the new drafter and the one it started from, on the Compare tab"),
)


def row(*widgets) -> QWidget:
    w = QWidget()
    lay = QHBoxLayout(w)
    lay.setContentsMargins(0, 0, 0, 0)
    for x in widgets:
        lay.addWidget(x, 1 if isinstance(x, (QLineEdit, QComboBox)) else 0)
    return w


def heldout_paths(text: str) -> list[str]:
    """The held-out field's files: ``;`` between them, spaces around each ignored."""
    return [p.strip() for p in text.split(";") if p.strip()]


def _spin(lo: int, hi: int, value: int) -> QSpinBox:
    s = QSpinBox()
    s.setRange(lo, hi)
    s.setValue(value)
    s.setGroupSeparatorShown(True)
    return s


class TrainForm(QWidget):
    asked = Signal(str)  # a button's name (BUTTONS)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.app_target, self.auto_out, self.eval_touched = "", "", False
        self._build()

    def _build(self) -> None:
        f = QFormLayout()
        self.target = QComboBox(editable=True)
        self.produce = QComboBox()
        self.produce.setToolTip(
            "DSpark: a block drafter with its Markov head; DFlash-style: without it (--no-markov);\n"
            "EAGLE-3 and Gemma-4 assistants draft a token a step (--kind); more training: --from a drafter"
        )
        for words, _ in PRODUCE:
            self.produce.addItem(words)
        self.fmt = QComboBox()
        self.fmt.addItems(tr.FORMATS)
        self.fmt.setToolTip("the checkpoint format the drafter is written in (--format)")
        self.start_from = QComboBox(editable=True)
        self.start_from.setToolTip("the drafter training goes on from (--from); the app's selected drafter first")
        self.data = QPlainTextEdit()
        self.data.setPlaceholderText("one file or folder a line: text files, or JSONL with text, prompt or messages")
        self.data.setFixedHeight(64)
        files, folder = QPushButton("Files…"), QPushButton("Folder…")
        files.clicked.connect(lambda: self._add_data(False))
        folder.clicked.connect(lambda: self._add_data(True))
        self.self_distill = QCheckBox("the target writes its own continuations\nof these prompts (--self-distill)")
        self.heldout = QLineEdit(placeholderText="held-out prompt files, ; between (default: of the data)")
        self.heldout.setToolTip(
            "--heldout: the prompts the run measures on and the finished drafter is compared on;\n"
            "without them a slice of the data is held out"
        )
        heldout_files = QPushButton("Files…")
        heldout_files.clicked.connect(self._add_heldout)
        self.steps = _spin(1, 10_000_000, 2000)
        self.budget = QCheckBox("or after")
        self.minutes = QDoubleSpinBox()
        self.minutes.setDecimals(1)
        self.minutes.setRange(0.1, 1e6)
        self.minutes.setValue(60.0)
        self.minutes.setSuffix(" min")
        self.eval_every = _spin(1, 10_000_000, tr.eval_every_for(2000))
        self.eval_every.setToolTip(
            "--eval-every: each measurement runs the real greedy loop on the target over the held-out prompts\n"
            "(not training time; the log records its seconds, said beside the curves); a twentieth of the steps\n"
            "until changed here"
        )
        self.eval_prompts = _spin(1, 100_000, 8)
        self.eval_tokens = _spin(1, 1_000_000, 128)
        self.out_edit = QLineEdit()
        browse = QPushButton("…")
        browse.clicked.connect(self._browse_out)
        self.force = QCheckBox("replace what it holds")
        self.extra = QLineEdit(placeholderText="other dspark train options, e.g. --layers 1 --batch 16")
        self._lay_out(f, {"files": files, "folder": folder, "browse": browse, "heldout": heldout_files})

    def _lay_out(self, f: QFormLayout, buttons: dict[str, QPushButton]) -> None:
        files, folder, browse, heldout_files = (buttons[k] for k in ("files", "folder", "browse", "heldout"))
        f.addRow("Target", self.target)
        f.addRow("Produce", self.produce)
        f.addRow("Format", self.fmt)
        f.addRow("Start from", self.start_from)
        f.addRow("Data", self.data)
        f.addRow("", row(files, folder))
        f.addRow("", self.self_distill)
        f.addRow("Held-out", row(self.heldout, heldout_files))
        f.addRow("Stop after", row(self.steps, QLabel("steps")))
        f.addRow("", row(self.budget, self.minutes))
        f.addRow("Measure every", row(self.eval_every, QLabel("steps")))
        f.addRow("on", row(self.eval_prompts, QLabel("held-out prompts")))
        f.addRow("of", row(self.eval_tokens, QLabel("tokens each")))
        f.addRow("Output", row(self.out_edit, browse))
        f.addRow("", self.force)
        f.addRow("Other options", self.extra)
        self.buttons = {}
        grid = QGridLayout()
        for i, (name, words, tip) in enumerate(BUTTONS):
            b = self.buttons[name] = QPushButton(words)
            b.setToolTip(tip)
            b.clicked.connect(lambda _c=False, name=name: self.asked.emit(name))
            if name != "compare":  # the long one has a row of its own
                grid.addWidget(b, i // 2, i % 2)
        for combo in (self.target, self.produce, self.fmt, self.start_from):  # long paths: elided, not widening
            combo.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(12)
        for edit in (self.heldout, self.out_edit, self.extra, self.data):
            edit.setMinimumWidth(120)
        for spin in (self.steps, self.eval_every, self.minutes):
            spin.setMinimumWidth(110)
        left = QVBoxLayout(self)
        left.addLayout(f)
        left.addLayout(grid)
        left.addWidget(self.buttons["compare"])
        left.addStretch(1)
        self.produce.currentIndexChanged.connect(self._produce_changed)
        self.steps.valueChanged.connect(self._steps_changed)
        self.eval_every.editingFinished.connect(lambda: setattr(self, "eval_touched", True))
        self.target.currentTextChanged.connect(lambda _t: self._fill_out())
        self._produce_changed()

    def enable(self, on: dict[str, bool]) -> None:
        for name, b in self.buttons.items():
            b.setEnabled(on.get(name, False))

    def new_out(self) -> None:
        """After a start: the next run's folder is a new one (unless the person chose their own)."""
        if self.out_edit.text() == self.auto_out:
            self._fill_out(taken=self.auto_out)

    def _produce_changed(self, *_args) -> None:
        what = PRODUCE[self.produce.currentIndex()][1]
        self.fmt.setEnabled(what is not None and what[0] == "block")
        self.start_from.setEnabled(what is None)
        self._fill_out()

    def _steps_changed(self, steps: int) -> None:
        if not self.eval_touched:
            self.eval_every.setValue(tr.eval_every_for(steps))

    def _fill_out(self, taken: str = "") -> None:
        """A default output folder, new each time, until the person writes their own."""
        if self.out_edit.text() in ("", self.auto_out):
            try:
                folder = settings.trained_dir()
            except OSError:
                return
            self.auto_out = tr.default_out(folder, self.target.currentText(), self.plan(out=""), taken=taken)
            self.out_edit.setText(self.auto_out)

    def _add_data(self, folder: bool) -> None:
        if folder:
            chosen = [QFileDialog.getExistingDirectory(self, "Data folder")]
        else:
            chosen = QFileDialog.getOpenFileNames(
                self, "Data files", "", "Text or JSONL (*.txt *.md *.py *.jsonl);;All (*)"
            )[0]
        for p in (p for p in chosen if p):
            self.data.appendPlainText(p)

    def _add_heldout(self) -> None:
        chosen = QFileDialog.getOpenFileNames(
            self, "Held-out prompts", "", "Text or JSONL (*.txt *.md *.jsonl);;All (*)"
        )[0]
        self.add_heldout([p for p in chosen if p])

    def add_heldout(self, paths: list[str]) -> None:
        """Files after those already named (a path already there is not named twice)."""
        have = heldout_paths(self.heldout.text())
        self.heldout.setText("; ".join(have + [p for p in paths if p not in have]))

    def _browse_out(self) -> None:
        p = QFileDialog.getExistingDirectory(self, "Output folder")
        if p:
            self.out_edit.setText(p)

    def show_choices(self, choices) -> None:
        """The app's target (the default here while the box holds it or nothing) and drafters."""
        if self.target.currentText() in ("", self.app_target) and choices.target != self.app_target:
            self.target.setCurrentText(choices.target)
        self.app_target = choices.target
        listed = [self.target.itemText(i) for i in range(self.target.count())]
        for p in [choices.target, *choices.recent_targets]:
            if p and p not in listed:
                self.target.addItem(p)
                listed.append(p)
        drafters = [d for d in dict.fromkeys([choices.run_drafter() or "", *choices.usable()]) if d]
        current = self.start_from.currentText()
        self.start_from.blockSignals(True)
        self.start_from.clear()
        self.start_from.addItems(drafters)
        self.start_from.setCurrentText(current or (drafters[0] if drafters else ""))
        self.start_from.blockSignals(False)

    def plan(self, out: str | None = None) -> tr.TrainPlan:
        what = PRODUCE[self.produce.currentIndex()][1]
        lines = [s.strip() for s in self.data.toPlainText().splitlines() if s.strip()]
        return tr.TrainPlan(
            target=self.target.currentText().strip(),
            start_from=self.start_from.currentText().strip() if what is None else "",
            kind=what[0] if what else "block",
            fmt=self.fmt.currentText(),
            markov=what[1] if what else True,
            data=tuple(lines),
            self_distill=self.self_distill.isChecked(),
            heldout=tuple(heldout_paths(self.heldout.text())),
            steps=self.steps.value(),
            minutes=self.minutes.value() if self.budget.isChecked() else 0.0,
            eval_every=self.eval_every.value(),
            eval_prompts=self.eval_prompts.value(),
            eval_tokens=self.eval_tokens.value(),
            out=self.out_edit.text().strip() if out is None else out,
            force=self.force.isChecked(),
            extra=self.extra.text(),
        )
