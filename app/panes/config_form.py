"""A form built from a settings dataclass (``dspark.options``): one widget per field that asks
for a form, with its label, range and help from the field itself. A new field of
``GenerationConfig`` appears here without touching the app."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QFormLayout, QLineEdit, QSpinBox, QWidget

from dspark.options import coerce, describe

INT_MAX = 2**31 - 1


def form_values(cls, raw: dict, on_error=None) -> dict:
    """``raw`` (strings from a settings file are fine) as the form's values: unreadable or
    out-of-range values keep their defaults and are reported through ``on_error(name, value)``."""
    options = [s for s in describe(cls) if s.form]
    value = coerce(cls, {k: v for k, v in raw.items() if k in {s.name for s in options}}, on_error)
    return {s.name: getattr(value, s.name) for s in options}


class ConfigForm(QWidget):
    changed = Signal()  # a person changed a value (not sent while ``set_values`` shows some)

    def __init__(self, cls, parent=None):
        super().__init__(parent)
        self.cls = cls
        self.options = [s for s in describe(cls) if s.form]
        self.widgets: dict[str, QWidget] = {}
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        for s in self.options:
            w = self._widget(s)
            w.setToolTip(s.help[0].upper() + s.help[1:] + ".")
            self.widgets[s.name] = w
            form.addRow(s.label, w)
            self._watch(w)
        self._quiet = False
        self.set_values({})

    def _watch(self, w: QWidget) -> None:
        signal = (
            w.toggled
            if isinstance(w, QCheckBox)
            else w.currentTextChanged
            if isinstance(w, QComboBox)
            else w.textChanged
            if isinstance(w, QLineEdit)
            else w.valueChanged
        )
        signal.connect(self._changed)

    def _changed(self, *_) -> None:
        if not self._quiet:
            self.changed.emit()

    def _widget(self, s) -> QWidget:
        if s.kind is bool:
            return QCheckBox()
        if s.choices or s.suggest:
            w = QComboBox()
            w.addItems(list(s.choices or s.suggest))
            w.setEditable(bool(s.suggest))  # suggestions: other values may be typed
            return w
        if s.kind is int:
            w = QSpinBox()
            lo = int(s.lo if s.lo is not None else -INT_MAX)
            w.setRange(lo, int(min(s.hi if s.hi is not None else INT_MAX, INT_MAX)))
            if s.optional:  # the lowest value stands for None ("the drafter's own")
                w.setSpecialValueText(s.none or "default")
            return w
        if s.kind is float:
            w = QDoubleSpinBox()
            w.setDecimals(3 if (s.step or 0.1) < 0.1 else 2)
            w.setRange(s.lo if s.lo is not None else -1e9, s.hi if s.hi is not None else 1e9)
            w.setSingleStep(s.step or 0.1)
            return w
        return QLineEdit()

    def values(self) -> dict:
        """The fields as ``cls(**values)`` takes them."""
        out = {}
        for s in self.options:
            w = self.widgets[s.name]
            if isinstance(w, QCheckBox):
                v = w.isChecked()
            elif isinstance(w, QComboBox):
                v = w.currentText()
            elif isinstance(w, QSpinBox):
                v = w.value()
                if s.optional and v == w.minimum():
                    v = None
            elif isinstance(w, QDoubleSpinBox):
                v = w.value()
            else:
                v = w.text()
            out[s.name] = v
        return out

    def set_values(self, raw: dict, on_error=None) -> None:
        """Show ``raw`` (strings from a settings file are fine): unreadable or out-of-range
        values keep their defaults and are reported through ``on_error(name, value)``."""
        value = coerce(self.cls, {k: v for k, v in raw.items() if k in self.widgets}, on_error)
        self._quiet = True
        try:
            self._show(value)
        finally:
            self._quiet = False

    def _show(self, value) -> None:
        for s in self.options:
            w, v = self.widgets[s.name], getattr(value, s.name)
            if isinstance(w, QCheckBox):
                w.setChecked(bool(v))
            elif isinstance(w, QComboBox):
                w.setCurrentText(str(v))
            elif isinstance(w, QSpinBox):
                w.setValue(w.minimum() if v is None else int(v))
            elif isinstance(w, QDoubleSpinBox):
                w.setValue(float(v))
            else:
                w.setText(str(v))

    def widget(self, name: str) -> QWidget:
        return self.widgets[name]
