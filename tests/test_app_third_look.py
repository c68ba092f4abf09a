"""The app, third look (issue #42): what still confused a drafter author, a speaker and a newcomer,
and the cosmetic slips, each driven through the real widgets (pytest-qt, offscreen) on plain worker
messages or the tiny models of ``test_app``."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QFileDialog, QLineEdit, QListView
from test_app import LONG, dirs, run_job, setup, window  # noqa: F401  (the shared tiny models and window)
from test_session import play

from dspark.diagnose.findings import Diagnosis
from dspark.events import CommittedToken, RoundEvent, Source
from dspark_studio.files import settings
from dspark_studio.files.benchmark import describe_bench
from dspark_studio.panes.diagnosis import OTHER_PROMPTS
from dspark_studio.panes.draft_grid import DraftGrid, DraftPane
from dspark_studio.panes.header import HeaderStrip
from dspark_studio.panes.theme import NORMAL, PRESENTATION, drafter_colours, scaled, stylesheet
from dspark_studio.state.diagnoses import Entry
from dspark_studio.state.messages import Arm, CostsMeasured, JobDone, Progress, RunDone, RunStarted, Status
from dspark_studio.state.runs import PLAIN_LABEL
from dspark_studio.state.session import COMPARE_TAB, REJECTIONS_TAB, RUN_TAB, Session
from dspark_studio.window.main_window import MainWindow


def round_event(index: int, drafted=(), accepted: int = 0, *, plain_step: bool = False) -> RoundEvent:
    """A round drafting ``drafted`` (a plain step of auto: none), the target's token after them."""
    source = Source.TARGET if plain_step else Source.BONUS if accepted == len(drafted) else Source.CORRECTION
    token = CommittedToken(id=7, text="x", source=source, round=index, position=accepted, target_prob=0.5)
    return RoundEvent(
        index=index,
        anchor=1,
        drafted=tuple(drafted),
        draft_probs=(0.5,) * len(drafted),
        confidences=None,
        verify_width=len(drafted),
        accepted=accepted,
        committed=(token,),
        draft_seconds=0.0,
        verify_seconds=0.0,
        elapsed_seconds=0.1 * (index + 1),
        tokens_generated=index + 1,
        tokens_per_sec=10.0,
        plain_step=plain_step,
    )


def shown_pane(qtbot, widget, size=(600, 300)):
    qtbot.addWidget(widget)
    widget.resize(*size)
    widget.show()
    return widget


# --------------------------------------------------------------------------- a drafter author
def test_a_byte_token_is_explained_by_the_legend_and_its_cell(qtbot):
    """An untrained drafter proposes lone bytes of multi-byte characters, which decode to "�": the
    legend names the glyph, the cell's tooltip says what it is."""
    pane = shown_pane(qtbot, DraftPane())
    pane.set_rounds([round_event(0, drafted=(5, 6), accepted=1)], [("\ufffd", "a")])
    assert "�</b>&nbsp;byte&nbsp;of&nbsp;a&nbsp;character" in pane.legend.text()
    g = pane.grid
    tip = g.tip_at(g.label_w + 2, 2)
    assert tip.startswith("round 0, draft 1: “�”") and "a byte token" in tip


def test_auto_s_plain_steps_are_marked_as_such_in_the_draft_rows(qtbot):
    """With auto, the rows list plain steps among rounds (150 rows beside 35 counted rounds): each
    plain step says so over its row and in its tooltip, and the legend counts both."""
    pane = shown_pane(qtbot, DraftPane())
    rounds = [round_event(0, drafted=(5, 6, 7), accepted=2)]
    rounds += [round_event(i, plain_step=True) for i in (1, 2)]
    rounds.append(round_event(3, drafted=(5, 6, 7), accepted=0))
    pane.set_rounds(rounds, [("a", "b", "c"), (), (), ("a", "b", "c")])
    g = pane.grid
    assert "1&nbsp;plain" not in pane.legend.text()
    assert "2&nbsp;rounds, 2&nbsp;plain&nbsp;steps" in pane.legend.text()
    tip = g.tip_at(g.label_w + 2, g.row_h + 2)  # step 1, where a round's first draft would be
    assert tip.startswith("step 1: a plain step") and "not a round" in tip
    target = g.tip_at(g.label_w + g.cols * g.cell_w + 2, g.row_h * 2 + 2)
    assert target.startswith("step 2: the target's token") and "plain step" in target
    assert g.tip_at(g.label_w + 2, 2).startswith("round 0, draft 1")  # a round is a round
    # the row is painted with the words: the cells' area of a plain step is not left blank
    image = g.grab().toImage()
    y = g.row_h + g.row_h // 2
    inked = {image.pixelColor(x, y).name() for x in range(g.label_w + 4, g.label_w + g.cols * g.cell_w - 4)}
    assert len(inked) > 1


def test_the_target_column_header_is_whole_at_block_size_12(qtbot):
    grid = DraftGrid()
    grid.set_rounds([round_event(0, drafted=tuple(range(12)), accepted=3)], [tuple("abcdefghijkl")])
    grid = shown_pane(qtbot, grid, (grid.minimumSizeHint().width(), 200))
    assert grid.target_w >= grid.fm.horizontalAdvance("target") + 8  # "target", not "arge"
    assert grid.label_w + grid.cols * grid.cell_w + grid.target_w <= grid.width()  # and on screen
    last = grid.cell_rect(0, 12)
    assert grid.tip_at(last.right() - 2, last.center().y()).startswith("round 0: the target's token")


def test_the_block_size_note_is_in_view_at_1280x800(qtbot, window, dirs):
    """The note that the block size asks more than the drafter was trained at stood under the
    settings, below the fold of a 1280x800 window: it is now above Run / Stop / Compare."""
    w = window
    w.resize(1280, 800)
    setup(w, dirs)
    qtbot.waitUntil(lambda: w.session.choices.find(str(dirs["drafter"])).trained is not None, timeout=LONG)
    w.controls.form.widget("block_size").setValue(12)
    note = w.actions.block_note
    qtbot.waitUntil(lambda: note.isVisible() and not note.visibleRegion().isEmpty(), timeout=5_000)
    assert "trained at 4 drafts per round" in note.text()
    box = note.rect().translated(note.mapTo(w, QPoint(0, 0)))
    assert w.rect().contains(box)


def test_a_long_prompt_says_it_is_processed_before_its_first_token(qtbot, window, dirs, monkeypatch):
    """13.6 s of prefill said only "generating": a run now says it is processing its prompt of N
    tokens, with a bar, and, once the engine reports its chunks, how many of them are done."""
    from dspark_studio import worker
    from dspark_studio.state import progress

    real = worker.generate

    def reporting(target, drafter, prompt, config, *, prompt_progress=None, **kwargs):
        """The engine, reporting a chunk of a prompt too short to have one, then generating."""
        if prompt_progress is not None:  # a run's (the warm-up's generations ask for none)
            prompt_progress(2, len(worker.prompt_ids(target, prompt, config)))
        yield from real(target, drafter, prompt, config, **kwargs)

    monkeypatch.setattr(progress, "PREFILL_SHOWN", 4)
    monkeypatch.setattr(worker, "generate", reporting)
    seen = []
    w = window
    w.engine.worker.message.connect(seen.append, Qt.DirectConnection)
    setup(w, dirs, max_tokens=6)
    assert run_job(qtbot, w, w.start_run)["ok"]
    n = len(w.session.runs[0].summary.prompt_tokens)
    assert n >= 4
    task = "drafter: processing the prompt"
    said = [m for m in seen if isinstance(m, (Progress, Status)) and m != Status("ready")]
    first = next(i for i, m in enumerate(seen) if type(m).__name__ == "RoundDone")
    assert said.index(Progress(f"{task} of {n:,} tokens", 0, n)) < said.index(Status(f"{task} of {n:,} tokens …"))
    assert Progress(f"{task}: 2 of {n:,} tokens", 2, n) in seen[:first]
    assert Progress(task, n, n) in seen[first - 2 : first + 1]  # at its first token the bar ends ...
    assert Status("drafter: generating") in seen[first - 2 : first + 1]  # ... and it is generating
    assert Progress(f"{PLAIN_LABEL}: processing the prompt of {n:,} tokens", 0, n) in seen
    assert w.session.progress is None and w.results.progress.isHidden()


def test_nothing_done_and_no_estimate_shows_a_busy_bar(qtbot):
    from dspark_studio.panes.results import TaskProgress

    bar = shown_pane(qtbot, TaskProgress())
    bar.show_progress(Progress("d: processing the prompt of 3,040 tokens", 0, 3040))
    assert bar.bar.maximum() == 0  # a bar that moves by itself, not one stuck at 0
    assert bar.label.text().startswith("d: processing the prompt of 3,040 tokens")
    bar.show_progress(Progress("d: processing the prompt: 2,048 of 3,040 tokens", 2048, 3040))
    assert bar.bar.maximum() == 1000 and bar.bar.value() == 1000 * 2048 // 3040


def _costs() -> dict:
    return {"verify_ms": [1.0, 1.5, 2.0], "draft_ms": 0.5, "step_ms": 0.9}


def _compare(s: Session, labels: list[str], *, replay: str = ""):
    arms = [Arm(label, f"/d/{label}") for label in labels] + [Arm(PLAIN_LABEL, None)]
    job = s.new_job("compare", "/t", ["p"], arms, config={}, replay=replay)
    for key, arm in enumerate(arms, start=1):
        s.apply(
            RunStarted(
                job=job.id,
                key=key,
                label=arm.label,
                method="speculative" if arm.drafter else "plain",
                drafter=arm.drafter,
                prompt="p",
                prompt_index=0,
                config={},
            )
        )
    s.apply(JobDone(job.id, True, False))
    return job


def test_a_replayed_comparison_draws_no_cost_of_this_machine():
    """A replayed comparison of two drafters drew "measured cost" for the one that had run here
    since: its file keeps no costs, so it draws none; a live comparison draws this machine's."""
    s = Session()
    s.apply(CostsMeasured("/d/a", _costs()))
    _compare(s, ["a", "b"], replay="replay · both.json")
    assert s.view().costs == {}
    _compare(s, ["a", "b"])
    assert s.view().costs == {"a": _costs()}


def test_a_drafter_keeps_its_colour_for_the_session():
    """Colours followed the order of ticking: with the first drafter unticked the second took its
    colour. Each drafter keeps the colour of the order the session first met it in."""
    s = Session()
    for p in ("/d/a", "/d/b", "/d/c"):
        s.choices.add_drafter(p)
    order = s.view().colour_order
    assert order == ("a", "b", "c")
    s.choices.tick("/d/a", False)
    _compare(s, ["b", "c"])
    view = s.view()
    colours = drafter_colours(NORMAL, ["b", "c"], order=view.colour_order)
    assert colours == {"b": NORMAL.series[1], "c": NORMAL.series[2]}
    s.choices.remove_drafter("/d/b")  # gone from the list, met all the same
    assert drafter_colours(NORMAL, ["b"], order=s.view().colour_order) == {"b": NORMAL.series[1]}


def test_the_compare_tab_and_the_rejections_tab_draw_a_drafter_in_its_session_colour(qtbot, window, dirs):
    w = window
    setup(w, dirs, drafters=("drafter", "drafter2"), max_tokens=6)
    assert run_job(qtbot, w, w.start_compare)["ok"]
    first = {r["label"]: c for r, c in zip(w.session.view().rows, _curve_colours(w))}
    w.controls.drafters.item(0).setCheckState(Qt.Unchecked)  # "drafter" unticked
    assert run_job(qtbot, w, w.start_compare)["ok"]
    (label,) = [r["label"] for r in w.session.view().rows if r["label"] != PLAIN_LABEL]
    assert label == "drafter2" and _curve_colours(w) == [first["drafter2"]]


def _curve_colours(w) -> list[str]:
    return [item.opts["pen"].color().name() for item in w.results.compare.position.listDataItems()]


# --------------------------------------------------------------------------- a speaker
def _contrast(a: QColor, b: QColor) -> float:
    return abs(a.lightnessF() - b.lightnessF())


def test_the_open_run_dialog_is_readable_in_presentation_mode(qtbot, window):
    w = window
    w.presenter.fullscreen = False
    w.presenter.enter()
    dialog = QFileDialog(w, "Open run or benchmark")
    dialog.setOption(QFileDialog.DontUseNativeDialog)
    qtbot.addWidget(dialog)
    dialog.show()
    names = dialog.findChild(QListView, "listView")
    typed = dialog.findChild(QLineEdit, "fileNameEdit")
    for widget in (names, typed):
        pal = widget.palette()
        assert _contrast(pal.color(QPalette.Base), pal.color(QPalette.Text)) > 0.5  # not white on white
    dialog.close()


def test_after_esc_the_rejections_tab_draws_in_the_compare_tab_s_colours(qtbot, window, dirs):
    w = window
    setup(w, dirs, drafters=("drafter", "drafter2"), max_tokens=6)
    assert run_job(qtbot, w, w.start_compare)["ok"]
    w.presenter.fullscreen = False
    w.presenter.enter()
    w.show_tab(REJECTIONS_TAB)
    presented = dict(w.results.rejections.colours)
    assert set(presented.values()) <= set(PRESENTATION.series)
    qtbot.keyClick(w, Qt.Key_Escape)
    assert w.theme.name == "normal" and w.session.tab == REJECTIONS_TAB
    shown = w.results.rejections.colours
    w.show_tab(COMPARE_TAB)
    assert [shown[label] for label in ("drafter", "drafter2")] == _curve_colours(w)
    assert set(shown.values()) <= set(NORMAL.series)


def test_presenting_keeps_its_keys_in_the_status_bar(qtbot, window):
    """Started with --presentation the keys' notice went with the first "loading target …": the
    keys stay said while presenting."""
    w = window
    w.presenter.fullscreen = False
    w.presenter.enter()
    w.on_message(Status("loading target demo ..."))
    w.on_message(Status("ready"))
    assert w.keys_hint.isVisible() and "Esc" in w.keys_hint.text() and "Space" in w.keys_hint.text()
    w.presenter.leave()
    assert not w.keys_hint.isVisible()


def test_keys_switch_tabs_and_tab_leaves_the_compare_table(qtbot, window, dirs):
    w = window
    for key, tab in ((Qt.Key_2, COMPARE_TAB), (Qt.Key_3, REJECTIONS_TAB), (Qt.Key_1, RUN_TAB)):
        qtbot.keyClick(w, key, Qt.ControlModifier)
        assert w.session.tab == tab and w.results.tabs.currentWidget() is w.results.tab_widgets[tab]
    w.presenter.fullscreen = False
    w.presenter.enter()  # the menu bar hidden: the keys still work
    qtbot.keyClick(w, Qt.Key_2, Qt.ControlModifier)
    assert w.session.tab == COMPARE_TAB
    w.presenter.leave()
    setup(w, dirs, drafters=("drafter", "drafter2"), max_tokens=6)
    assert run_job(qtbot, w, w.start_compare)["ok"]
    table = w.results.compare.table
    table.setFocus()
    focus = w.session.view().focus
    qtbot.keyClick(table, Qt.Key_Tab)
    assert w.session.view().focus == focus and not table.hasFocus()


# --------------------------------------------------------------------------- a newcomer
def test_a_missing_xcb_library_is_named_with_its_apt_line(monkeypatch):
    """Without libxcb-icccm4 Qt aborts saying "xcb-cursor0 needed": every library the xcb plugin
    links is checked before Qt starts, and the one sentence names the apt line."""
    import ctypes.util

    from dspark_studio import startup

    monkeypatch.setattr(startup.sys, "platform", "linux")
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(
        ctypes.util, "find_library", lambda name: None if name in ("xcb-icccm", "xcb-keysyms") else name
    )
    said = startup.missing_system_library()
    assert said is not None and said.count("\n") == 0
    assert "sudo apt-get install libxcb-icccm4 libxcb-keysyms1" in said
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: name)
    assert startup.missing_system_library() is None


def test_the_first_start_hint_leaves_the_status_bar_to_its_messages(qtbot, window):
    from dspark_studio.startup import FIRST_START

    w = window
    w.show_hint(FIRST_START)
    assert w.controls.hint.isVisible() and w.controls.hint.text() == FIRST_START
    assert all(FIRST_START not in label.text() for label in w.statusBar().findChildren(type(w.keys_hint)))


def test_a_first_start_says_so_above_the_choices(qtbot, dirs, tmp_path, monkeypatch):
    """The window a first start opens (no settings yet) says what is open above the choices; the
    status bar holds no permanent widget of it."""
    from dspark_studio.startup import FIRST_START, build_parser, open_window

    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(tmp_path / "home"))
    args = build_parser().parse_args(["--drafter", str(dirs["drafter"])])
    monkeypatch.setattr("dspark_studio.startup.choose_models", lambda _a, _p: (str(dirs["target"]), []))
    _app, w, _target = open_window(args, True)
    qtbot.addWidget(w)
    assert not w.controls.hint.isHidden() and w.controls.hint.text() == FIRST_START
    assert all(FIRST_START not in label.text() for label in w.statusBar().findChildren(type(w.keys_hint)))
    w.close()


def test_a_stopped_run_says_so_in_the_header(qtbot, window):
    w = window
    s = w.session
    job = s.new_job("run", "/t", ["p"], [Arm("d1", "/d1"), Arm(PLAIN_LABEL, None)], config={})
    play(s, job)
    stopped = dataclasses.replace(s.runs[0].summary, finish_reason="cancelled")
    s.apply(RunDone(1, stopped))
    s.apply(JobDone(job.id, True, True))
    w.refresh()
    assert w.results.header.headline.text() == "d1 vs plain decoding · stopped: d1 kept 12 tokens"


def test_after_compare_on_every_prompt_the_prompt_box_shows_the_prompt_on_the_run_tab(qtbot, window):
    w = window
    c = w.session.choices
    c.add_set("two", ["first prompt", "second prompt"])
    c.choose_set("two")
    c.set_all_prompts(True)
    assert c.counter() == "1 / 2"
    job = w.session.new_job("compare", "/t", c.compare_prompts(), [Arm("d1", "/d1"), Arm(PLAIN_LABEL, None)], config={})
    for i, prompt in enumerate(c.compare_prompts()):
        w.session.apply(
            RunStarted(
                job=job.id,
                key=10 + i,
                label="d1",
                method="speculative",
                drafter="/d1",
                prompt=prompt,
                prompt_index=i,
                config={},
            )
        )
        w.refresh()
        assert c.counter() == f"{i + 1} / 2" and w.controls.counter.text() == f"{i + 1} / 2"
    w.session.apply(JobDone(job.id, True, False))
    w.refresh()
    assert "prompt 2 of 2" in w.results.header.headline.text()
    c.set_prompt("my own words")
    job = w.session.new_job("compare", "/t", ["first prompt", "second prompt"], [Arm("d1", "/d1")], config={})
    w.session.apply(
        RunStarted(
            job=job.id,
            key=20,
            label="d1",
            method="speculative",
            drafter="/d1",
            prompt="first prompt",
            prompt_index=0,
            config={},
        )
    )
    assert c.prompt == "my own words"  # a typed prompt stays where it was typed


def test_an_old_diagnosis_beside_runs_of_other_prompts_says_so(qtbot, window):
    w = window
    s = w.session
    found = Diagnosis(findings=(), per_position_acceptance=(0.8,), expected_per_position=None, tau=3.79, rounds=40)
    s.diagnoses = [Entry(label="d1", drafter="/d1", target="/t", what="1 prompt", diagnosis=found, prompts=("q",))]
    job = s.new_job("run", "/t", ["p"], [Arm("d1", "/d1"), Arm(PLAIN_LABEL, None)], config={})
    play(s, job)
    w.refresh()
    pane = w.results.diagnosis
    assert pane.isVisible() and OTHER_PROMPTS in pane.title.text()
    s.diagnoses = [dataclasses.replace(s.diagnoses[0], prompts=("p",))]
    s.version += 1
    w.refresh()
    assert OTHER_PROMPTS not in pane.title.text()


def test_compare_on_every_prompt_and_the_drafter_ticks_come_back_after_a_restart(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(tmp_path / "home"))
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    w = MainWindow(prefs=settings.Settings())
    qtbot.addWidget(w)
    w.restore("/t", [str(a), str(b)], load=False)
    w.controls.drafters.item(1).setCheckState(Qt.Unchecked)
    w.actions.all_prompts.setChecked(True)
    w.close()
    w2 = MainWindow(prefs=settings.Settings())
    qtbot.addWidget(w2)
    w2.restore("/t", [str(a), str(b)], load=False)
    assert [d.checked for d in w2.session.choices.drafters] == [True, False]
    assert w2.session.choices.all_prompts and w2.actions.all_prompts.isChecked()
    assert w2.controls.drafters.item(1).checkState() == Qt.Unchecked
    w2.close()


# --------------------------------------------------------------------------- cosmetic
def test_the_benchmark_s_status_line_and_caption_read_as_words(qtbot, window):
    line = describe_bench(
        {
            "_path": "b/summary.json",
            "environment": {"cpu": "x86", "mlx": "0.30", "device": "cpu", "load_average": [0.5, 0.61, 0.7]},
        }
    )
    assert "[" not in line and line.endswith("load average at start 0.50, 0.61, 0.70 (1, 5, 15 min)")
    doc = {
        "_path": "/r/bench1/summary.json",
        "prompts": {"count": 2},
        "settings": {"repeats": 1, "max_tokens": 8},
        "arms": [{"arm": "plain", "tokens_per_sec": 10.0, "trials": 2}],
        "environment": {},
        "started": "2026-12-05T08:00:00",
    }
    s = Session()
    assert s.show_bench(doc)
    assert "2 prompts × 1 repeat ·" in s.caption


def test_memory_is_in_mib_and_the_rate_plot_starts_at_zero_seconds(qtbot, window):
    w = window
    s = w.session
    job = s.new_job("run", "/t", ["p"], [Arm("d1", "/d1"), Arm(PLAIN_LABEL, None)], config={})
    play(s, job)
    s.runs[0].summary = dataclasses.replace(s.runs[0].summary, peak_memory_bytes=3 * 2**20)
    s.version += 1
    w.refresh()
    assert w.results.header.values["mem"].text() == "3 MiB"
    assert w.results.plots.tps.viewRange()[0][0] == 0.0  # decoding's start, not -3 s


def test_the_busy_note_takes_two_lines_at_most_in_presentation_mode(qtbot):
    header = shown_pane(qtbot, HeaderStrip(), (1900, 200))
    header.setStyleSheet(stylesheet(scaled(PRESENTATION, 1920, 1080)))
    note = "a 5.0 s pause of the machine in plain decoding, left out; machine busy: 3.2 load on 2 cores: figures vary"
    header._say_busy(note)
    assert header.busy.height() < 3 * header.busy.fontMetrics().lineSpacing()


def test_a_selected_drafter_keeps_its_swatch_in_presentation_mode(qtbot, window, dirs):
    """A selected row's colour swatch vanished into the accent it was selected in (presentation's
    first drafter is a blue like it): the swatch stands out of the selected row's background."""
    w = window
    setup(w, dirs, drafters=("drafter", "drafter2"), max_tokens=6)
    assert run_job(qtbot, w, w.start_compare)["ok"]
    w.presenter.fullscreen = False
    w.presenter.enter()
    qtbot.wait(50)
    table = w.results.compare.table
    row = next(i for i in range(table.rowCount()) if table.item(i, 0).isSelected())
    item = table.item(row, 0)
    swatch = QColor(item.data(Qt.DecorationRole))
    assert swatch.name() in PRESENTATION.series
    box = table.visualItemRect(item)
    image = table.viewport().grab().toImage()
    background = image.pixelColor(box.right() - 3, box.center().y())
    distance = sum(abs(a - b) for a, b in zip(swatch.getRgb()[:3], background.getRgb()[:3]))
    assert distance > 150, (swatch.name(), background.name())


def test_the_prompt_set_has_a_row_of_its_own(qtbot, window):
    w = window
    w.resize(1280, 800)
    qtbot.wait(50)
    box, prompt = w.controls.prompt_set, w.controls.prompt
    assert box.width() >= prompt.width() - 2  # not squeezed beside ◀ k / N ▶
    assert box.toolTip().startswith(box.currentText() + ":")  # an elided name is whole in its tooltip


def test_a_diagnosis_beside_the_plots_leaves_their_titles_and_axes_whole_at_1280x800(qtbot, window):
    w = window
    w.resize(1280, 800)
    s = w.session
    job = s.new_job("run", "/t", ["p"], [Arm("d1", "/d1"), Arm(PLAIN_LABEL, None)], config={})
    play(s, job)
    found = Diagnosis(findings=(), per_position_acceptance=(0.8,), expected_per_position=None, tau=3.79, rounds=40)
    s.diagnoses = [Entry(label="d1", drafter="/d1", target="/t", what="1 prompt", diagnosis=found, prompts=("p",))]
    s.version += 1
    w.refresh()
    plots, pane = w.results.plots, w.results.diagnosis
    qtbot.waitUntil(lambda: pane.isVisible() and pane.width() > 0, timeout=5_000)
    qtbot.wait(100)
    assert pane.width() <= 0.4 * (pane.width() + plots.width())
    title = plots.hist.getPlotItem().titleLabel.text
    assert title.count("<br>") <= 1 and "τ\u00a0=\u00a0" in title  # "(τ = 3.00)" never split over lines
    axis = plots.hist.getAxis("bottom")
    assert axis.label.boundingRect().width() <= axis.width()  # "accepted drafts", whole


def test_presenting_at_1920x1080_the_plots_are_as_tall_as_the_rows_above(qtbot, window):
    w = window
    w.resize(1920, 1080)
    w.presenter.fullscreen = False
    w.presenter.enter()
    qtbot.wait(100)
    above, below = w.results.run_split.sizes()
    assert below >= 0.9 * above  # they took 300 of 730 before
    w.presenter.leave()
    above, below = w.results.run_split.sizes()
    assert below < 0.8 * above  # and give the height back


def test_the_compare_tab_s_axis_labels_are_whole_at_1280x800(qtbot, window):
    w = window
    w.resize(1280, 800)
    w.session.apply(CostsMeasured("/d/a", _costs()))  # the third plot: each as narrow as they get
    _compare(w.session, ["a", "b"])
    w.session.show_tab(COMPARE_TAB)
    w.refresh()
    qtbot.wait(100)
    plots = [p for p in w.results.compare.plots().values() if p.isVisible()]
    assert len(plots) == 3
    for plot in plots:
        axis = plot.getAxis("bottom")
        assert axis.label.boundingRect().width() <= axis.width(), axis.labelText


def test_presenting_the_compare_table_s_headers_stand_apart(qtbot, window):
    """At presentation type the headers sized to their text ran together ("τAcceptancetok/s")."""
    w = window
    _compare(w.session, ["a", "b"])
    w.presenter.fullscreen = False
    w.presenter.enter()
    w.show_tab(COMPARE_TAB)
    qtbot.wait(50)
    table = w.results.compare.table
    header = table.horizontalHeader()
    fm = header.fontMetrics()
    for i in range(table.columnCount()):
        if header.sectionResizeMode(i) == header.ResizeMode.Stretch:
            continue
        spare = header.sectionSize(i) - fm.horizontalAdvance(table.horizontalHeaderItem(i).text())
        assert spare >= 2 * w.theme.font_pt, (table.horizontalHeaderItem(i).text(), spare)  # a space each side
