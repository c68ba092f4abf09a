"""The app on stage (issue #22, items 3-11, 13, 14): what confused a speaker or a newcomer,
driven through the real window (pytest-qt, offscreen; one test under X11 with a window
manager when Xvfb and openbox are installed) on tiny models or plain worker messages."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QColor, QFontInfo, QImage
from PySide6.QtWidgets import QApplication
from test_app import LONG, ROOT, dirs, run_job, setup, window  # noqa: F401  (shared fixtures)
from test_app_replay import saved  # noqa: F401  (runs saved by the app)
from test_app_truth import two_prompt_set
from test_session import event, summary

from dspark_studio.state import runs as runs_module
from dspark_studio.state.messages import CostsMeasured, Progress, RoundDone, RunDone, RunStarted
from dspark_studio.state.runs import PLAIN_LABEL
from dspark_studio.state.session import COMPARE_TAB
from dspark_studio.window.main_window import MainWindow


def compared(qtbot, w, dirs, size):
    """A two-drafter comparison on the Compare tab of a window ``size`` big."""
    w.resize(*size)
    setup(w, dirs, drafters=("drafter", "drafter2"), max_tokens=16)
    assert run_job(qtbot, w, w.start_compare)["ok"]
    QApplication.processEvents()


def inside(child, parent) -> bool:
    return parent.rect().contains(QRect(child.mapTo(parent, QPoint(0, 0)), child.size()))


# --- 3 and 11: a 1024 x 640 window (a projector's mirrored laptop) is usable, and full screen ends --------
@pytest.mark.parametrize("size", [(1024, 640), (1280, 800)])
def test_the_window_fits_a_small_screen_with_every_figure_and_legend_whole(qtbot, window, dirs, size):
    """The window was at least 1189 px wide: on a smaller screen the window manager could not
    take it out of full screen (Esc and F11 did nothing), and at 600 px high the legends were cut."""
    w = window
    compared(qtbot, w, dirs, size)
    assert (w.width(), w.height()) == size and w.minimumSizeHint().width() <= size[0]
    assert w.minimumSizeHint().height() <= size[1]
    header = w.results.header
    assert all(inside(header.values[k], header) and inside(header.captions[k], header) for k in header.values)
    for plot in (w.results.compare.position, w.results.compare.tps):
        title = plot.getPlotItem().titleLabel
        assert title.boundingRect().width() <= plot.width()  # the legend wraps instead of widening the plot
        view = plot.getPlotItem().getViewBox()
        assert view.sceneBoundingRect().right() <= plot.width() and view.height() >= 60
    w.presenter.fullscreen = False
    w.presenter.enter()
    assert w.minimumSizeHint().width() <= size[0] and w.minimumSizeHint().height() <= size[1]
    w.presenter.leave()
    assert w.statusBar().currentMessage() == "left presentation mode"  # not "… Esc to leave" any more
    assert w.minimumSizeHint().width() <= size[0]  # the controls are back: still fits the screen


X11_ESC = textwrap.dedent("""
    import subprocess, sys
    from PySide6.QtCore import Qt, QTimer
    from PySide6.QtTest import QTest
    from dspark_studio.startup import build_parser, open_window
    app, w, _ = open_window(build_parser().parse_args(["--replay", sys.argv[1], "--presentation"]), True)
    w.show()
    w.presenter.enter()
    w.open_replay([sys.argv[1]], "instant")
    def state():
        out = subprocess.run(["xprop", "-id", str(int(w.winId())), "_NET_WM_STATE"], capture_output=True, text=True)
        return out.stdout.strip()
    def leave():
        print("before", w.isFullScreen(), state(), flush=True)
        QTest.keyClick(w, Qt.Key_Escape)
        QTimer.singleShot(1500, done)
    def done():
        print("after", w.isFullScreen(), w.width(), w.height(), state(), w.statusBar().currentMessage(), flush=True)
        w.close()
    QTimer.singleShot(3000, leave)
    sys.exit(app.exec())
""")


@pytest.mark.skipif(
    not all(shutil.which(p) for p in ("Xvfb", "openbox", "xprop")),
    reason="needs an X server with a window manager (apt-get install xvfb openbox x11-utils)",
)
def test_esc_leaves_full_screen_under_a_window_manager_on_a_small_screen(saved, tmp_path):
    """What a speaker saw: Esc left presentation mode, but the window stayed full screen."""
    display = ":93"
    xvfb = subprocess.Popen(
        ["Xvfb", display, "-screen", "0", "1024x640x24"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        env = {
            **os.environ,
            "DISPLAY": display,
            "QT_QPA_PLATFORM": "xcb",
            "DSPARK_STUDIO_HOME": str(tmp_path / "home"),
            "PYTHONPATH": str(ROOT),
        }
        time.sleep(1)  # the server up
        wm = subprocess.Popen(["openbox"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(1)  # the window manager up
            r = subprocess.run(
                [sys.executable, "-c", X11_ESC, str(saved["compare"]["file"])],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
        finally:
            wm.terminate()
    finally:
        xvfb.terminate()
    lines = {line.split(" ", 1)[0]: line for line in r.stdout.splitlines()}
    assert "before True" in lines.get("before", "") and "FULLSCREEN" in lines["before"], r.stdout + r.stderr[-2000:]
    assert lines["after"].startswith("after False") and "FULLSCREEN" not in lines["after"], r.stdout
    assert "left presentation mode" in lines["after"]


# --- 4: export what is on screen, skip what is empty ---------------------------------------------
def test_saved_pngs_are_what_is_on_screen_and_empty_plots_are_skipped_and_said(qtbot, window, dirs, tmp_path):
    w = window
    setup(w, dirs, max_tokens=12)
    assert run_job(qtbot, w, w.start_run)["ok"]  # the Run tab; nothing compared yet
    out = w.export_pngs(str(tmp_path / "run"))
    names = {p.stem for p in out}
    assert names == {"text", "draft_rows", "acceptance_by_position", "accepted_length", "tokens_per_sec", "window"}
    said = w.statusBar().currentMessage()
    assert "compare_acceptance_by_position" in said and "compare_costs" in said  # skipped, and said
    widgets = w.plot_widgets()
    for p in out:
        img = QImage(str(p))
        assert (img.width(), img.height()) == (widgets[p.stem].width(), widgets[p.stem].height())
    compared(qtbot, w, dirs, (1280, 800))
    names = {p.stem for p in w.export_pngs(str(tmp_path / "compare"))}
    assert names == {"compare_acceptance_by_position", "compare_tokens_per_sec", "window"}  # the tab on screen


# --- 5: offline, one sentence -------------------------------------------------------------------
def test_download_offline_says_where_the_cache_is_and_how_to_copy_a_model_in(qtbot, window, tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    def no_network(*_a, **_k):
        raise LocalEntryNotFoundError(
            "An error happened while trying to locate the files on the Hub, and we cannot "
            "find the appropriate snapshot folder for the specified revision on the local "
            "disk. Please check your internet connection and try again. " * 3
        )

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_network)
    dialog = window.open_download()
    repo = "mlx-community/gemma-4-e2b-it-4bit"
    item = next(
        dialog.list.item(i) for i in range(dialog.list.count()) if dialog.list.item(i).data(Qt.UserRole) == repo
    )
    dialog.list.setCurrentItem(item)
    qtbot.waitUntil(lambda: "cannot be reached" in dialog.info.text(), timeout=LONG)
    for text in (dialog.info.text(), None):
        if text is None:
            dialog.start()
            qtbot.waitUntil(
                lambda: dialog.download_b.isEnabled() and "cannot be reached" in dialog.info.text(), timeout=LONG
            )
            text = dialog.info.text()
        first = text.splitlines()[0]
        assert "already cached" not in first and first.count(repo) == 1 and "An error happened" not in first
        assert str(tmp_path / "hub") in first and "models--mlx-community--gemma-4-e2b-it-4bit" in first
        assert "copy" in first and first.count(". ") == 0  # one sentence


# --- 6: one colour per drafter, one line style per policy, everywhere -----------------------------
def bench_doc() -> dict:
    def arm(name, drafter, policy, speedup):
        return {
            "arm": name,
            "drafter": drafter,
            "policy": policy,
            "trials": 2,
            "tokens_per_sec": 100.0 * speedup,
            "speedup": speedup,
            "speedup_spread": {"n": 2, "min": speedup, "p25": speedup, "p75": speedup, "max": speedup},
            "tau": 3.0,
            "acceptance_rate": 0.6,
            "per_position_acceptance": [0.8, 0.6, 0.4],
            "rounds": 10,
        }

    costs = {"verify_ms": [5.0, 6.0, 7.0, 8.0], "draft_ms": 2.0, "step_ms": 5.0}
    return {
        "_path": "/x/summary.json",
        "environment": {"cpu": "test"},
        "prompts": {"count": 2},
        "settings": {"max_tokens": 8, "repeats": 1},
        "started": "2026-01-01T00:00:00",
        "arms": [
            {"arm": "plain", "trials": 2, "tokens_per_sec": 100.0, "per_position_acceptance": []},
            arm("dspark fixed", "dspark", "fixed", 1.5),
            arm("dflash fixed", "dflash", "fixed", 1.3),
            arm("dspark auto", "dspark", "auto", 1.6),
            arm("dflash auto", "dflash", "auto", 1.4),
        ],
        "costs": {"dflash": costs, "dspark": {**costs, "draft_ms": 3.0}},
    }


def test_a_benchmark_colours_each_drafter_alike_in_the_table_every_plot_and_every_export(qtbot, window):
    from dspark_studio.figures import _figures
    from dspark_studio.panes.plots import LINE_STYLES

    w = window
    assert w.session.show_bench(bench_doc())
    w.refresh()
    c = w.results.compare
    table = {c.table.item(r, 0).text(): c.table.item(r, 0).data(Qt.DecorationRole).name() for r in range(5)}
    curves = {
        item.opts["pen"].color().name(): item.opts["pen"].style() for item in c.position.getPlotItem().listDataItems()
    }
    by_arm = [(table[a], a.split()[1]) for a in ("dspark fixed", "dspark auto", "dflash fixed", "dflash auto")]
    assert table["dspark fixed"] == table["dspark auto"] != table["dflash fixed"] == table["dflash auto"]
    assert set(curves) == {colour for colour, _ in by_arm}
    pens = [(i.opts["pen"].color().name(), i.opts["pen"].style()) for i in c.position.getPlotItem().listDataItems()]
    assert set(pens) == {(colour, LINE_STYLES["solid" if p == "fixed" else "dot"]) for colour, p in by_arm}
    costs = {i.opts["pen"].color().name() for i in c.costs.getPlotItem().listDataItems()}
    assert costs == {table["dspark fixed"], table["dflash fixed"]}  # the costs plot: each drafter in its colour
    a, b = QColor(table["dspark fixed"]), QColor(table["dflash fixed"])
    assert abs(a.hueF() - b.hueF()) > 0.15  # told apart at a glance
    exported = _figures(bench_doc(), w.theme)  # dspark-studio --bench-figures: the same colours
    pens = {
        (i.opts["pen"].color().name(), i.opts["pen"].style())
        for i in exported["acceptance"].getPlotItem().listDataItems()
    }
    assert pens == {(colour, LINE_STYLES["solid" if p == "fixed" else "dot"]) for colour, p in by_arm}


# --- 7: the keyboard ----------------------------------------------------------------------------
def test_tab_leaves_the_prompt_box_ctrl_arrows_step_the_set_and_the_focus_shows(qtbot, window, dirs):
    w = window
    setup(w, dirs)
    two_prompt_set(w)
    box = w.controls.prompt
    w.activateWindow()
    box.setFocus()
    qtbot.waitUntil(box.hasFocus, timeout=LONG)
    unfocused = w.controls.drafters.grab().toImage()
    qtbot.keyClick(box, Qt.Key_Right, Qt.ControlModifier)  # the set's next prompt, not the next word
    assert w.session.choices.prompt_index == 1 and w.session.choices.prompt == "to in is it"
    qtbot.keyClick(box, Qt.Key_Tab)
    assert "\t" not in w.session.choices.prompt and not box.hasFocus()  # out of the box by keyboard
    w.controls.drafters.setFocus()
    qtbot.waitUntil(w.controls.drafters.hasFocus, timeout=LONG)
    focused = w.controls.drafters.grab().toImage()
    accent = QColor(w.theme.accent)

    def frame(img) -> int:  # accent pixels on the outermost rows: the focus frame
        return sum(img.pixelColor(x, y) == accent for x in range(img.width()) for y in (0, img.height() - 1))

    assert frame(focused) >= focused.width() and frame(unfocused) == 0


# --- 8: after a restart ---------------------------------------------------------------------------
def test_a_restart_finds_the_prompt_in_its_set_forgets_refused_drafters_and_a_replay_lists_its_own(
    qtbot, dirs, saved, tmp_path, monkeypatch
):
    from dspark import prompts
    from dspark_studio.files import settings
    from dspark_studio.startup import build_parser, open_window

    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(tmp_path / "home"))
    first = MainWindow(settings.Settings())
    qtbot.addWidget(first)
    first.restore(str(dirs["target"]), [str(dirs["drafter"]), str(dirs["broken"])])
    qtbot.waitUntil(lambda: first.session.choices.error(str(dirs["broken"])) is not None, timeout=LONG)
    demo = prompts.get("demo")
    first.controls.prompt_set.setCurrentText(demo.name)
    first.controls.prompt.setPlainText(demo.prompts[2])  # as pasted: the third prompt of the set
    first.close()
    gc.unfreeze()
    _app, w, _target = open_window(build_parser().parse_args([]), True)  # the last models, as a restart opens
    qtbot.addWidget(w)
    # what opening the window made is out of full collections (each walked it all: 83-106 ms)
    assert gc.get_freeze_count() > 10_000
    c = w.session.choices
    assert c.paths() == [str(dirs["drafter"])] and not w.results.message.isVisible()  # the refused one is gone
    assert w.controls.counter.text() == f"3 / {len(demo.prompts)}"  # not "typed"
    w.presenter.fullscreen = False
    w.presenter.enter()
    w.start_run()
    assert w.results.prompt_label.text().startswith(f"Prompt 3 of {len(demo.prompts)}")  # not "Your prompt"
    qtbot.waitUntil(lambda: not w.busy, timeout=LONG)
    w.close()
    _app, r, _target = open_window(build_parser().parse_args(["--replay", str(saved["compare"]["file"])]), True)
    qtbot.addWidget(r)
    recorded = {run["drafter"] for run in json.loads(saved["compare"]["file"].read_text())["runs"] if run["drafter"]}
    assert set(r.session.choices.paths()) == recorded and not r.results.message.isVisible()
    r.close()


# --- 9: Measure costs --------------------------------------------------------------------------------
def test_measure_costs_measures_the_ticked_drafters_with_progress_and_leaves_no_replay_badge(
    qtbot, window, dirs, saved, tmp_path, monkeypatch
):
    monkeypatch.setenv("DSPARK_COSTS_DIR", str(tmp_path / "costs"))
    w = window
    setup(w, dirs, drafters=("drafter", "drafter2"))
    assert run_job(qtbot, w, lambda: w.open_replay([str(saved["compare"]["file"])], "instant"))["ok"]
    assert w.results.header.mode.isVisible()  # REPLAY, on the Compare tab
    w.controls.drafters.item(1).setCheckState(Qt.Unchecked)  # drafter2 not ticked
    asked = []
    monkeypatch.setattr(w.engine, "measure_costs", asked.append)
    assert w.measure_costs()
    assert list(asked[0].drafters) == [str(dirs["drafter"])]  # only what is ticked
    assert w.session.tab == COMPARE_TAB and not w.results.header.mode.isVisible()  # the old badge is gone
    w.on_message(Progress("measuring this machine's costs", 0, 1, "drafter", 20.0))
    w.refresh()
    bar = w.results.progress
    assert bar.isVisible() and "drafter (1 of 1)" in bar.label.text() and "about 20 s left" in bar.label.text()
    costs = {"verify_ms": [1.0 + k for k in range(8)], "draft_ms": 2.0, "step_ms": 3.0}
    w.on_message(CostsMeasured(str(dirs["drafter"]), costs))
    w.on_message(Progress("measuring this machine's costs", 1, 1))
    w.refresh()
    assert not bar.isVisible()
    plot = w.results.compare.costs
    assert plot.getViewBox().viewRange()[0][1] >= 7  # every width, 0..7
    assert plot.getPlotItem().titleLabel.boundingRect().width() <= plot.width()  # the legend whole


def test_the_worker_says_how_long_measuring_costs_will_take(qtbot, window, dirs, tmp_path, monkeypatch):
    monkeypatch.setenv("DSPARK_COSTS_DIR", str(tmp_path / "costs"))
    w = window
    setup(w, dirs, drafters=("drafter",))
    seen = []
    w.engine.worker.message.connect(lambda m: seen.append(m) if isinstance(m, Progress) else None, Qt.DirectConnection)
    assert w.measure_costs()
    qtbot.waitUntil(lambda: str(dirs["drafter"]) in w.session.costs, timeout=LONG * 4)
    qtbot.waitUntil(lambda: any(p.done == p.total for p in seen), timeout=LONG)
    first = seen[0]
    assert first.done == 0 and first.total == 1 and first.now == "drafter" and first.seconds_left > 0


# --- 10: errors name the app's controls ---------------------------------------------------------------
def test_a_mistake_is_said_with_the_app_s_controls_not_command_line_flags(qtbot, window, dirs):
    from dspark_studio.state.wording import in_app

    w = window
    w.on_target_chosen(str(dirs["drafter"]))  # a drafter picked as the target
    qtbot.waitUntil(w.results.message.isVisible, timeout=LONG)
    text = w.results.message.text()
    assert "--" not in text and "Add…" in text and "is a drafter, not a target model" in text
    assert in_app("use --max-tokens 64 or --ignore-eos") == "use the Max tokens setting 64 or the Stop at EOS setting"


# --- 13: the machine's load beside the speedup, in replays too -----------------------------------------
def load_run(w, load: float, own: float, plain_rates=(100.0,)):
    s = w.session
    job = s.new_job("run", "/t", ["p"], (), config={})
    s.apply(
        RunStarted(
            job=job.id, key=1, label="d1", method="speculative", drafter="/d1", prompt="p", prompt_index=0, config={}
        )
    )
    for i in range(4):
        s.apply(RoundDone(1, event(i, 3, 3, [1, 2, 3, 4], generated=4 * (i + 1), seconds=0.02 * (i + 1)), ("a",) * 3))
    s.apply(RunDone(1, summary("speculative", [1] * 16, 4, 200.0), {"load": load, "own": own, "cores": 2}))
    s.apply(
        RunStarted(
            job=job.id, key=2, label=PLAIN_LABEL, method="plain", drafter=None, prompt="p", prompt_index=0, config={}
        )
    )
    clock = 0.0
    for i in range(40):  # the first half of the tokens at the first rate, the rest at the last
        clock += 1 / plain_rates[0 if i < 20 else -1]
        s.apply(RoundDone(2, event(i, 0, 0, [1], generated=i + 1, seconds=clock), ()))
    s.apply(RunDone(2, summary("plain", [1] * 40, 40, 100.0), {"load": load, "own": own, "cores": 2}))
    from dspark_studio.state.messages import JobDone

    s.apply(JobDone(job.id, True, False))
    w.refresh()


def test_a_busy_machine_is_said_beside_the_speedup_and_a_replay_says_it_too(qtbot, window, tmp_path):
    from dspark_studio.files import replay, run_export

    w = window
    load_run(w, load=1.1, own=1.0)  # this app alone: quiet
    note = w.results.header.busy
    assert not note.isVisible()
    load_run(w, load=3.2, own=1.0)  # others kept 2.2 of 2 cores busy
    assert note.isVisible() and note.text() == "⚠ machine busy: 3.2 load on 2 cores: figures vary"
    assert inside(note, w.results.header)
    load_run(w, load=1.0, own=1.0, plain_rates=(100.0, 60.0))  # quiet, but plain decoding jumped about
    assert note.isVisible() and "plain decoding varied" in note.text() and "busy" not in note.text()
    load_run(w, load=3.2, own=1.0)
    saved_file = run_export.write_json(tmp_path / "busy.json", list(w.session.runs), None)
    assert json.loads(saved_file.read_text())["runs"][0]["machine"] == {"load": 3.2, "own": 1.0, "cores": 2}
    load_run(w, load=0.2, own=0.1)
    assert not note.isVisible()
    assert run_job(qtbot, w, lambda: w.open_replay([str(saved_file)], "instant"))["ok"]
    assert note.isVisible() and "machine busy: 3.2 load on 2 cores" in note.text()  # recorded, so replayed
    rec = replay.read_recording(saved_file)
    assert rec.runs[0].machine == {"load": 3.2, "own": 1.0, "cores": 2}
    assert runs_module.recorded_machine({"load": float("nan"), "own": 1, "cores": 2}) == {}


def test_a_comparison_records_the_load_in_its_rows_and_its_saved_benchmark(qtbot, window, dirs, tmp_path):
    w = window
    compared(qtbot, w, dirs, (1280, 800))
    rows = w.session.view().rows
    assert all(r["machine"] and r["machine"]["cores"] >= 1 and r["machine"]["load"] >= 0 for r in rows)
    doc = json.loads(w.export_data("json", True, str(tmp_path / "c.json")).read_text())
    assert doc["comparison"][0]["machine"] == rows[0]["machine"] and all(r["machine"] for r in doc["runs"])
    summary_file = w.save_comparison(str(tmp_path / "bench"))
    assert json.loads(summary_file.read_text())["machine"]["cores"] >= 1


# --- 14: presentation mode scales everything with the window ------------------------------------------------
def test_presentation_mode_scales_every_type_size_with_the_window(qtbot, window, dirs):
    w = window
    setup(w, dirs, max_tokens=12)
    assert run_job(qtbot, w, w.start_run)["ok"]
    w.presenter.fullscreen = False

    def sizes(width, height):
        w.resize(width, height)
        w.presenter.enter()
        QApplication.processEvents()
        qtbot.wait(50)
        w.refresh()
        r = w.results
        tick = r.plots.hist.getAxis("bottom").style["tickFont"]
        out = {
            "text": QFontInfo(r.text.text.font()).pixelSize(),
            "draft rows": QFontInfo(r.drafts.grid.cell_font).pixelSize(),
            "ticks": QFontInfo(tick).pixelSize(),
            "values": QFontInfo(r.header.values["tau"].font()).pixelSize(),
        }
        w.presenter.leave()
        return out

    laptop, projector = sizes(1280, 800), sizes(1920, 1080)
    assert all(projector[k] >= 1.25 * laptop[k] for k in laptop), (laptop, projector)
    assert min(projector[k] for k in ("text", "draft rows", "ticks")) >= 26, projector  # was 16-20 px


def test_an_opened_benchmark_says_how_busy_its_machine_was(qtbot, window):
    w = window
    doc = bench_doc()
    doc["environment"].update(load_average=[3.0, 2.0, 1.0], cpus=2)
    assert w.session.show_bench(doc)
    w.refresh()
    note = w.results.header.busy
    assert note.isVisible() and note.text() == "⚠ machine busy: 3.0 load on 2 cores: figures vary"
    doc["environment"]["load_average"] = [0.3, 0.2, 0.1]
    w.session.bench = None
    assert w.session.show_bench(doc)
    w.refresh()
    assert not note.isVisible()
