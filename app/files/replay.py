"""Replaying a saved run or comparison: the JSON ``app.files.run_export`` writes (File ▸ Export, and the
automatic run history) played back on every pane with its original timing, without a model.

A speaker records at home on a fast machine and presents from any laptop. The recording is
turned back into the very messages the worker sent (``RunStarted``, ``RoundDone``, ``RunDone``,
``Checked``, ``JobDone``), each at the time it was sent, so the session and the panes cannot tell
a replay from a live run, and every figure is recomputed from the recorded events by the same
``dspark.metrics`` functions. ``read_recording`` and ``schedule`` are plain Python; ``Player``
is the Qt timer that delivers the messages. ``open_playlist`` and ``replay_job`` are File ▸ Open
run's steps on the session: the files read into the playlist, one of them started as a job.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QElapsedTimer, QObject, QTimer

from dspark.errors import DsparkError
from dspark.events import RoundEvent, Summary, event_from_dict, plain_method
from dspark.lossless import Verdict
from dspark.reading import read_json

from ..state.messages import Arm, Checked, JobDone, RoundDone, RunDone, RunStarted
from ..state.playlist import Playlist
from ..state.runs import recorded_machine
from ..state.session import COMPARE_TAB, RUN_TAB, Session
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
    path = Path(path)
    if path.is_dir() or not (path.exists() or path.is_symlink()):
        raise DsparkError(f"{path} is not a file" + (" (a folder)" if path.is_dir() else " (not found)"))
    doc = read_json(path, MAX_RECORDING_BYTES, "saved run")
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


class Player(QObject):
    """Delivers a schedule's messages to ``deliver`` at their times (divided by ``speed``; 0 is
    instant). Every message is delivered from a timer on the GUI thread, as the worker's are, at
    most ``BUDGET_MS`` of them a tick: an instant replay of a 10 MB comparison delivered all of
    them in one tick and left the window black for ~7 s; now it draws as it goes."""

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

    @property
    def playing(self) -> bool:
        return bool(self.pending)

    def play(self, messages: list[tuple[float, object]], speed: float) -> None:
        self.pending, self.speed = deque(messages), speed
        self.clock.start()
        self.timer.start(0 if speed <= 0 else self.TICK_MS)

    def stop(self) -> None:
        """End now: the rest is dropped, the job ends as stopped."""
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


def open_playlist(session: Session, playlist: Playlist, paths: list[str]) -> bool:
    """Read saved runs or comparisons into the playlist (several make one: Space / → plays
    the next). A file that is not one leaves everything as it was, said in one sentence."""
    if session.busy:
        session.fail("a run is in progress: stop it before opening a saved one")
        return False
    try:
        recordings = [read_recording(p) for p in paths]
    except DsparkError as e:
        session.fail(str(e))
        return False
    playlist.recordings, playlist.index = recordings, -1
    return True


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
