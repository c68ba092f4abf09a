"""Smaller app behaviours: token tooltips, presentation keys, settings that persist, prompt sets."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from test_app import LONG, PROMPT, dirs, run_job, setup  # noqa: F401  (dirs: the shared fixture)

from dspark import DsparkError, prompts
from dspark_studio.files import settings
from dspark_studio.window.main_window import MainWindow


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def make_window(qtbot, prefs=None):
    w = MainWindow(prefs=prefs)
    qtbot.addWidget(w)
    w.resize(1400, 900)
    w.show()
    return w


def test_token_tooltip_and_presentation_keys(qtbot, dirs, home):
    w = make_window(qtbot)
    setup(w, dirs, max_tokens=6)
    run_job(qtbot, w, w.start_run)
    view = w.results.text.text
    speculative = w.session.shown_runs()[0]
    first = speculative.rounds[0].committed[0]
    cur = view.textCursor()
    cur.setPosition(len(PROMPT) + max(len(first.text) // 2, 0))
    rect = view.cursorRect(cur)
    tip = view.tip_at(rect.center())
    assert "round 0, position 0" in tip and "p = " in tip

    w.presenter.fullscreen = False
    w.controls.prompt_set.setCurrentText(prompts.get("demo").name)
    w.presenter.enter()
    assert w.theme.name == "presentation" and not w.controls_scroll.isVisible()
    before = w.session.choices.prompt_index
    w.controls.form.widget("max_tokens").setValue(4)
    with qtbot.waitSignal(w.job_finished, timeout=LONG):
        qtbot.keyClick(w, Qt.Key_Space)
    assert w.session.choices.prompt_index == before + 1
    assert w.session.runs and w.session.runs[0].prompt == prompts.get("demo").prompts[before + 1]
    qtbot.keyClick(w, Qt.Key_Escape)
    assert w.theme.name == "normal" and w.controls_scroll.isVisible()
    w.close()
    assert not w.engine.thread.isRunning()


def test_settings_and_recent_dirs_persist(qtbot, dirs, home):
    prefs = settings.Settings()
    w = make_window(qtbot, prefs)
    w.restore(str(dirs["target"]), [])
    w.add_drafter(str(dirs["drafter"]))
    w.on_target_chosen(str(dirs["target"]))
    # directories join the recent lists once they have loaded
    qtbot.waitUntil(lambda: str(dirs["drafter"]) in prefs.recent("drafters"), timeout=LONG)
    w.controls.form.widget("max_tokens").setValue(77)
    w.controls.form.widget("policy").setCurrentText("threshold:0.2")
    w.controls.prompt.setPlainText("the of")
    w.close()

    prefs2 = settings.Settings()
    assert prefs2.recent("targets")[0] == str(dirs["target"])
    assert str(dirs["drafter"]) in prefs2.recent("drafters")
    from dspark_studio.startup import build_parser, choose_models

    target, drafters = choose_models(build_parser().parse_args([]), prefs2)
    assert (target, drafters) == (str(dirs["target"]), [str(dirs["drafter"])])
    w2 = make_window(qtbot, prefs2)
    w2.restore(target, drafters)
    assert w2.controls.form.widget("max_tokens").value() == 77
    assert w2.controls.form.widget("policy").currentText() == "threshold:0.2"
    assert w2.session.choices.prompt == "the of"
    assert w2.session.choices.paths() == [str(dirs["drafter"])]
    w2.close()


def test_download_dialog_opens_a_cached_model_by_name(qtbot, dirs, home, tmp_path, monkeypatch):
    from huggingface_hub import constants
    from miniatures import populate_hub_cache

    snap = populate_hub_cache(tmp_path / "hub", "someone/tiny-gemma-4", dirs["target"])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # the hub is never contacted
    w = make_window(qtbot)
    dialog = w.open_download()
    assert dialog.list.count() >= 10 and str(tmp_path / "hub") in dialog.info.text()
    dialog.name.setText("someone/not-cached")
    dialog.start()
    # failed is emitted on the fetcher's thread; the dialog's slot runs later, on this one
    qtbot.waitUntil(lambda: "not in the local Hugging Face cache" in dialog.info.text(), timeout=LONG)
    assert dialog.download_b.isEnabled()
    dialog.name.setText("someone/tiny-gemma-4")
    with qtbot.waitSignal(dialog.chosen, timeout=LONG) as sig:
        dialog.start()
    assert sig.args == ["target", str(snap)]
    assert w.controls.target_path() == str(snap)
    w.close()
    assert not dialog.thread_.isRunning()


def test_a_published_format_drafter_runs_in_the_app(qtbot, dirs, home, tmp_path):
    from drafter_checkpoints import write_zlab

    zlab = write_zlab(tmp_path / "zlab", vocab=96)
    w = make_window(qtbot)
    setup(w, dirs, drafters=())
    w.add_drafter(str(zlab), select=True)
    info = run_job(qtbot, w, w.start_run)
    assert info["ok"], w.results.message.text()
    speculative, plain = w.session.shown_runs()
    assert speculative.summary.tokens == plain.summary.tokens and speculative.block_size() == 7
    item = w.controls.drafters.item(0)
    assert "DFlash drafter (zlab-dflash), 7 drafts per round" in item.toolTip()
    w.close()


def test_prompt_sets_read_json_and_txt(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"name": "Set A", "prompts": ["x = 1\n", "y = 2\n"]}))
    (tmp_path / "b.txt").write_text("first\n---\nsecond\n")
    (tmp_path / "bad.json").write_text("{oops")
    sets = prompts.prompt_sets(tmp_path)
    assert sets["a"].name == "Set A" and sets["a"].prompts == ("x = 1\n", "y = 2\n")
    assert sets["b"].prompts == ("first\n", "second\n") and "bad" not in sets
    assert len(prompts.get("Held-out Python stdlib").prompts) >= 5  # the shipped sets, by name or key
    assert prompts.get("demo").name.startswith("Demo") and prompts.get("demo").prompts
    with pytest.raises(DsparkError, match="no prompt set 'nope': choose one of"):
        prompts.get("nope")
