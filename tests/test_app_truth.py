"""The app tells the truth on screen (issue #12): each defect a newcomer found, driven through
the real window, actions and worker on tiny models."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtGui import QImage
from test_app import LONG, dirs, run_job, setup, window  # noqa: F401  (shared fixtures)

from dspark_studio.window import file_menu


def menu_action(w, menu: str, text: str):
    """The QAction a person clicks: ``menu`` ▸ ``text`` of the window's menu bar."""
    for top in w.menuBar().actions():
        if top.text().replace("&", "") == menu:
            for a in top.menu().actions():
                if a.text() == text:
                    return a
    raise AssertionError(f"no menu item {menu} ▸ {text}")


def test_save_plots_as_png_from_the_menu_writes_the_files(qtbot, window, dirs, tmp_path, monkeypatch):
    w = window
    setup(w, dirs, max_tokens=6)
    assert run_job(qtbot, w, w.start_run)["ok"]
    folder = tmp_path / "pngs"
    monkeypatch.setattr(file_menu.QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
    # triggered(bool) hands the slot a `checked` flag: it must not arrive as the folder
    menu_action(w, "File", "Save plots as PNG…").trigger()
    names = {p.stem for p in folder.glob("*.png")}
    assert {"acceptance_by_position", "accepted_length", "tokens_per_sec", "draft_rows", "window"} <= names
    assert not QImage(str(folder / "window.png")).isNull()
    assert str(folder) in w.statusBar().currentMessage()


def two_prompt_set(w) -> None:
    """A prompt set of two prompts, chosen in the controls."""
    w.session.choices.add_set("two prompts", ["the a of and", "to in is it"])
    w.refresh()
    w.controls.prompt_set.setCurrentText("two prompts")


def test_export_comparison_exports_the_comparison_on_screen_after_a_later_run(qtbot, window, dirs, tmp_path):
    w = window
    setup(w, dirs, drafters=("drafter", "drafter2"), max_tokens=8)
    assert run_job(qtbot, w, w.start_compare)["ok"]
    assert run_job(qtbot, w, w.start_run)["ok"]
    assert w.results.compare.table.rowCount() == 3  # the Compare tab still shows the comparison ...
    doc = json.loads(w.export_data("json", True, str(tmp_path / "c.json")).read_text())
    assert [r["label"] for r in doc["runs"]] == ["drafter", "drafter2", "plain decoding"]  # ... and exports it
    assert [r["label"] for r in doc["comparison"]] == ["drafter", "drafter2", "plain decoding"]
    doc = json.loads(w.export_data("json", False, str(tmp_path / "r.json")).read_text())
    assert [r["method"] for r in doc["runs"]] == ["speculative", "plain"]  # the Run tab's run


def test_the_header_describes_the_tab_on_screen(qtbot, window, dirs):
    w = window
    setup(w, dirs, drafters=("drafter", "drafter2"), max_tokens=10)
    two_prompt_set(w)
    w.actions.all_prompts.setChecked(True)
    w.controls.drafters.setCurrentRow(0)  # the drafter Run uses: the header's choice after a comparison
    assert run_job(qtbot, w, w.start_compare)["ok"]
    assert w.results.tabs.currentWidget() is w.results.compare
    h, table = w.results.header, w.results.compare.table

    def cell(row: int, name: str) -> str:
        col = [c[1] for c in compare_columns()].index(name)
        return table.item(row, col).text()

    assert h.headline.text() == "drafter (DSpark) vs plain decoding · pooled over 2 prompts"
    assert h.values["speedup"].text() == cell(0, "Speedup") and h.values["tau"].text() == cell(0, "τ")
    # one tokens/sec line per drafter and plain decoding, their prompts back to back (not 6 lines)
    assert len(w.results.compare.tps.getPlotItem().listDataItems()) == 3
    table.selectRow(1)  # a person picks drafter2's row
    w.refresh()
    assert h.headline.text() == "drafter2 (DSpark) vs plain decoding · pooled over 2 prompts"
    assert h.values["speedup"].text() == cell(1, "Speedup") and h.values["tau"].text() == cell(1, "τ")
    w.results.tabs.setCurrentWidget(w.results.run_split)  # the Run tab: drafter2's run of the last prompt
    assert h.headline.text() == "drafter2 (DSpark) vs plain decoding · prompt 2 of 2"
    speculative, _plain = w.session.shown_runs()
    assert speculative.label == "drafter2" and h.values["tau"].text() == f"{speculative.figures().tau:.2f}"
    # the Rejections tab: the figures of every round its charts pool (both drafters, both prompts)
    w.results.tabs.setCurrentWidget(w.results.rejections)
    from dspark import metrics

    pooled = [r for r in w.session.runs if r.method == "speculative"]
    f = metrics.summarize([e for r in pooled for e in r.rounds])
    assert h.headline.text() == f"rejections of 2 drafters over 2 prompts, pooled: {f.rounds} rounds"
    assert h.values["tau"].text() == f"{f.tau:.2f}" and h.values["rate"].text() == f"{f.acceptance_rate:.0%}"
    # a one-prompt comparison: the header shows the selected drafter, not the last one run
    w.actions.all_prompts.setChecked(False)
    w.controls.drafters.setCurrentRow(0)
    assert run_job(qtbot, w, w.start_compare)["ok"]
    w.results.tabs.setCurrentWidget(w.results.run_split)
    assert h.headline.text() == "drafter (DSpark) vs plain decoding" and w.session.shown_runs()[0].label == "drafter"


def compare_columns():
    from dspark_studio.panes.compare import COLUMNS

    return COLUMNS


def test_a_new_run_shows_the_run_tab_also_from_presentation_mode(qtbot, window, dirs):
    w = window
    setup(w, dirs, max_tokens=6)
    assert run_job(qtbot, w, w.start_compare)["ok"] and w.results.tabs.currentWidget() is w.results.compare
    assert run_job(qtbot, w, w.start_run)["ok"]
    assert w.results.tabs.currentWidget() is w.results.run_split
    w.results.tabs.setCurrentWidget(w.results.compare)
    w.presenter.fullscreen = False
    w.presenter.enter()
    assert run_job(qtbot, w, w.presenter.next)["ok"]
    assert w.results.tabs.currentWidget() is w.results.run_split
    w.presenter.leave()


def test_the_header_compares_decode_rates_over_the_same_number_of_tokens(qtbot):
    """Sampled runs: the speculative run stopped at EOS, plain decoding went on. The header's
    speedup measures both over the tokens both made, and says so."""
    from test_session import event, summary

    from dspark_studio.panes.header import HeaderStrip
    from dspark_studio.state.runs import PLAIN_LABEL, Run
    from dspark_studio.state.session import View

    def record(key, method, n, tps_at, per_round):
        r = Run(
            key=key,
            label="d1" if method == "speculative" else PLAIN_LABEL,
            method=method,
            prompt="p",
            prompt_index=0,
            drafter=None,
            config={"temperature": 1.0},
        )
        done = 0
        while done < n:
            done = min(done + per_round, n)
            r.rounds.append(
                event(
                    len(r.rounds),
                    per_round - 1,
                    per_round - 1,
                    [7] * per_round,
                    generated=done,
                    seconds=done / tps_at(done),
                )
            )
        r.summary = summary(method, [7] * n, len(r.rounds), r.rounds[-1].tokens_per_sec)
        return r

    # plain decoding: 10 tok/s for its first 20 tokens, then much faster (its whole-run rate is 44 tok/s)
    plain = record(2, "plain", 200, lambda k: 10.0 if k <= 20 else k / (2 + (k - 20) / 100), 1)
    speculative = record(1, "speculative", 20, lambda k: 20.0, 4)  # EOS after 20 tokens
    h = HeaderStrip()
    qtbot.addWidget(h)
    h.show_view(
        View(
            kind="run",
            tab="run",
            speculative=speculative,
            plain=plain,
            runs=(speculative, plain),
            prompts=1,
            comparison=(),
            rows=(),
            compare_prompts=0,
            focus=None,
            busy=False,
        )
    )
    assert h.values["speedup"].text() == "2.00×"  # 20 tok/s against 10 over the same 20 tokens (not 0.45×)
    assert "both measured over the first 20" in h.values["speedup"].toolTip()
    # the two tok/s shown are the two the speedup divides, and say so
    assert (h.values["speculative"].text(), h.values["plain"].text()) == ("20.0", "10.0")
    assert h.captions["plain"].text() == "plain tok/s · first 20 tokens"
    short = record(3, "speculative", 2, lambda k: 20.0, 2)  # EOS after 2 tokens: too few to compare
    h.show_view(
        View(
            kind="run",
            tab="run",
            speculative=short,
            plain=plain,
            runs=(short, plain),
            prompts=1,
            comparison=(),
            rows=(),
            compare_prompts=0,
            focus=None,
            busy=False,
        )
    )
    assert h.values["speedup"].text() == "–" and "too few to compare" in h.values["speedup"].toolTip()
    assert h.captions["plain"].text() == "plain tok/s"  # whole-run rates again


def test_a_bad_drafter_comes_in_unticked_and_unselected_and_compare_skips_it(qtbot, window, dirs):
    from PySide6.QtCore import Qt

    from dspark_studio.state.runs import PLAIN_LABEL

    w, c = window, window.controls
    setup(w, dirs, drafters=("drafter",), max_tokens=8)
    assert run_job(qtbot, w, w.start_run)["ok"]
    broken = str(dirs["broken"])
    w.add_drafter(broken, select=True)  # what Add… does with the directory a person picked
    qtbot.waitUntil(lambda: w.session.choices.error(broken) is not None, timeout=LONG)
    item = c.drafters.item(1)
    assert "⚠" in item.text() and "not valid JSON" in item.toolTip() and item.checkState() == Qt.Unchecked
    assert w.session.choices.run_drafter() == str(dirs["drafter"]) and "not valid JSON" in w.results.message.text()
    w.add_drafter("/no/such/drafter", select=True)  # not a directory: marked at once
    assert "not a directory" in w.session.choices.error("/no/such/drafter") and w.session.choices.run_drafter() == str(
        dirs["drafter"]
    )
    # Run with a bad drafter selected by hand: one message, nothing started, nothing shown is lost
    shown = w.session.shown_runs()
    c.drafters.setCurrentRow(1)
    w.start_run()
    assert (
        not w.busy and w.session.shown_runs() == shown and "cannot run with drafter broken" in w.results.message.text()
    )
    # Compare skips a bad drafter ticked by hand, and one the worker only finds bad while comparing
    item.setCheckState(Qt.Checked)
    w.add_drafter(str(dirs["other_drafter"]))  # ticked; its load error has not arrived yet
    assert str(dirs["other_drafter"]) in w.session.choices.checked()
    info = run_job(qtbot, w, w.start_compare)
    assert info["ok"] and [r["label"] for r in w.results.compare.rows] == ["drafter", PLAIN_LABEL]
    assert "different target" in w.session.choices.error(str(dirs["other_drafter"]))
    assert str(dirs["other_drafter"]) not in w.session.choices.checked()


def test_a_plain_decoding_run_leaves_no_stale_tau_over_empty_axes(qtbot, window, dirs):
    w = window
    setup(w, dirs, max_tokens=8)
    assert run_job(qtbot, w, w.start_run)["ok"]
    assert (
        "τ\u00a0=" in w.results.plots.hist.getPlotItem().titleLabel.text and not w.results.plots.boxes["hist"].is_empty
    )
    w.controls.drafters.setCurrentRow(0)
    w.controls.remove_b.click()  # no drafter: Run does plain decoding only
    assert run_job(qtbot, w, w.start_run)["ok"]
    assert "τ" not in w.results.plots.hist.getPlotItem().titleLabel.text and w.results.plots.boxes["hist"].is_empty
    assert not w.results.plots.boxes["tps"].is_empty  # plain decoding's curve is drawn


def test_recent_lists_remember_only_directories_that_loaded(qtbot, dirs, tmp_path, monkeypatch):
    from dspark_studio.files import settings
    from dspark_studio.window.main_window import MainWindow

    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(tmp_path / "home"))
    prefs = settings.Settings()
    w = MainWindow(prefs)
    qtbot.addWidget(w)
    w.show()
    target = str(dirs["target"])
    w.restore(target, [])
    qtbot.waitUntil(lambda: prefs.recent("targets") == [target], timeout=LONG)
    for bad in (str(tmp_path / "no-such-target"), str(dirs["broken"])):
        w.results.message.hide()
        w.controls.target.setEditText(bad)
        w.on_target_chosen(bad)
        qtbot.waitUntil(w.results.message.isVisible, timeout=LONG)
    assert prefs.recent("targets") == [target]
    assert [w.controls.target.itemText(i) for i in range(w.controls.target.count())] == [target]
    w.controls.target.setEditText(target)
    w.on_target_chosen(target)
    w.add_drafter(str(dirs["broken"]))
    w.add_drafter(str(dirs["drafter"]))
    qtbot.waitUntil(lambda: str(dirs["drafter"]) in prefs.recent("drafters"), timeout=LONG)
    assert str(dirs["broken"]) not in prefs.recent("drafters")
    w.close()


@pytest.mark.usefixtures("costs_measured_once")
def test_a_run_where_auto_drafted_nothing_measures_nothing(qtbot, window, dirs, monkeypatch):
    """auto decoded plainly throughout (no round paid): tau and acceptance are "–", not "0.00" and
    "0%" (tau is at least 1 by its own definition), the acceptance plots show their "nothing yet"
    text, and the speedup says why it differs from 1."""
    from dspark.policy import Scheduler

    monkeypatch.setattr(Scheduler, "drafts", lambda self, position, budget: False)  # no round pays
    w = window
    setup(w, dirs, max_tokens=10)
    w.controls.form.widget("policy").setCurrentText("auto")
    assert run_job(qtbot, w, w.start_run)["ok"]
    speculative, _ = w.session.shown_runs()
    assert speculative.summary.plain_steps == 10 and speculative.summary.rounds == 0
    h = w.results.header
    assert h.values["tau"].text() == "–" and h.values["rate"].text() == "–"
    assert "No round drafted" in h.values["speedup"].toolTip()
    # and, once, why it bought nothing and what to do (dspark.advice)
    assert "auto decoded 10 of 10 tokens plainly" in w.statusBar().currentMessage()
    assert w.results.plots.boxes["position"].is_empty and w.results.plots.boxes["hist"].is_empty


def test_a_pause_of_the_machine_is_said_and_left_out_of_both_rates(qtbot, window, dirs, monkeypatch):
    """Plain decoding stalls 1.5 s at its 4th token (another process, a laptop lid): the header says
    so beside the speedup, and both rates it shows, which divide to the speedup, leave the pause out,
    where it would otherwise be most of plain decoding's time."""
    import time

    from dspark import engine, metrics

    real = engine.generate_step

    def stalling(*args, **kwargs):
        for i, out in enumerate(real(*args, **kwargs)):
            if i == 4:
                time.sleep(1.5)
            yield out

    monkeypatch.setattr(engine, "generate_step", stalling)
    w = window
    setup(w, dirs, max_tokens=24)
    assert run_job(qtbot, w, w.start_run)["ok"]
    speculative, plain = w.session.shown_runs()
    (i, seconds), *rest = metrics.pauses(plain.rounds)
    assert not rest and not metrics.pauses(speculative.rounds) and 1.3 < seconds < 1.6
    h = w.results.header
    assert f"a {seconds:.1f} s pause of the machine in plain decoding, left out" in h.busy.text()
    (mark,) = w.results.plots.pause_marks  # and on the tok/s plot, where it happened
    assert mark.value() == pytest.approx(metrics.decode_seconds(plain.rounds[i]))
    plain_tps = float(h.values["plain"].text())
    kept = metrics.decode_seconds(plain.rounds[-1]) - seconds
    assert plain_tps == pytest.approx(len(plain.summary.tokens) / kept, rel=0.02)
    assert plain_tps > 2 * plain.summary.tokens_per_sec  # the whole-run rate holds the pause
    ratio = float(h.values["speculative"].text()) / plain_tps
    assert float(h.values["speedup"].text().rstrip("×")) == pytest.approx(ratio, abs=0.02)
