"""Replaying saved runs and exporting what a tab shows: the steps between a file and the session,
for the window's File menu (the window asks for the file names; the formats are ``app.replay``
and ``app.export``). Each function changes only the session and the playlist it is given, and
says what went wrong in the session's message bar."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QWidget

from dspark.errors import DsparkError

from . import export, inspector, replay
from .playlist import Playlist
from .session import COMPARE_TAB, RUN_TAB, Session


def open_playlist(session: Session, playlist: Playlist, paths: list[str]) -> bool:
    """Read saved runs or comparisons into the playlist (several make one: Space / → plays
    the next). A file that is not one leaves everything as it was, said in one sentence."""
    if session.busy:
        session.fail("a run is in progress: stop it before opening a saved one")
        return False
    try:
        recordings = [replay.read_recording(p) for p in paths]
    except DsparkError as e:
        session.fail(str(e))
        return False
    playlist.recordings, playlist.index = recordings, -1
    return True


def replay_job(session: Session, playlist: Playlist, index: int):
    """The playlist's recording ``index`` as a job of the session and the messages that play it
    (``replay.schedule``); None while a job runs."""
    if not playlist or session.busy:
        return None
    rec = playlist.at(index)
    job = session.new_job(rec.kind, rec.target or "", rec.prompts, rec.specs(), config=rec.runs[0].config,
                          replay=playlist.badge(), caption=playlist.caption())
    if job is None:
        return None
    session.clear_message()
    session.show_tab(COMPARE_TAB if rec.kind == "compare" else RUN_TAB)
    return rec, replay.schedule(rec, job.id)


def export_name(session: Session, fmt: str, comparison: bool) -> str | None:
    """The file name an export of a tab starts with (time, drafter, prompt); None, said in
    one sentence, when the tab has nothing to export yet."""
    runs, _prompts = _exported(session, comparison)
    if not runs:
        session.fail("nothing to export yet: " + ("compare first" if comparison else "run first"))
        return None
    return export.default_name(runs, comparison, fmt)


def export_runs(session: Session, fmt: str, comparison: bool, path: str) -> Path | None:
    """What a tab shows, as JSON or CSV: the Run tab's run and its plain decoding, or the
    Compare tab's comparison (every run, and its table rows)."""
    runs, prompts = _exported(session, comparison)
    try:
        if fmt == "json":
            return export.write_json(path, runs, session.loaded_target, comparison=comparison, prompts=prompts,
                                     environment=session.environment)
        return export.write_csv(path, runs, comparison, prompts)
    except OSError as e:
        session.fail(f"could not write {path}: {e.strerror or e}")
        return None


def _exported(session: Session, comparison: bool) -> tuple[list, int]:
    if comparison:
        return list(session.comparison), session.compare_prompts
    return [r for r in session.shown_runs() if r is not None], 1


def export_rejections(session: Session, folder: str) -> list[Path]:
    """The Rejections tab's two views as CSV into ``folder`` (``export.write_rejections``): the
    last job's run, or every drafter of its comparison, as the tab draws them."""
    view = session.view()
    groups = inspector.drafter_runs(view.runs, view.kind, view.spec)
    if not groups:
        session.fail("nothing to export yet: run first (the Rejections tab describes the last run or comparison)")
        return []
    try:
        return export.write_rejections(folder, inspector.context_view(groups)[1], inspector.wrong_view(groups)[1])
    except OSError as e:
        session.fail(f"could not write into {folder}: {e.strerror or e}")
        return []


def save_pngs(folder: str, widgets: dict[str, QWidget]) -> tuple[list[Path], list[str]]:
    """Each widget on screen grabbed to ``folder/<name>.png`` as it is drawn: (written, skipped).
    A plot with nothing measured yet (empty axes) and one on a tab not on screen (grabbed at a
    size it was never laid out at, its titles cut) are skipped, and named in ``skipped``."""
    shown = {name: w for name, w in widgets.items() if w.isVisible() and not w.property("empty")}
    return export.write_pngs(folder, shown), [name for name in widgets if name not in shown]
