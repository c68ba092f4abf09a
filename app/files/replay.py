"""Replaying a saved run or comparison: the JSON ``app.files.run_export`` writes (File ▸ Export, and the
automatic run history) played back on every pane with its original timing, without a model.

A speaker records at home on a fast machine and presents from any laptop. The recording is
turned back into the very messages the worker sent (``RunStarted``, ``RoundDone``, ``RunDone``,
``Checked``, ``JobDone``), each at the time it was sent, so the session and the panes cannot tell
a replay from a live run, and every figure is recomputed from the recorded events by the same
``dspark.metrics`` functions. ``read_recording``, ``read_files`` and ``schedule`` are plain
Python; ``Reader`` runs ``read_files`` off the GUI thread and ``Player`` is the Qt timer that
delivers the messages. ``reading_note``, ``take_opened`` and ``replay_job`` are File ▸ Open run's
steps on the session: the files checked, read into the playlist, one of them started as a job.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QElapsedTimer, QEvent, QObject, Qt, QTimer, Signal, Slot

from dspark.errors import DsparkError
from dspark.events import RoundEvent, Summary, event_from_dict, plain_method
from dspark.lossless import Verdict
from dspark.reading import read_json

from ..state.messages import Arm, Checked, JobDone, RoundDone, RunDone, RunStarted, Status
from ..state.playlist import Playlist
from ..state.runs import recorded_machine
from ..state.session import COMPARE_TAB, RUN_TAB, Session
from .benchmark import is_bench, read_bench
from .checking import check_document

#: A run file larger than this is not one the app wrote (a 256-token run is ~140 KB).
MAX_RECORDING_BYTES = 64 * 2**20


@dataclass(frozen=True, kw_only=True)
class SavedRun:
    label: str
    method: str
    drafter: str | None
    prompt: str
    prompt_index: int
    config: dict
    events: tuple[RoundEvent, ...]
    drafted_text: tuple[tuple[str, ...], ...]
    summary: Summary | None
    verdict: Verdict | None
    machine: dict = field(default_factory=dict)  # the load while it ran (app.state.runs.recorded_machine)
    top_text: tuple = ()  # per round, per verified draft: the target's best tokens' text (the inspector)
    drafter_kind: str | None = None  # None in a file saved before runs recorded their drafter's kind


@dataclass(frozen=True, kw_only=True)
class Recording:
    path: str
    kind: str  # "run" or "compare"
    created: str
    target: str | None
    prompts: tuple[str, ...]  # by prompt index
    runs: tuple[SavedRun, ...]

    @property
    def name(self) -> str:
        return Path(self.path).name

    def arms(self) -> tuple[Arm, ...]:
        return tuple(dict.fromkeys(Arm(r.label, r.drafter) for r in self.runs))


def read_recording(path: str | Path) -> Recording:
    """A saved run or comparison, or a DsparkError saying in one sentence why it is not one. Saved
    runs are shared, so a file is checked as a whole before anything of it is used
    (``app.files.checking``): only a regular file, bounded in size and nesting; every field of
    the right type, every number finite and in range, counts and sizes within the limits a replay
    can draw, times that only move forward."""
    return recording_of(_read_doc(path), path)


def _read_doc(path: str | Path):
    return read_json(_a_file(path), MAX_RECORDING_BYTES, "saved run")


def _a_file(path: str | Path) -> Path:
    path = Path(path)
    if path.is_dir() or not (path.exists() or path.is_symlink()):
        raise DsparkError(f"{path} is not a file" + (" (a folder)" if path.is_dir() else " (not found)"))
    return path


def recording_of(doc, path: str | Path) -> Recording:
    """``read_recording``'s document, already parsed from ``path``, checked and turned into a recording."""
    path = Path(path)
    check_document(doc, path.name)
    pieces = _pieces(doc["runs"])
    runs = [_run(d, pieces) for d in doc["runs"]]
    kind = doc.get("kind") or ("compare" if "comparison" in doc else "run")
    prompts: dict[int, str] = {}
    for r in runs:
        prompts.setdefault(r.prompt_index, r.prompt)
    count = max(int(doc.get("prompts") or 0), max(prompts) + 1)
    return Recording(
        path=str(path),
        kind="compare" if kind == "compare" else "run",
        created=str(doc.get("created", "")),
        target=doc.get("target"),
        prompts=tuple(prompts.get(i, "") for i in range(count)),
        runs=tuple(runs),
    )


def _pieces(runs: list) -> dict[int, str]:
    """Token id -> text, from every committed and drafted token in the file (for files without
    the drafted or the target's best tokens' text: a token never seen shows as #id)."""
    out = {}
    for d in runs:
        for ev in d["events"]:
            for t in ev["committed"]:
                out.setdefault(t["id"], t.get("text", ""))
        for ev, texts in zip(d["events"], d.get("drafted_text") or ()):
            for t, text in zip(ev["drafted"], texts):
                out.setdefault(t, text)
    return out


def _positions(d: dict) -> list[dict]:
    """The run's events, each with its anchor's position: a file saved before events had one
    (``RoundEvent.position``) gets it from the prompt's length and the tokens made before it."""
    events = d["events"]
    prompt = (d.get("summary") or {}).get("prompt_tokens")
    if not prompt or all("position" in e for e in events):
        return events
    return [
        e if "position" in e else {**e, "position": len(prompt) - 1 + e["tokens_generated"] - len(e["committed"])}
        for e in events
    ]


def _top_text(d: dict, events: tuple, pieces: dict[int, str]) -> tuple:
    """Per round, per verified draft, the text of the target's best tokens: as saved when its shape
    is the events' (``checking`` saw to that), else looked up from the file's other tokens."""
    saved = d.get("top_text")
    if isinstance(saved, list) and len(saved) == len(events):
        return tuple(tuple(tuple(str(x) for x in pos) for pos in t) for t in saved)
    return tuple(tuple(tuple(pieces.get(t, f"#{t}") for t, _p in row) for row in e.target_top or ()) for e in events)


def _run(d: dict, pieces: dict[int, str]) -> SavedRun:
    events = tuple(event_from_dict({**e, "kind": "round"}) for e in _positions(d))
    texts = d.get("drafted_text")
    if not isinstance(texts, list) or len(texts) != len(events):
        texts = [[pieces.get(t, f"#{t}") for t in e.drafted] for e in events]
    summary = event_from_dict({**d["summary"], "kind": "summary"}) if d.get("summary") else None
    v = d.get("verdict")
    verdict = Verdict.from_dict(v) if v else None
    return SavedRun(
        label=str(d["label"]),
        method=plain_method(d["method"]),
        drafter=d.get("drafter"),
        prompt=str(d.get("prompt", "")),
        prompt_index=int(d.get("prompt_index", 0)),
        config=dict(d.get("config") or {}),
        events=events,
        drafted_text=tuple(tuple(str(x) for x in t) for t in texts),
        summary=summary,
        verdict=verdict,
        machine=recorded_machine(d.get("machine")),
        top_text=_top_text(d, events, pieces),
        drafter_kind=d.get("drafter_kind"),
    )


def schedule(rec: Recording, job: int) -> list[tuple[float, object]]:
    """(seconds after the replay starts, message) for every message the worker sent while it
    recorded ``rec``, in order: the runs one after another, each round at its recorded time."""
    out: list[tuple[float, object]] = []
    start, key = 0.0, 0
    checks: list[tuple[int, Verdict]] = []
    for i, r in enumerate(rec.runs):
        key += 1
        out.append(
            (
                start,
                RunStarted(
                    job=job,
                    key=key,
                    label=r.label,
                    method=r.method,
                    drafter=r.drafter,
                    prompt=r.prompt,
                    prompt_index=r.prompt_index,
                    config=r.config,
                    drafter_kind=r.drafter_kind,
                ),
            )
        )
        end = start
        for ev, texts, top in zip(r.events, r.drafted_text, r.top_text or ((),) * len(r.events)):
            end = start + ev.elapsed_seconds
            out.append((end, RoundDone(key, ev, texts, top)))
        if r.summary is not None:
            end = start + max(r.summary.total_seconds, end - start)
            out.append((end, RunDone(key, r.summary, r.machine)))
        if r.verdict is not None:
            checks.append((key, r.verdict))
        last_of_prompt = i + 1 == len(rec.runs) or rec.runs[i + 1].prompt_index != r.prompt_index
        if last_of_prompt:  # the worker checks a prompt's runs once they have all ended
            out += [(end, Checked(k, v)) for k, v in checks]
            checks = []
        start = end
    cancelled = any(r.summary is None or r.summary.finish_reason == "cancelled" for r in rec.runs)
    out.append((start, JobDone(job, True, cancelled)))
    return out


class Reader(QObject):
    """Reads File ▸ Open run's files on a thread of its own (``read_files``: plain Python, no
    MLX) and hands what it found to the GUI thread by a queued signal: a 10 MB file parsed on the
    GUI thread left the window black for seconds. Only the latest request is answered (a later
    Open, a Stop, the ``closing`` window's closing drop the one before); the thread of a dropped
    request stops at its next file, and nothing of it is said."""

    _done = Signal(int, object)  # request number, Opened or the exception the thread met

    def __init__(self, closing: QObject | None = None, parent=None):
        super().__init__(parent)
        self.closing = closing
        self.latest = {"request": 0}  # plain Python: the thread reads it, even after this object is gone
        self.then: Callable[[Opened], None] | None = None
        self._done.connect(self._arrived, Qt.QueuedConnection)

    @property
    def reading(self) -> bool:
        return self.then is not None

    def read(self, paths: list[str], then: Callable[[Opened], None]) -> None:
        """``then(opened)`` on the GUI thread once ``paths`` are read, unless dropped before."""
        self.cancel()
        n, latest = self.latest["request"], self.latest
        self.then = then
        if self.closing is not None:
            self.closing.installEventFilter(self)
        threading.Thread(
            target=self._run, args=(n, list(paths), lambda: latest["request"] == n), name="reading runs", daemon=True
        ).start()

    def _run(self, n: int, paths: list[str], wanted: Callable[[], bool]) -> None:
        try:
            result = read_files(paths, wanted)
        except Exception as e:  # not the file's fault (a bug): raised again on the GUI thread, as before
            result = e
        if result is not None and wanted():
            try:
                self._done.emit(n, result)
            except RuntimeError:  # the window, and this object with it, is gone: nothing to say
                pass

    def cancel(self) -> None:
        self.latest["request"] += 1
        self.then = None
        if self.closing is not None:
            self.closing.removeEventFilter(self)

    @Slot(int, object)
    def _arrived(self, n: int, result) -> None:
        if n != self.latest["request"] or self.then is None:
            return
        then = self.then
        self.cancel()
        if isinstance(result, Exception):
            raise result
        then(result)

    def eventFilter(self, watched, event) -> bool:
        if watched is self.closing and event.type() == QEvent.Close:
            self.cancel()  # quietly: nothing opens in a closed window
        return False


class Player(QObject):
    """Delivers a schedule's messages to ``deliver`` at their times (divided by ``speed``; 0 is
    instant). Every message is delivered from a timer on the GUI thread, as the worker's are, at
    most ``BUDGET_MS`` of them a tick: an instant replay of a 10 MB comparison delivered all of
    them in one tick and left the window black for ~7 s; now it draws as it goes. Its ``reader``
    reads the files first (``Reader``); reading counts as playing, so Stop ends it too."""

    TICK_MS = 15
    BUDGET_MS = 20

    def __init__(self, deliver: Callable[[object], None], parent=None):
        super().__init__(parent)
        self.deliver = deliver
        self.pending: deque[tuple[float, object]] = deque()
        self.speed = 1.0
        self.clock = QElapsedTimer()
        self.timer = QTimer(self)
        self.timer.setInterval(self.TICK_MS)
        self.timer.timeout.connect(self._tick)
        self.reader = Reader(parent, self)

    @property
    def playing(self) -> bool:
        return bool(self.pending) or self.reader.reading

    def play(self, messages: list[tuple[float, object]], speed: float) -> None:
        self.pending, self.speed = deque(messages), speed
        self.clock.start()
        self.timer.start(0 if speed <= 0 else self.TICK_MS)

    def stop(self) -> None:
        """End now: the rest is dropped, the job ends as stopped; files being read are dropped."""
        if self.reader.reading:
            self.reader.cancel()
            self.deliver(Status("stopped reading: nothing opened"))
        rest = self.pending
        self.pending = deque()
        self.timer.stop()
        done = next((m for _t, m in reversed(rest) if isinstance(m, JobDone)), None)
        if done is not None:
            self.deliver(JobDone(done.job, True, True))

    def _tick(self) -> None:
        now = float("inf") if self.speed <= 0 else self.clock.elapsed() / 1000 * self.speed
        started = self.clock.elapsed()
        while self.pending and self.pending[0][0] <= now:
            _t, msg = self.pending.popleft()
            self.deliver(msg)
            if self.clock.elapsed() - started >= self.BUDGET_MS:
                break  # the rest next tick: the window repaints between
        if not self.pending:
            self.timer.stop()


@dataclass(frozen=True)
class Opened:
    """What File ▸ Open run found in its files (``read_files``): the recordings, or the benchmark
    summary its one file is, or the sentence why they cannot be opened."""

    recordings: tuple[Recording, ...] = ()
    bench: dict | None = None
    problem: str = ""


def read_files(paths: list[str], wanted: Callable[[], bool] = lambda: True) -> Opened | None:
    """``paths`` read and checked whole, each parsed once (plain Python: the ``Reader``'s thread
    runs it); None as soon as ``wanted()`` turns False between files."""
    recordings = []
    for p in paths:
        if not wanted():
            return None
        try:
            doc = _read_doc(p)
            if len(paths) == 1 and is_bench(doc):  # a dspark bench summary, whatever its name
                return Opened(bench=read_bench(p))
            recordings.append(recording_of(doc, p))
        except DsparkError as e:
            return Opened(problem=str(e))
    return Opened(recordings=tuple(recordings))


def reading_note(session: Session, paths: list[str]) -> str | None:
    """What the status bar says while ``paths`` are read ("reading run.json (10.2 MiB)…"); None,
    said in one sentence, when they cannot be opened now (a run is on, a path is no file: what
    is known at once; the rest is said once they are read)."""
    if session.busy:
        session.fail("a run is in progress: stop it before opening a saved one")
        return None
    try:
        files = [_a_file(p) for p in paths]
    except DsparkError as e:
        session.fail(str(e))
        return None
    size = sum(_size(f) for f in files)
    what = files[0].name if len(files) == 1 else f"{len(files)} files"
    return f"reading {what} ({size / 2**20:.1f} MiB)…"


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:  # the reader says why it cannot read it
        return 0


def take_opened(session: Session, playlist: Playlist, opened: Opened) -> bool:
    """The files read, on the GUI thread: True when their recordings are the playlist now (to be
    played); a benchmark is shown on the Compare tab; a file that is not one leaves everything
    as it was, said in one sentence."""
    if opened.problem:
        session.fail(opened.problem)
        return False
    if session.busy:  # a run started while they were read: the later request wins
        return False
    if opened.bench is not None:
        session.show_bench(opened.bench)
        return False
    playlist.recordings, playlist.index = list(opened.recordings), -1
    return True


def open_playlist(session: Session, playlist: Playlist, paths: list[str]) -> bool:
    """Read saved runs or comparisons into the playlist at once, on this thread (a script's open;
    the window reads them on the ``Reader``'s), as ``take_opened`` takes them."""
    return reading_note(session, paths) is not None and take_opened(session, playlist, read_files(paths))


def replay_job(session: Session, playlist: Playlist, index: int):
    """The playlist's recording ``index`` as a job of the session and the messages that play it
    (``schedule``); None while a job runs."""
    if not playlist or session.busy:
        return None
    rec = playlist.at(index)
    job = session.new_job(
        rec.kind,
        rec.target or "",
        rec.prompts,
        rec.arms(),
        config=rec.runs[0].config,
        replay=playlist.badge(),
        caption=playlist.caption(),
    )
    if job is None:
        return None
    session.clear_message()
    session.show_tab(COMPARE_TAB if rec.kind == "compare" else RUN_TAB)
    return rec, schedule(rec, job.id)
