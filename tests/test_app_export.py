"""File ▸ Export drafter… (#27), headless: the dialog's choices reach ``dspark export`` on the
model-owner thread; what it wrote is said in the status bar, and a format that cannot carry the
drafter is the command line's own sentence in the message bar."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QDialog
from test_app import LONG, dirs, setup, window  # noqa: F401  (shared fixtures)
from test_app_truth import menu_action

from dspark import DflashConfig, load_drafter, load_target
from dspark.cli import main as dspark
from dspark.convert import new_drafter
from dspark_studio.state.wording import in_app
from dspark_studio.window import drafter_export as dialog_module


def choose(monkeypatch, drafter, fmt: str, out, **ticks) -> dict:
    """The person's choices in the dialog when it opens; returns what the dialog showed first."""
    shown = {}

    def filled(dialog) -> int:
        shown.update(
            drafter=dialog.drafter.currentText(),
            verifier=dialog.verifier.text(),
            formats=[dialog.format.itemData(i) for i in range(dialog.format.count())],
        )
        dialog.drafter.setCurrentText(str(drafter))
        dialog.format.setCurrentIndex(dialog.format.findData(fmt))
        dialog.out.setText(str(out))
        for box, on in ticks.items():
            getattr(dialog, box).setChecked(on)
        return QDialog.Accepted

    monkeypatch.setattr(dialog_module.ExportDialog, "exec", filled)
    return shown


def test_export_drafter_from_the_file_menu(qtbot, window, dirs, tmp_path, monkeypatch, capsys):
    w = window
    setup(w, dirs)
    target = load_target(dirs["target"])
    speculators = tmp_path / "speculators"
    new_drafter(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16, format="speculators")).save(
        speculators
    )
    out = tmp_path / "served"
    shown = choose(monkeypatch, speculators, "speculators", out, drop_heads=True, measure=True)
    menu_action(w, "File", "Export drafter…").trigger()
    assert shown == {
        "drafter": str(dirs["drafter"]),
        "verifier": str(dirs["target"]),
        "formats": ["speculators", "deepspec", "zlab"],
    }
    qtbot.waitUntil(lambda: "wrote a vLLM speculators drafter" in w.statusBar().currentMessage(), timeout=LONG)
    said = w.statusBar().currentMessage()
    assert "left out its Markov and confidence heads: greedy tau" in said and "12 tokens each" in said
    config = json.loads((out / "config.json").read_text())
    assert config["speculators_config"]["verifier"]["name_or_path"] == str(dirs["target"])
    assert config["speculators_model_type"] == "dflash" and not load_drafter(out, target).has_markov
    assert (out / "README.md").is_file()
    # a native drafter cannot be served: the command line's sentence, in the message bar
    refused = tmp_path / "refused"
    choose(monkeypatch, dirs["drafter"], "zlab", refused)
    menu_action(w, "File", "Export drafter…").trigger()
    qtbot.waitUntil(lambda: "cannot carry" in w.session.message, timeout=LONG)
    capsys.readouterr()
    assert dspark(["export", str(dirs["drafter"]), "--format", "zlab", "--out", str(refused)]) == 2
    assert capsys.readouterr().err.strip() == "dspark: error: " + w.session.message
    assert not refused.exists()
    w.refresh()
    assert "native Gemma-style draft layers" in w.results.message.text() and not w.results.message.isHidden()


def test_the_app_names_its_controls_in_an_export_refusal():
    assert (
        in_app("… carries: export with --drop-heads to leave them out")
        == "… carries: tick “Leave out the Markov and confidence heads” to leave them out"
    )
    assert "tick “Replace what the folder holds”" in in_app(
        "x exists and is not empty (use --force to replace what it holds)"
    )
