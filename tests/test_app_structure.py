"""The app's controller is one place (issue #21): what the person chose and what ran is Session
state; widgets show it and say what the person did; no helper holds the window, and no module
reaches into another widget's parts. Checked on the source (no window is made)."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"
#: How the window and its parts name each widget of ours, and where that widget is defined.
WIDGETS = {
    "controls": ("panes/controls.py", "ControlPanel"),
    "actions": ("panes/controls.py", "ActionBar"),
    "results": ("panes/results.py", "ResultsPanel"),
    "header": ("panes/header.py", "HeaderStrip"),
    "text": ("panes/text_view.py", "TextPane"),
    "drafts": ("panes/draft_grid.py", "DraftPane"),
    "plots": ("panes/plots.py", "PlotsPane"),
    "compare": ("panes/compare.py", "CompareView"),
}
WINDOW_NAMES = {"window", "w", "win", "main_window", "mainwindow"}
MAX_FUNCTION_LINES = 60


def modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(APP)): ast.parse(p.read_text()) for p in APP.rglob("*.py")}


def parts_of(tree: ast.Module, cls: str) -> set[str]:
    """The names a class gives its instance (``self.x = ...``): its parts, not its interface."""
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    out = set()
    if node is None:
        return out
    for n in ast.walk(node):
        targets = (
            n.targets
            if isinstance(n, ast.Assign)
            else [n.target]
            if isinstance(n, (ast.AnnAssign, ast.AugAssign))
            else []
        )
        for t in targets:
            for e in ast.walk(t):
                if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                    out.add(e.attr)
    return out


def test_no_module_reaches_into_another_widget():
    """``x.controls.prompt_set.addItem(...)`` from outside ``ControlPanel`` is what the issue
    found (the window's state code edited the panel's combo box): a widget's parts are its own."""
    trees = modules()
    parts = {role: parts_of(trees[path], cls) if path in trees else set() for role, (path, cls) in WIDGETS.items()}
    offences = []
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)):
                continue
            role = node.value.attr
            if role in WIDGETS and WIDGETS[role][0] != name and node.attr in parts[role]:
                offences.append(f"{name}:{node.lineno} .{role}.{node.attr}")
    assert not offences


def test_no_helper_holds_the_window():
    """No object keeps the window to set its widgets from outside (``BenchActions(window)``,
    ``Presenter(window)``), and the window is one class, not mixins sharing attributes."""
    held = []
    for name, tree in modules().items():
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
            for n in ast.walk(fn):
                if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name) and n.value.id in params & WINDOW_NAMES:
                    held += [
                        f"{name}:{n.lineno}"
                        for t in n.targets
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                    ]
    assert not held
    window = next(
        n for n in modules()["window/main_window.py"].body if isinstance(n, ast.ClassDef) and n.name == "MainWindow"
    )
    assert [b.id for b in window.bases] == ["QMainWindow"]


def test_the_person_s_choices_are_kept_only_in_the_session():
    """A drafter's load error, the prompt's place in its set and the settings are not kept in
    widget item roles or panel attributes that a run reads back."""
    controls = modules()["panes/controls.py"]
    roles = [n.id for n in ast.walk(controls) if isinstance(n, ast.Name) and n.id.endswith("_ROLE")]
    assert set(roles) == {"PATH_ROLE"}  # an item says which drafter it shows, nothing more
    kept = parts_of(controls, "ControlPanel") & {"prompt_sets", "prompt_index", "trained", "recent_drafters", "errors"}
    assert not kept


def test_no_function_is_longer_than_one_sitting_without_a_reason():
    """A function over 60 lines says at its top why it is long ("long because ...")."""
    long = []
    for name, tree in modules().items():
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            lines = fn.end_lineno - fn.lineno + 1
            if lines > MAX_FUNCTION_LINES and "long because" not in (ast.get_docstring(fn) or "").lower():
                long.append(f"{name}:{fn.name} {lines} lines")
    assert not long


def test_the_session_s_parts_import_no_qt():
    import subprocess
    import sys

    code = (
        "import sys, dspark_studio.state.choices, dspark_studio.state.playlist, dspark_studio.state.session; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'PySide6', 'pyqtgraph', 'mlx'}))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=APP.parent)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr[-2000:]
