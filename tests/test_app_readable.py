"""Readable on a 13-inch laptop and for an audience (issue #12): draft rows, window geometry,
the prompt counter, typed prompts, queued keys, stopped comparisons, exports, the run history,
the slow-BLAS note. Headless, tiny models."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QByteArray, QRect, Qt
from test_app import LONG, dirs, run_job, setup, window  # noqa: F401  (shared fixtures)
from test_app_truth import menu_action, two_prompt_set

from dspark.events import CommittedToken, RoundEvent, Source
from dspark_studio.files import run_export, settings
from dspark_studio.panes.draft_grid import DraftPane
from dspark_studio.panes.theme import PRESENTATION
from dspark_studio.state.choices import TYPED
from dspark_studio.window import geometry
from dspark_studio.window.main_window import MainWindow


def rounds_with_text(n: int, texts: tuple[str, ...]) -> tuple[list, list]:
    tok = CommittedToken(id=9, text="\n", source=Source.CORRECTION, round=0, position=1, target_prob=0.5)
    ev = [
        RoundEvent(
            index=i,
            anchor=0,
            drafted=tuple(range(len(texts))),
            draft_probs=(0.5,) * len(texts),
            confidences=None,
            verify_width=len(texts),
            accepted=1,
            committed=(tok,),
            draft_seconds=0.01,
            verify_seconds=0.01,
            elapsed_seconds=0.1,
            tokens_generated=i + 1,
            tokens_per_sec=10.0,
        )
        for i in range(n)
    ]
    return ev, [texts] * n


def test_draft_rows_fit_the_width_keep_their_header_and_elide_long_tokens(qtbot):
    pane = DraftPane()
    qtbot.addWidget(pane)
    pane.set_theme(PRESENTATION)  # the largest type
    pane.resize(420, 300)  # a narrow pane: a 1280-wide screen in presentation mode
    pane.show()
    rounds, texts = rounds_with_text(40, ("·readlines", "Codec", "x", " ", "", "\t"))
    pane.set_rounds(rounds, texts)
    qtbot.wait(10)
    g = pane.grid
    assert pane.scroll.horizontalScrollBar().maximum() == 0  # nothing to scroll sideways to
    assert g.label_w + g.cols * g.cell_w + g.target_w <= g.width()  # the target column is on screen
    assert g.shown_text(0, 0).endswith("…") and g.shown_text(0, 0).startswith("·")  # not "·readlir"
    assert [g.cell_text(0, k) for k in (2, 3, 4, 5)] == ["x", "·", "∅", "⇥"] and g.cell_text(0, 6) == "⏎"
    bar = pane.scroll.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()  # the newest round in view ...
    assert pane.header.isVisible() and pane.header.geometry().bottom() < pane.scroll.geometry().top()  # ... header too
    legend = pane.legend.text()
    assert all(s in legend for s in ("·</b>&nbsp;space", "⏎</b>&nbsp;newline", "⇥</b>&nbsp;tab", "∅</b>&nbsp;empty"))
    tip = g.tip_at(g.label_w + 2, g.row_h * 3 + 2)  # round 3, d1
    assert tip.startswith("round 3, draft 1: “·readlines” (token 0)")


def test_a_block_size_beyond_the_drafters_training_is_said(qtbot, window, dirs):
    w, c = window, window.actions  # under Run / Stop / Compare, always in view (test_app_third_look)
    setup(w, dirs)
    qtbot.waitUntil(
        lambda: w.session.choices.find(str(dirs["drafter"])).trained is not None, timeout=LONG
    )  # trained at 4 drafts per round
    w.controls.form.widget("block_size").setValue(32)
    assert c.block_note.isVisible() and "drafter was trained at 4 drafts per round" in c.block_note.text()
    assert "block size 32" in c.block_note.text()
    w.controls.form.widget("block_size").setValue(3)
    assert not c.block_note.isVisible()


def test_the_window_fits_the_screen_and_comes_back_from_presentation_mode(qtbot, dirs, tmp_path, monkeypatch):
    avail = QRect(0, 0, 1280, 800)
    assert geometry.fit(QRect(200, 100, 2400, 1600), avail) == avail
    assert geometry.fit(QRect(900, 600, 1000, 700), avail) == QRect(280, 100, 1000, 700)
    assert geometry.default_rect(avail).width() <= 1280 and geometry.default_rect(avail).height() <= 800
    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(tmp_path / "home"))
    prefs = settings.Settings()
    big = MainWindow(None)
    qtbot.addWidget(big)
    big.setGeometry(0, 0, 2400, 1600)
    prefs.set("window/geometry", big.saveGeometry())  # saved on a big monitor
    w = MainWindow(prefs)
    qtbot.addWidget(w)
    laptop = QRect(0, 30, 1280, 770)  # a 13-inch screen at 2x scale, less the title bar
    monkeypatch.setattr(w, "available_area", lambda: laptop)
    w.place_on_screen()
    assert laptop.contains(w.geometry()), w.geometry()
    w.setGeometry(laptop)
    w.show()
    setup(w, dirs, max_tokens=6)
    before = w.geometry()
    w.presenter.fullscreen = False
    w.presenter.enter()
    assert run_job(qtbot, w, w.start_run)["ok"]
    assert w.minimumSizeHint().width() <= 1280 and w.width() == 1280  # large type, still 1280 wide
    assert w.minimumSizeHint().height() <= 770
    w.presenter.leave()
    assert w.geometry() == before and w.minimumSizeHint().width() <= 1280
    w.close()
    assert QByteArray(prefs.get("window/geometry", QByteArray(), QByteArray)) == w.saveGeometry()


def test_stop_during_a_comparison_says_stopped(qtbot, window, dirs):
    w = window
    setup(w, dirs, drafters=("drafter", "drafter2"), max_tokens=3000)
    w.controls.form.widget("stop_at_eos").setChecked(False)  # runs on until stopped
    with qtbot.waitSignal(w.job_finished, timeout=LONG * 2):
        w.start_compare()
        qtbot.waitUntil(lambda: bool(w.session.runs) and len(w.session.runs[0].rounds) >= 2, timeout=LONG)
        w.stop()
    w.refresh()
    assert w.results.compare.table.rowCount() == 1 and w.results.compare.table.item(0, 1).text() == "0/1 · stopped"


def test_a_second_key_during_a_presentation_run_is_queued_not_dropped(qtbot, window, dirs):
    w = window
    setup(w, dirs, max_tokens=40)
    two_prompt_set(w)
    w.presenter.fullscreen = False
    w.presenter.enter()
    first = w.session.choices.prompt_index
    with qtbot.waitSignal(w.job_finished, timeout=LONG):
        qtbot.keyClick(w, Qt.Key_Space)
        assert w.busy
        qtbot.keyClick(w, Qt.Key_Space)  # during the run
        assert "busy: the next prompt starts when this one ends" in w.statusBar().currentMessage()
    qtbot.waitUntil(
        lambda: (
            w.session.choices.prompt_index == (first + 2) % 2
            and not w.busy
            and w.session.runs[0].prompt == "the a of and"
            and len(w.session.runs) == 2
            and w.session.runs[-1].done
        ),
        timeout=LONG,
    )
    assert w.results.prompt_label.text().startswith("Prompt 1 of 2 · the a of and")
    w.presenter.leave()


def test_the_prompt_counter_and_a_typed_prompt_that_is_kept(qtbot, window, dirs):
    w, c = window, window.controls
    setup(w, dirs)
    two_prompt_set(w)
    assert c.counter.text() == "1 / 2" and w.session.choices.caption() == "Prompt 1 of 2 · the a of and"
    c.prompt.setPlainText("my own prompt")
    assert c.counter.text() == "typed"
    menu_action(w, "Run", "Next prompt").trigger()  # ▶ would have lost it
    assert w.session.choices.prompt == "to in is it" and c.counter.text() == "2 / 2"
    assert w.session.choices.prompt_sets[TYPED][-1] == "my own prompt" and c.prompt_set.findText(TYPED) >= 0
    assert "kept in the prompt set" in w.statusBar().currentMessage()
    menu_action(w, "Run", "Previous prompt").trigger()
    assert c.counter.text() == "1 / 2"
    c.prompt_set.setCurrentText(TYPED)
    n = len(w.session.choices.prompt_sets[TYPED])
    assert w.session.choices.prompt == "my own prompt" and c.counter.text() == f"{n} / {n}"  # the latest kept


def test_exports_are_named_after_what_they_hold_and_the_history_keeps_the_newest(qtbot, window, dirs, tmp_path):
    w = window
    setup(w, dirs, max_tokens=6, prompt="def fibonacci(n):")
    assert run_job(qtbot, w, w.start_run)["ok"]
    speculative, plain = w.session.shown_runs()
    name = run_export.default_name([speculative, plain], False, "json")
    assert name.endswith("-drafter-def-fibonacci-n.json") and name[:8].isdigit()
    folder = tmp_path / "runs"
    folder.mkdir()
    for i in range(6):
        p = folder / f"2026010{i}-120000-run.json"
        p.write_text("x" * 100)
        __import__("os").utime(p, (1_700_000_000 + i, 1_700_000_000 + i))
    (folder / "notes.txt").write_text("not ours")
    gone = run_export.prune_history(folder, keep=3, max_bytes=10_000)
    assert sorted(p.name for p in gone) == [f"2026010{i}-120000-run.json" for i in range(3)]
    assert run_export.prune_history(folder, keep=10, max_bytes=250) and len(list(folder.glob("*-run.json"))) == 2
    assert (folder / "notes.txt").exists()


@pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="only mlx[cpu] on Linux links a slow reference BLAS; a Mac uses Accelerate / Metal",
)
def test_the_status_bar_says_when_matrix_products_run_on_the_slow_reference_blas(qtbot, monkeypatch):
    from dspark import blas

    monkeypatch.setattr(blas, "is_slow", lambda: True)
    w = MainWindow(None)
    qtbot.addWidget(w)
    w.show()
    assert w.blas_note.isVisible() and "slow matrix products" in w.blas_note.text()
    assert "libopenblas0-pthread" in w.blas_note.text() or "OpenBLAS" in w.blas_note.text()
    w.statusBar().showMessage("something else")
    assert w.blas_note.isVisible()  # a permanent note, not a message the next one replaces
    w.close()


@pytest.mark.skipif(sys.platform != "darwin", reason="what a Mac shows; Linux has the test above")
def test_a_mac_never_shows_the_slow_blas_note(qtbot):
    from dspark import blas

    assert not blas.is_slow() and blas.describe() == "Accelerate / Metal"
    w = MainWindow(None)
    qtbot.addWidget(w)
    w.show()
    assert not w.blas_note.isVisible()
    w.close()


def test_plots_show_nothing_before_a_run_then_whole_counts_seconds_and_a_zero(qtbot, window, dirs):
    w = window
    boxes = list(w.results.plots.boxes.values()) + w.results.compare.boxes
    assert all(b.is_empty for b in boxes) and w.results.compare.table.isHidden()  # captions, no empty axes
    setup(w, dirs, max_tokens=12)
    assert run_job(qtbot, w, w.start_run)["ok"]
    assert not any(b.is_empty for b in w.results.plots.boxes.values())
    hist = w.results.plots.hist.getAxis("left")
    assert all(spacing >= 1 for spacing, _ in hist.tickSpacing(0, 3, 200))  # no 0.5 rounds
    seconds = w.results.plots.tps.getAxis("bottom")
    assert "x0.001" not in seconds.labelString() and seconds.autoSIPrefixScale == 1.0
    low, high = w.results.plots.tps.getViewBox().viewRange()[1]
    assert low <= 0 < high and abs(low) < 0.1 * high  # the rate axis starts at 0


def test_the_run_history_keeps_as_many_runs_as_the_settings_say(qtbot, dirs, tmp_path, monkeypatch):
    """End to end: each finished run is saved, and the settings' ``history/keep`` prunes the
    oldest as the next one is saved."""
    from dspark_studio.files import settings
    from dspark_studio.window.main_window import MainWindow

    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(tmp_path / "home"))
    prefs = settings.Settings()
    prefs.set("history/keep", "2")
    w = MainWindow(prefs=prefs)
    qtbot.addWidget(w)
    w.show()
    try:
        setup(w, dirs, max_tokens=4)
        for _ in range(3):
            assert run_job(qtbot, w, w.start_run)["ok"]
        saved = sorted(settings.history_dir().glob("*.json"))
        assert len(saved) == 2, [p.name for p in saved]
    finally:
        w.close()
