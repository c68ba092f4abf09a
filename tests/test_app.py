"""The desktop app, headless (offscreen Qt), on tiny random models in temp dirs."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from test_app_support import make_tiny_dirs, shown_window

from dspark_studio.state.runs import PLAIN_LABEL
from dspark_studio.window.main_window import MainWindow

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "the a of and to in"
# ms: generous waits for a contended 2-core machine (an auto comparison measures costs first:
# 30 s was overrun at load 9)
LONG = 90_000


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return make_tiny_dirs(tmp_path_factory.mktemp("models"))


@pytest.fixture
def window(qtbot, dirs, tmp_path, monkeypatch):
    w = shown_window(qtbot, monkeypatch, tmp_path / "home", (1400, 900))
    yield w
    w.close()
    assert not w.engine.thread.isRunning()


def setup(w, dirs, drafters=("drafter",), max_tokens=12, prompt=PROMPT):
    w.restore(str(dirs["target"]), [str(dirs[d]) for d in drafters])
    w.controls.prompt.setPlainText(prompt)
    w.controls.form.widget("max_tokens").setValue(max_tokens)
    # every draft verified, so the panes' counts below are the rounds' (auto, the default, leaves
    # some positions to plain steps: test_app_truth and test_opens_with_auto_selected)
    w.controls.form.widget("policy").setCurrentText("fixed")


def test_opens_with_auto_selected(window):
    """A newcomer's first run on a busy machine or without a fast BLAS decodes plainly rather than
    slower than plain decoding: the app starts on auto, fixed one choice away."""
    policy = window.controls.form.widget("policy")
    assert policy.currentText() == "auto"
    assert "fixed" in [policy.itemText(i) for i in range(policy.count())]


def run_job(qtbot, w, start):
    with qtbot.waitSignal(w.job_finished, timeout=LONG) as sig:
        start()
    w.refresh()
    return sig.args[0]


def test_run_fills_every_pane(qtbot, window, dirs, tmp_path):
    w = window
    setup(w, dirs)
    info = run_job(qtbot, w, w.start_run)
    assert info["ok"] and not info["cancelled"]
    speculative, plain = w.session.shown_runs()
    assert speculative.method == "speculative" and plain.method == "plain"
    assert speculative.done and plain.done and len(speculative.summary.tokens) == 12
    # text view: the prompt plus every committed token, with a tooltip per token
    assert w.results.text.text.count == len(speculative.tokens())
    assert PROMPT in w.results.text.text.toPlainText()
    # draft grid: one row per round
    assert len(w.results.drafts.grid.rounds) == speculative.summary.rounds > 0
    bar = w.results.drafts.scroll.verticalScrollBar()
    assert bar.value() == bar.maximum()  # the newest round stays in view
    # plots: bars per draft position, histogram, both curves
    assert len(w.results.plots.pos_bars.opts["height"]) == speculative.block_size() == 4
    assert sum(w.results.plots.hist_bars.opts["height"]) == speculative.summary.rounds
    # tokens/sec over a moving window, from the round that reached 8 tokens on
    curve = speculative.curve()[1]
    assert list(w.results.plots.speculative_curve.getData()[1]) == curve
    assert 0 < len(curve) <= speculative.summary.rounds
    assert len(w.results.plots.plain_curve.getData()[0]) == 12 - 8 + 1
    # header strip
    for key in ("speculative", "plain", "speedup", "tau", "ttft", "mem"):
        assert w.results.header.values[key].text() not in ("", "–"), key
    assert w.results.header.values["same"].text() == "✓"  # greedy speculative == plain decoding
    # exports
    j = w.export_data("json", False, str(tmp_path / "run.json"))
    doc = json.loads(j.read_text())
    assert [r["method"] for r in doc["runs"]] == ["speculative", "plain"]
    assert doc["runs"][0]["events"][0]["kind"] == "round" and doc["runs"][0]["summary"]["tau"] >= 1
    rows = list(csv.DictReader(w.export_data("csv", False, str(tmp_path / "run.csv")).open()))
    assert [r["method"] for r in rows] == ["speculative", "plain"]
    pngs = w.export_pngs(str(tmp_path / "png"))
    assert {p.stem for p in pngs} >= {"acceptance_by_position", "accepted_length", "tokens_per_sec", "draft_rows"}
    assert all(not QImage(str(p)).isNull() for p in pngs)
    # the run history keeps the finished job
    assert list((tmp_path / "home" / "data" / "runs").glob("*-run.json"))


def test_stop_ends_within_one_round(qtbot, window, dirs):
    w = window
    setup(w, dirs, max_tokens=3000)
    with qtbot.waitSignal(w.job_finished, timeout=LONG * 2) as sig:
        w.start_run()
        qtbot.waitUntil(lambda: bool(w.session.runs) and len(w.session.runs[0].rounds) >= 3, timeout=LONG)
        seen = len(w.session.runs[0].rounds)
        w.stop()
    assert sig.args[0]["cancelled"]
    speculative = w.session.runs[0]
    assert speculative.summary.finish_reason == "cancelled"
    assert len(speculative.rounds) <= seen + 2  # the round in flight (+ one already queued to the GUI)
    assert len(speculative.summary.tokens) == len(speculative.tokens()) > 0  # kept what it produced
    assert [r.method for r in w.session.runs] == ["speculative"]  # the baseline was skipped
    assert w.actions.run_b.isEnabled()


def test_bad_drafter_shows_error_then_good_run_works(qtbot, window, dirs):
    w = window
    setup(w, dirs, drafters=("other_drafter",))
    info = run_job(qtbot, w, w.start_run)
    assert not info["ok"]
    assert w.results.message.isVisible() and "different target" in w.results.message.text()
    # broken directory: also a message, not a crash
    w.add_drafter(str(dirs["broken"]), select=True)
    info = run_job(qtbot, w, w.start_run)
    assert not info["ok"] and "not valid JSON" in w.results.message.text()
    # a good drafter now works on the same window and worker
    w.add_drafter(str(dirs["drafter"]), select=True)
    info = run_job(qtbot, w, lambda: qtbot.mouseClick(w.actions.run_b, Qt.LeftButton))
    assert info["ok"] and not w.results.message.isVisible()
    assert [r.method for r in w.session.runs] == ["speculative", "plain"] and all(r.done for r in w.session.runs)


def test_compare_one_row_per_drafter_plus_baseline(qtbot, window, dirs, tmp_path):
    w = window
    setup(w, dirs, drafters=("drafter", "drafter2"), max_tokens=8)
    info = run_job(qtbot, w, w.start_compare)
    assert info["ok"]
    rows = w.results.compare.rows
    assert [r["label"] for r in rows] == ["drafter", "drafter2", PLAIN_LABEL]
    assert w.results.compare.table.rowCount() == 3
    assert all(r["identical"] == "✓" for r in rows[:2])  # greedy: same tokens as plain decoding
    assert w.results.compare.table.item(0, 7).text() == "✓"
    assert rows[0]["speedup"] > 0 and len(rows[1]["per_position_acceptance"]) == 3
    doc = json.loads(w.export_data("json", True, str(tmp_path / "c.json")).read_text())
    assert len(doc["comparison"]) == 3 and len(doc["runs"]) == 3
    assert len(list(csv.DictReader((w.export_data("csv", True, str(tmp_path / "c.csv"))).open()))) == 3


def _env(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", DSPARK_STUDIO_HOME=str(tmp_path / "home"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def test_screenshot_writes_window_png(dirs, tmp_path):
    out = tmp_path / "shot.png"
    cmd = [
        sys.executable,
        "-m",
        "dspark_studio",
        "--screenshot",
        str(out),
        "--target",
        str(dirs["target"]),
        "--drafter",
        str(dirs["drafter"]),
        "--prompt",
        PROMPT,
        "--max-tokens",
        "8",
    ]
    r = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    img = QImage(str(out))
    assert (img.width(), img.height()) == (1600, 1000)


def test_a_home_that_cannot_be_created_still_runs_and_says_the_run_was_not_kept(
    qtbot, window, dirs, monkeypatch, tmp_path
):
    """The history under a folder that cannot exist (below a regular file, on every platform):
    the run still happens and shows, and the status bar says it was not kept."""
    w = window
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(tmp_path / "a-file" / "home"))
    setup(w, dirs, max_tokens=6)
    assert run_job(qtbot, w, w.start_run)["ok"]
    speculative, plain = w.session.shown_runs()
    assert speculative.done and plain.done
    assert "not kept in the history" in w.statusBar().currentMessage()


QUIT_DURING_RUN = r"""
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from dspark_studio.window.main_window import MainWindow
app = QApplication(sys.argv[:1])
w = MainWindow(prefs=None)
w.restore(sys.argv[1], [sys.argv[2]])
w.controls.prompt.setPlainText("the a of and")
w.controls.form.widget("max_tokens").setValue(3000)
w.show()
def check():
    if w.session.runs and len(w.session.runs[0].rounds) >= 2:
        print("closing with", len(w.session.runs[0].rounds), "rounds", flush=True)
        w.close()
    else:
        QTimer.singleShot(50, check)
QTimer.singleShot(0, w.start_run)
QTimer.singleShot(50, check)
sys.exit(app.exec())
"""


def test_closing_during_a_run_exits_cleanly(dirs, tmp_path):
    cmd = [sys.executable, "-c", QUIT_DURING_RUN, str(dirs["target"]), str(dirs["drafter"])]
    r = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "closing with" in r.stdout
    assert "terminate called" not in r.stderr and "Traceback" not in r.stderr


def test_a_bad_settings_file_falls_back_to_defaults_and_says_so(qtbot, dirs, tmp_path, monkeypatch):
    from dspark import GenerationConfig
    from dspark_studio.files import settings

    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.ini").write_text(
        "[config]\nmax_tokens=abc\ntemperature=nan\n[window]\ngeometry=not a geometry\n[recent]\ndrafters=7\n"
    )
    monkeypatch.setenv("DSPARK_STUDIO_HOME", str(home))
    w = MainWindow(settings.Settings())
    qtbot.addWidget(w)
    w.restore(str(dirs["target"]), [str(dirs["drafter"])])
    said = w.statusBar().currentMessage()
    assert "unreadable values for" in said and "max_tokens" in said and "temperature" in said, said
    assert w.controls.form.widget("max_tokens").value() == GenerationConfig(policy="fixed").max_tokens
    w.controls.form.widget("max_tokens").setValue(6)
    assert run_job(qtbot, w, w.start_run)["ok"]
    w.close()


def test_a_history_folder_that_is_a_file_is_reported_and_the_run_still_ends(qtbot, window, dirs, tmp_path):
    w = window
    data = tmp_path / "home" / "data"
    data.mkdir(parents=True, exist_ok=True)
    (data / "runs").write_text("a file where the history folder should be")
    setup(w, dirs, max_tokens=6)
    assert run_job(qtbot, w, w.start_run)["ok"]
    assert "was not kept in the history" in w.statusBar().currentMessage()
    assert (data / "runs").read_text() == "a file where the history folder should be"  # nothing overwritten


def test_a_drafter_whose_tap_is_beyond_the_target_is_one_sentence(qtbot, window, dirs, tmp_path):
    bad = tmp_path / "deep_tap"
    bad.mkdir()
    for f in dirs["drafter"].iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((bad / "config.json").read_text())
    cfg["cfg"]["tap_layers"] = [0, 40, 2]
    (bad / "config.json").write_text(json.dumps(cfg))
    w = window
    setup(w, dirs, drafters=())
    w.add_drafter(str(bad), select=True)
    info = run_job(qtbot, w, w.start_run)
    text = w.results.message.text()
    assert (
        not info["ok"] and "tap layers [0, 40, 2] must be" in text and "Error" not in text and "unexpected" not in text
    ), text
