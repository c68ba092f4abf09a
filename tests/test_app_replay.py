"""Replay: a saved run or comparison plays back on every pane with no model loaded (and its
target directory gone), with its recorded timing; bad files are one message."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QEventLoop, Qt, QTimer
from PySide6.QtGui import QImage
from test_app import LONG, dirs, run_job  # noqa: F401  (dirs: the shared fixture)
from test_app_support import shown_window

from dspark.events import CommittedToken, RoundEvent, Source, Summary, event_from_dict, event_to_dict
from dspark_studio.files import replay
from dspark_studio.window.main_window import MainWindow

HEADER = ("speculative", "plain", "speedup", "tau", "rate", "ttft", "mem", "same")


def test_events_round_trip_through_json():
    tok = CommittedToken(id=7, text="·x", source=Source.BONUS, round=3, position=2, target_prob=0.25, draft_prob=None)
    ev = RoundEvent(
        index=3,
        anchor=5,
        drafted=(7, 8),
        draft_probs=(0.5, 0.25),
        confidences=(0.9, 0.1),
        verify_width=2,
        accepted=2,
        committed=(tok,),
        draft_seconds=0.01,
        verify_seconds=0.02,
        elapsed_seconds=0.5,
        tokens_generated=9,
        tokens_per_sec=18.0,
        confidence_logits=(1.5, -0.5),
    )
    s = Summary(
        method="speculative",
        tokens=(7, 8),
        text="ab",
        prompt_tokens=(1, 2),
        rounds=1,
        accepted_lengths=(2,),
        verify_widths=(2,),
        tau=3.0,
        acceptance_rate=1.0,
        per_position_acceptance=(1.0, 1.0),
        tokens_per_sec=18.0,
        ttft_seconds=0.1,
        prefill_seconds=0.05,
        draft_seconds=0.01,
        verify_seconds=0.02,
        total_seconds=0.6,
        finish_reason="stop",
        peak_memory_bytes=123,
        accepted_histogram=(0, 0, 1),
        token_logprobs=(-0.1, -0.2),
        extra={"note": 1},
    )
    for e in (ev, s):
        back = event_from_dict(json.loads(json.dumps(event_to_dict(e))))
        assert back == e and type(back) is type(e)
    assert event_from_dict(json.loads(json.dumps(s.to_dict()))) == s  # a summary as export writes it
    with pytest.raises((KeyError, TypeError, ValueError)):
        event_from_dict({"kind": "round", "index": 1})


def _wait(w, start) -> None:
    loop = QEventLoop()
    w.job_finished.connect(loop.quit)
    QTimer.singleShot(LONG, loop.quit)
    start()
    loop.exec()
    w.job_finished.disconnect(loop.quit)
    w.refresh()


def _screen(w) -> dict:
    """What a person sees: the header, the text, the draft rows, the curves, the table."""
    speculative, _ = w.session.shown_runs()
    return {
        "header": {k: w.results.header.values[k].text() for k in HEADER},
        "headline": w.results.header.headline.text(),
        "text": w.results.text.text.toPlainText(),
        "draft_rows": [tuple(t) for t in w.results.drafts.grid.texts],
        "speculative_curve": list(w.results.plots.speculative_curve.getData()[1]) if speculative else [],
        "table": [
            [w.results.compare.table.item(r, c).text() for c in range(w.results.compare.table.columnCount())]
            for r in range(w.results.compare.table.rowCount())
        ],
    }


@pytest.fixture(scope="module")
def saved(qapp, dirs, tmp_path_factory):
    """A run and a two-prompt comparison made live on a copy of the tiny target, saved by the
    app (Export and the run history), and what the screen showed; then the copy is deleted."""
    root = tmp_path_factory.mktemp("saved")
    target = shutil.copytree(dirs["target"], root / "target")
    with mock.patch.dict(os.environ, {"DSPARK_STUDIO_HOME": str(root / "home")}):
        w = MainWindow(prefs=None)
        w.resize(1280, 800)
        w.show()
        w.restore(str(target), [str(dirs["drafter"]), str(dirs["drafter2"])])
        w.controls.prompt.setPlainText("the a of and to in")
        w.controls.form.widget("max_tokens").setValue(10)
        _wait(w, w.start_run)
        run = {"file": w.export_data("json", False, str(root / "run.json")), "screen": _screen(w)}
        w.session.choices.add_set("two", ["the a of and", "to in is it"])
        w.refresh()
        w.controls.prompt_set.setCurrentText("two")
        w.actions.all_prompts.setChecked(True)
        _wait(w, w.start_compare)
        compare = {"file": next((root / "home" / "data" / "runs").glob("*-compare.json")), "screen": _screen(w)}
        w.close()
    shutil.rmtree(target)  # a replay needs no model, nor its directory
    return {"run": run, "compare": compare, "root": root}


@pytest.fixture
def fresh(qtbot, tmp_path, monkeypatch):
    w = shown_window(qtbot, monkeypatch, tmp_path / "home")
    yield w
    w.close()


def test_a_saved_run_replays_on_every_pane_without_a_model(qtbot, fresh, saved):
    w = fresh
    info = run_job(qtbot, w, lambda: w.open_replay([str(saved["run"]["file"])], "instant"))
    assert info["ok"]
    assert _screen(w) == saved["run"]["screen"]
    assert (
        w.results.header.mode.isVisible()
        and "REPLAY instant" in w.results.header.mode.text()
        and "run.json" in w.results.header.mode.text()
    )
    assert w.session.loaded_target is None and w.engine.worker._target is None  # nothing was loaded
    assert not list((Path(os.environ["DSPARK_STUDIO_HOME"]) / "data" / "runs").glob("*.json"))  # not re-saved


def test_a_saved_comparison_replays_with_its_table(qtbot, fresh, saved):
    w = fresh
    doc = json.loads(saved["compare"]["file"].read_text())
    assert run_job(qtbot, w, lambda: w.open_replay([str(saved["compare"]["file"])], "instant"))["ok"]
    assert w.results.tabs.currentWidget() is w.results.compare
    assert w.results.compare.rows == doc["comparison"]  # recomputed from the recorded events: the same table
    assert _screen(w)["table"] == saved["compare"]["screen"]["table"]
    assert w.results.header.headline.text() == "drafter (DSpark) vs plain decoding · pooled over 2 prompts"
    assert w.engine.worker._target is None


def test_replay_keeps_the_recorded_timing(qtbot, saved):
    rec = replay.read_recording(saved["compare"]["file"])
    plan = replay.schedule(rec, job=1)
    first = rec.runs[0]
    rounds = [t for t, m in plan if type(m).__name__ == "RoundDone"][: len(first.events)]
    assert rounds == [ev.elapsed_seconds for ev in first.events]  # the first run: its own clock
    starts = [t for t, m in plan if type(m).__name__ == "RunStarted"]
    assert starts[1] == pytest.approx(first.summary.total_seconds)  # the next run starts when it ended
    total = plan[-1][0]
    delivered = []
    player = replay.Player(delivered.append)
    player.play(plan, 2.0)
    clock = __import__("time").monotonic()
    qtbot.waitUntil(lambda: not player.playing, timeout=LONG)
    assert __import__("time").monotonic() - clock >= total / 2 * 0.9  # 2×: half the recorded time, not less
    assert [m for _t, m in plan] == delivered
    delivered.clear()
    player.play(plan, 0.0)  # instant
    qtbot.waitUntil(lambda: not player.playing, timeout=LONG)
    assert len(delivered) == len(plan)


def test_an_instant_replay_lets_the_window_draw_as_it_goes(qtbot):
    """Instant replay of a long recording (here 2,000 messages of 1 ms each to deliver): each
    tick delivers at most ~BUDGET_MS of them and returns to the event loop, where the window
    repaints (all in one tick, a 10 MB comparison left it black for ~7 s); every message still
    comes, in order."""
    import time

    delivered, ticks = [], []

    def slow(msg):
        time.sleep(0.001)
        delivered.append(msg)

    player = replay.Player(slow)
    real_tick = player._tick

    def counted():
        t0 = time.perf_counter()
        real_tick()
        ticks.append(time.perf_counter() - t0)

    player.timer.timeout.disconnect()
    player.timer.timeout.connect(counted)
    plan = [(0.0, i) for i in range(2000)]
    player.play(plan, 0.0)
    qtbot.waitUntil(lambda: not player.playing, timeout=LONG)
    assert delivered == list(range(2000))
    assert len(ticks) >= 20 and max(ticks) < 0.2  # many short ticks, none holding the loop long


def test_a_file_that_is_not_a_saved_run_is_one_message(qtbot, fresh, saved, tmp_path):
    w = fresh
    assert run_job(qtbot, w, lambda: w.open_replay([str(saved["run"]["file"])], "instant"))["ok"]
    shown = _screen(w)
    doc = json.loads(saved["run"]["file"].read_text())
    doc["runs"][0]["events"][1].pop("accepted")
    cases = {"garbage.json": "{oops", "empty.json": json.dumps({"runs": []}), "broken.json": json.dumps(doc)}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
    for name, says in (
        ("garbage.json", "not valid JSON"),
        ("empty.json", "has no runs"),
        ("broken.json", "run 1 is not readable"),
        ("missing.json", "is not a file"),
    ):
        w.open_replay([str(tmp_path / name)])  # read off the GUI thread: said once read
        qtbot.waitUntil(lambda: not w.busy, timeout=LONG)
        assert says in w.results.message.text() and "\n" not in w.results.message.text(), w.results.message.text()
        assert _screen(w) == shown and not w.busy


def test_space_plays_the_next_saved_run_in_presentation_mode(qtbot, fresh, saved):
    w = fresh
    files = [str(saved["run"]["file"]), str(saved["compare"]["file"])]
    w.presenter.fullscreen = False
    w.presenter.enter()
    assert run_job(qtbot, w, lambda: w.open_replay(files, "instant"))["ok"]
    assert "1 of 2" in w.results.header.mode.text() and w.results.tabs.currentWidget() is w.results.run_split
    assert run_job(qtbot, w, lambda: qtbot.keyClick(w, Qt.Key_Space))["ok"]
    assert "2 of 2" in w.results.header.mode.text() and w.results.tabs.currentWidget() is w.results.compare
    w.presenter.leave()


def test_dspark_studio_replay_starts_straight_into_it(saved, tmp_path):
    out = tmp_path / "replay.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", DSPARK_STUDIO_HOME=str(tmp_path / "home"))
    cmd = [
        sys.executable,
        "-m",
        "dspark_studio",
        "--replay",
        str(saved["compare"]["file"]),
        "--presentation",
        "--target",
        str(saved["root"] / "target"),
        "--screenshot",
        str(out),
        "--size",
        "1280x800",
    ]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (QImage(str(out)).width(), QImage(str(out)).height()) == (1280, 800)


def test_stop_ends_a_replay_and_keeps_what_was_shown(qtbot, fresh, saved):
    w = fresh
    with qtbot.waitSignal(w.job_finished, timeout=LONG) as sig:
        assert w.open_replay([str(saved["compare"]["file"])], "1×")
        qtbot.waitUntil(lambda: w.session.busy, timeout=LONG)  # read off the GUI thread, then played
        assert w.busy and w.actions.stop_b.isEnabled() and not w.actions.run_b.isEnabled()
        w.stop()
    assert sig.args[0]["cancelled"] and not w.busy and w.actions.run_b.isEnabled()
    assert not w.player.playing


def test_a_run_saved_before_replay_existed_still_replays(qtbot, fresh, saved, tmp_path):
    """Files written before the app saved the drafted tokens' text, the verdicts and the job's
    kind: the draft rows take the text of committed tokens (else #id), the ✓ is unknown."""
    w = fresh
    doc = json.loads(saved["run"]["file"].read_text())
    for key in ("kind", "prompts"):
        doc.pop(key)
    for r in doc["runs"]:
        r.pop("drafted_text")
        r.pop("verdict")
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    assert run_job(qtbot, w, lambda: w.open_replay([str(old)], "instant"))["ok"]
    screen, then = _screen(w), saved["run"]["screen"]
    assert screen["header"] == {**then["header"], "same": "–"} and screen["text"] == then["text"]
    pieces = {t.id: t.text for r in w.session.runs for e in r.rounds for t in e.committed}
    speculative = w.session.shown_runs()[0]
    assert [list(t) for t in w.results.drafts.grid.texts] == [
        [pieces.get(d, f"#{d}") for d in e.drafted] for e in speculative.rounds
    ]
