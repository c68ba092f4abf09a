"""File ▸ Export drafter…: the choices of ``dspark export`` in a dialog (the drafter, the format,
the folder, the verifier vLLM loads, leaving out the heads, replacing the folder), handed to the
model-owner thread as an ``ExportRequest``. The export itself, and its refusal in the same one
sentence the command line prints, is ``dspark.export`` on that thread; the window shows the
refusal in the message bar like every failure."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QWidget,
)

from dspark.serving import TITLES  # the formats, in words (no MLX on the GUI thread)

from ..state.choices import Choices
from ..state.messages import ExportRequest


def _with_browse(edit: QLineEdit, title: str, parent: QWidget) -> QWidget:
    """``edit`` with a Browse… button that fills it with a folder."""
    row, lay = QWidget(), QHBoxLayout()
    lay.setContentsMargins(0, 0, 0, 0)
    lay.addWidget(edit, 1)
    button = QPushButton("Browse…")
    button.clicked.connect(
        lambda: edit.setText(QFileDialog.getExistingDirectory(parent, title, edit.text()) or edit.text())
    )
    lay.addWidget(button)
    row.setLayout(lay)
    return row


class ExportDialog(QDialog):
    """The export's choices; ``request()`` turns them into what the worker is asked."""

    def __init__(self, choices: Choices, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Export drafter")
        self.choices = choices
        self.drafter = QComboBox()
        self.drafter.setEditable(True)
        self.drafter.addItems(choices.paths())
        self.drafter.setCurrentText(choices.run_drafter() or "")
        self.format = QComboBox()
        for fmt, title in TITLES.items():
            self.format.addItem(f"{fmt}: {title}", fmt)
        self.out = QLineEdit()
        self.out.setPlaceholderText("a new or empty folder")
        self.verifier = QLineEdit(choices.target)
        self.verifier.setPlaceholderText("the target's Hugging Face name or path, for vLLM")
        self.drop_heads = QCheckBox("Leave out the Markov and confidence heads")
        self.measure = QCheckBox("Measure what acceptance is left on the prompt set (with the target)")
        self.force = QCheckBox("Replace what the folder holds")
        form = QFormLayout(self)
        form.addRow("Drafter", _with_browse(self.drafter.lineEdit(), "The drafter to export", self))
        form.addRow("Format", self.format)
        form.addRow("Into folder", _with_browse(self.out, "Export the drafter into", self))
        form.addRow("Verifier", self.verifier)
        for box in (self.drop_heads, self.measure, self.force):
            form.addRow("", box)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.button(QDialogButtonBox.Ok).setText("Export")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def request(self) -> ExportRequest:
        c = self.choices
        measure = self.drop_heads.isChecked() and self.measure.isChecked()
        return ExportRequest(
            drafter=self.drafter.currentText().strip(),
            format=self.format.currentData(),
            out=str(Path(self.out.text().strip()).expanduser()) if self.out.text().strip() else "",
            verifier=self.verifier.text().strip(),
            drop_heads=self.drop_heads.isChecked(),
            force=self.force.isChecked(),
            target=c.target if measure else "",
            prompts=tuple(c.prompt_sets.get(c.set_name, ())) if measure else (),
            tokens=int(c.config.get("max_tokens", 128)),
        )


def ask(parent, choices: Choices) -> ExportRequest | None:
    """The dialog, modal; None when cancelled or when the drafter or the folder was left empty."""
    dialog = ExportDialog(choices, parent)
    if dialog.exec() != QDialog.Accepted:
        return None
    request = dialog.request()
    return request if request.drafter and request.out else None
