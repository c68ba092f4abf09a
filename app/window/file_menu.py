"""The File menu's actions (and Run ▸ Measure costs): each asks its dialog with the window as
parent, does its step on the session (``files.replay``, ``files.benchmark``, ``files.run_export``,
``state.session.costs_request``) or hands it to the model-owner thread, and says what came of it in
the window's status bar.

Each function is given the window ``w``, as ``menus.build_menus`` and ``geometry`` are, and
keeps nothing of it; the window's methods of the same names call them. What each step changes is
the session's: the window redraws from it (``w.said()``)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from PySide6.QtWidgets import QFileDialog

from ..files import benchmark, replay, run_export, settings
from ..state.playlist import SPEEDS
from ..state.session import costs_request
from . import drafter_export as dialog
from .download import DownloadDialog


def choose_replay(w) -> None:
    paths, _ = QFileDialog.getOpenFileNames(
        w,
        "Open saved runs (several: Space / → plays the next) or a dspark bench summary.json",
        str(settings.history_dir()),
        "Saved runs and benchmarks (*.json)",
    )
    if paths:
        w.open_replay(paths)


def open_replay(w, paths: list[str], speed: str | None = None) -> bool:
    """Play saved runs or comparisons back on every pane, loading no model; several files
    make a playlist. A ``dspark bench`` summary opens on the Compare tab instead. The files are
    read off the GUI thread (``replay.Reader``; a 10 MB one held the window black for seconds):
    the status bar says so meanwhile, and the replay starts once they are read. True when it is
    under way; a later Open wins over one still being read."""
    w.player.reader.cancel()
    named = len(paths) == 1 and (Path(paths[0]).is_dir() or Path(paths[0]).name == "summary.json")
    if named and benchmark.is_bench_file(paths[0]):  # what dspark bench writes, small: opened at once
        return open_bench(w, paths[0])
    note = replay.reading_note(w.session, paths)
    if note is None:
        w.said()
        return False
    w.statusBar().showMessage(note)
    w.player.reader.read(paths, partial(_opened, w, speed))
    return True


def _opened(w, speed: str | None, opened: replay.Opened) -> None:
    if replay.take_opened(w.session, w.playlist, opened):
        w.playlist.speed = speed or w.playlist.speed
        play_recording(w, 0)
    elif opened.bench is not None and w.session.bench is opened.bench:
        w.statusBar().showMessage(benchmark.describe_bench(opened.bench))
    w.said()


def play_recording(w, index: int) -> bool:
    started = replay.replay_job(w.session, w.playlist, index)
    if started is None:
        return False
    rec, messages = started
    # its name, as the header's badge gives it: a temporary folder's path filled the bar
    w.statusBar().showMessage(f"replaying {rec.name} (no model loaded)")
    w.refresh()
    w.player.play(messages, SPEEDS[w.playlist.speed])
    return True


def export_data(w, fmt: str, comparison: bool, path: str | None = None) -> Path | None:
    """What a tab shows, as JSON or CSV (``run_export.export_runs``)."""
    name = run_export.export_name(w.session, fmt, comparison)
    if name is not None and path is None:
        path, _ = QFileDialog.getSaveFileName(w, "Export", str(settings.exports_dir() / name), f"*.{fmt}")
    out = run_export.export_runs(w.session, fmt, comparison, path) if name and path else None
    if out is not None:
        w.statusBar().showMessage(f"exported {out}")
    w.said()
    return out


def export_rejections(w, folder: str | None = None) -> list[Path]:
    """The Rejections tab's two views as CSV files into a folder (``run_export.export_rejections``)."""
    folder = folder or QFileDialog.getExistingDirectory(
        w, "Save the rejection views as CSV into", str(settings.exports_dir())
    )
    out = run_export.export_rejections(w.session, folder) if folder else []
    w.statusBar().showMessage(f"exported {', '.join(p.name for p in out)} to {folder}" if out else "")
    w.said()
    return out


def export_pngs(w, folder: str | None = None) -> list[Path]:
    if folder is None:
        folder = QFileDialog.getExistingDirectory(w, "Save plots as PNG into", str(settings.exports_dir()))
        if not folder:
            return []
    out, skipped = run_export.save_pngs(folder, w.plot_widgets())
    w.statusBar().showMessage(
        f"saved {len(out)} PNG files to {folder}"
        + (f" (not drawn, so not saved: {', '.join(skipped)})" if skipped else "")
    )
    return out


def open_bench(w, path: str) -> bool:
    ok = benchmark.open_bench(w.session, path)
    if ok:
        w.statusBar().showMessage(benchmark.describe_bench(w.session.bench))
    w.said()
    return ok


def save_comparison(w, folder: str | None = None) -> Path | None:
    if folder is None and w.session.comparison:
        folder = QFileDialog.getExistingDirectory(
            w, "Save the comparison as a benchmark into (an empty folder)", str(settings.exports_dir())
        )
        if not folder:
            return None
    out = benchmark.save_comparison(w.session, folder or "")
    if out is not None:
        w.statusBar().showMessage(f"saved {out}")
    w.said()
    return out


def measure_costs(w, remeasure: bool = True) -> bool:
    request = costs_request(w.session, remeasure)
    if request is not None:
        w.session.measuring_costs()
        w.engine.measure_costs(request)
    w.said()
    return request is not None


def export_drafter(w, request=None) -> bool:
    """File ▸ Export drafter…: the choices asked (``app.window.drafter_export``), the export run by the
    worker (``dspark.export``); what it wrote, or why not, comes back as a message."""
    request = request or dialog.ask(w, w.session.choices)
    if request is not None:
        w.engine.export_drafter(request)
        w.statusBar().showMessage(f"exporting {Path(request.drafter).name} as {request.format} …")
    return request is not None


def open_download(w):
    """File ▸ Download…: the dialog (made once; a download finishes even if it is closed)."""
    if w.download is None:
        w.download = DownloadDialog(w)
        w.download.chosen.connect(
            lambda kind, path: w.add_drafter(path, select=True) if kind == "drafter" else w.on_target_chosen(path)
        )
    w.download.show()
    return w.download


__all__ = [
    "choose_replay",
    "export_data",
    "export_drafter",
    "export_pngs",
    "export_rejections",
    "measure_costs",
    "open_bench",
    "open_download",
    "open_replay",
    "play_recording",
    "save_comparison",
]
