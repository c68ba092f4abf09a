"""The window's file actions (a mixin of ``MainWindow``): replaying saved runs and comparisons,
and exporting what a tab shows as JSON, CSV or PNG. The formats themselves are ``app.replay``
and ``app.export``; a ``dspark bench`` summary is handed to ``app.benchmarks``."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QWidget

from dspark.errors import DsparkError

from . import bench_io, export, replay, settings


class FilesMixin:
    # --- replay ---------------------------------------------------------------------------
    def choose_replay(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Open saved runs (several: Space / → plays the next) or a "
                                                "dspark bench summary.json", str(settings.history_dir()),
                                                "Saved runs and benchmarks (*.json)")
        if paths:
            self.open_replay(paths)

    def open_replay(self, paths: list[str], speed: str | None = None) -> bool:
        """Play saved runs or comparisons back on every pane, loading no model; several files
        make a playlist. A ``dspark bench`` summary opens on the Compare tab instead. A file
        that is neither leaves everything as it was, with one message."""
        if len(paths) == 1 and bench_io.is_bench_file(paths[0]):
            return self.benchmarks.open(paths[0])
        if self.busy:
            self.on_failed("a run is in progress: stop it before opening a saved one")
            return False
        try:
            recordings = [replay.read_recording(p) for p in paths]
        except DsparkError as e:
            self.on_failed(str(e))
            return False
        self.playlist = recordings
        self.replay_speed = speed or self.replay_speed
        return self.play_recording(0)

    def play_recording(self, index: int) -> bool:
        if not self.playlist or self.busy:
            return False
        self.playing = index % len(self.playlist)
        rec = self.playlist[self.playing]
        n = len(self.playlist)
        label = (f"REPLAY {self.replay_speed}" + (f" · {self.playing + 1} of {n}" if n > 1 else "")
                 + f" · {rec.name}" + (f" · recorded {rec.created[:16].replace('T', ' ')}" if rec.created else ""))
        job = self.session.new_job(rec.kind, rec.target or "", rec.prompts, rec.specs(), rec.runs[0].config,
                                   replay=label)
        self.message.hide()
        first = _first_line(rec.prompts[0] if rec.prompts else "")
        self.prompt_label.setText(first if len(rec.prompts) < 2 else f"{len(rec.prompts)} prompts · {first} …")
        self.controls.set_busy(True)
        self.tabs.setCurrentWidget(self.compare if rec.kind == "compare" else self.run_split)
        self.statusBar().showMessage(f"replaying {rec.path} (no model loaded)")
        self.player.play(replay.schedule(rec, job.id), replay.SPEEDS[self.replay_speed])
        return True

    # --- export ---------------------------------------------------------------------------
    def export_data(self, fmt: str, comparison: bool, path: str | None = None) -> Path | None:
        """What a tab shows, as JSON or CSV: the Run tab's run and its plain decoding, or the
        Compare tab's comparison (every run, and its table rows)."""
        if comparison:
            runs, prompts = list(self.session.comparison), self.session.compare_prompts
        else:
            runs, prompts = [r for r in self.session.shown_runs() if r is not None], 1
        if not runs:
            self.on_failed("nothing to export yet: " + ("compare first" if comparison else "run first"))
            return None
        if path is None:
            name = export.default_name(runs, comparison, fmt)
            path, _ = QFileDialog.getSaveFileName(self, "Export", str(settings.exports_dir() / name), f"*.{fmt}")
            if not path:
                return None
        try:
            if fmt == "json":
                out = export.write_json(path, runs, self.loaded_target, comparison, prompts)
            else:
                out = export.write_csv(path, runs, comparison, prompts)
        except OSError as e:
            self.on_failed(f"could not write {path}: {e.strerror or e}")
            return None
        self.statusBar().showMessage(f"exported {out}")
        return out

    def plot_widgets(self) -> dict[str, QWidget]:
        out = {}
        for pane in self.panes:
            out.update(pane.plots())
        return {**out, "window": self}

    def export_pngs(self, folder: str | None = None) -> list[Path]:
        if folder is None:
            folder = QFileDialog.getExistingDirectory(self, "Save plots as PNG into", str(settings.exports_dir()))
            if not folder:
                return []
        out = export.write_pngs(folder, self.plot_widgets())
        self.statusBar().showMessage(f"saved {len(out)} PNG files to {folder}")
        return out


def _first_line(prompt: str) -> str:
    lines = prompt.strip().splitlines()
    return lines[0][:120] if lines else ""
