"""Issue #42's last two items, headless (pytest-qt, offscreen): a large saved run is read off the
GUI thread while the window keeps drawing, and the plots' titles and axis labels stay whole when
a diagnosis narrows them."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QTimer
from test_app import LONG
from test_app_support import shown_window

import dspark.reading
from dspark_studio.state.messages import RoundDone

SAVED = Path(__file__).parent / "saved" / "run-0.1.0.json"
#: The longest the GUI thread's event loop may stand still, as a share of the time from Open to
#: the first token replayed (the file parsed on the GUI thread: all of it).
MAX_GAP_SHARE = 0.4


def grown_comparison(path: Path, megabytes: float = 10.2) -> Path:
    """A real recorded run (``tests/saved``, written by the app) grown into a comparison of
    ``megabytes`` over as many prompts (the issue's 10 MB file): its two runs, once per prompt."""
    doc = json.loads(SAVED.read_text())
    prompts = max(1, round(megabytes * 2**20 / len(json.dumps(doc["runs"]))))
    doc["runs"] = [
        {**r, "prompt": f"{r['prompt']} ({i + 1})", "prompt_index": i} for i in range(prompts) for r in doc["runs"]
    ]
    path.write_text(json.dumps({**doc, "kind": "compare", "prompts": prompts}))
    return path


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    return grown_comparison(tmp_path_factory.mktemp("big") / "big.json")


@pytest.fixture
def fresh(qtbot, tmp_path, monkeypatch):
    w = shown_window(qtbot, monkeypatch, tmp_path / "home")
    yield w
    w.close()


class Ticks:
    """The GUI event loop's pulse: a 10 ms timer noting the time between its firings."""

    def __init__(self):
        self.gaps: list[float] = []
        self.last = time.perf_counter()
        self.timer = QTimer()
        self.timer.setInterval(10)
        self.timer.timeout.connect(self._tick)
        self.timer.start()

    def _tick(self) -> None:
        now = time.perf_counter()
        self.gaps.append(now - self.last)
        self.last = now

    def stop(self) -> float:
        self.timer.stop()
        self._tick()  # the stretch up to now counts too
        return max(self.gaps)


def test_a_10_mb_run_is_read_off_the_gui_thread_and_the_window_keeps_drawing(qtbot, fresh, big, monkeypatch):
    """An instant replay of a 10 MB file left the window black for seconds (1.3 s measured for
    4.3 MB): the file was read and parsed on the GUI thread. Now it is parsed on a thread of its
    own, the status bar says so with the file's size, and the event loop keeps turning from Open
    to the first token replayed."""
    w = fresh
    parsed_on, real_parse = [], dspark.reading.parse_json

    def parse(*args, **kw):
        parsed_on.append(threading.get_ident())
        return real_parse(*args, **kw)

    monkeypatch.setattr(dspark.reading, "parse_json", parse)
    first_token, measured, deliver = [], [], w.player.deliver

    def delivered(msg):
        deliver(msg)
        if isinstance(msg, RoundDone) and not first_token:
            first_token.append(time.perf_counter())
            measured.append(ticks.stop())
            w.stop()  # measured: the rest of the replay is another matter

    w.player.deliver = delivered
    qtbot.wait(100)
    ticks = Ticks()
    qtbot.wait(50)
    opened = time.perf_counter()
    with qtbot.waitSignal(w.job_finished, timeout=LONG):
        assert w.open_replay([str(big)], "instant")
        said = w.statusBar().currentMessage()
    gap, turns = measured[0], len(ticks.gaps)
    took = first_token[0] - opened
    print(f"10 MB: open to first token {took:.2f} s, {turns} turns of the loop, the longest gap {gap * 1000:.0f} ms")
    assert said == f"reading big.json ({big.stat().st_size / 2**20:.1f} MiB)…", said
    assert parsed_on and threading.get_ident() not in parsed_on  # every parse off the GUI thread
    # The loop keeps turning (the file on the GUI thread: one gap as long as the whole read). Not
    # 100 ms: dspark.reading's whole-file scans and the garbage collector each hold the GIL for
    # up to ~0.4 s on this shared 2-core machine, whatever thread runs them.
    assert gap < MAX_GAP_SHARE * took and turns >= 10, (gap, took, turns)


def _readers_done() -> bool:
    return not any(t.name == "reading runs" for t in threading.enumerate())


def test_a_later_open_wins_over_a_file_still_being_read(qtbot, fresh, big, tmp_path):
    w = fresh
    small = tmp_path / "small.json"
    small.write_text(SAVED.read_text())
    jobs = []
    w.job_finished.connect(jobs.append)
    assert w.open_replay([str(big)], "instant")
    assert w.open_replay([str(small)], "instant")
    assert w.statusBar().currentMessage() == f"reading small.json ({small.stat().st_size / 2**20:.1f} MiB)…"
    qtbot.waitUntil(lambda: len(jobs) == 1, timeout=LONG)
    qtbot.waitUntil(_readers_done, timeout=LONG)
    qtbot.wait(100)  # what the big file's thread might still hand over
    assert len(jobs) == 1 and not w.busy
    assert [r.name for r in w.playlist.recordings] == ["small.json"]
    assert "small.json" in w.results.header.mode.text()


def test_stop_or_closing_the_window_drops_a_file_being_read(qtbot, fresh, big):
    w = fresh
    assert w.open_replay([str(big)], "instant")
    assert w.busy and w.player.playing  # --screenshot and presentation's steps wait for it
    w.stop()
    assert not w.busy and w.statusBar().currentMessage() == "stopped reading: nothing opened"
    assert w.open_replay([str(big)], "instant")
    w.close()  # closing cancels quietly: nothing opens in the closed window, nothing is said
    said = w.statusBar().currentMessage()
    qtbot.waitUntil(_readers_done, timeout=LONG)
    qtbot.wait(100)
    assert not w.playlist and w.session.job is None and not w.busy
    assert w.statusBar().currentMessage() == said and not w.session.message
