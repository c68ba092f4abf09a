"""The window's benchmark actions: open a ``dspark bench`` result on the Compare tab, save the
last comparison in the benchmark's format, and ask the worker for this machine's measured
costs (the auto policy's). The format itself is ``app.bench_io``; this is the Qt side."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog

from dspark.errors import DsparkError

from . import bench_io, settings
from .messages import CostsRequest


class BenchActions:
    def __init__(self, window):
        self.w = window

    def open(self, path: str) -> bool:
        """Show a benchmark summary (file or folder) on the Compare tab; False with one
        message when it is not one or a job is running."""
        w = self.w
        if w.busy:
            w.on_failed("a run is in progress: stop it before opening a benchmark")
            return False
        try:
            doc = bench_io.read_bench(path)
        except DsparkError as e:
            w.on_failed(str(e))
            return False
        w.session.show_bench(doc)
        w.message.hide()
        w.tabs.setCurrentWidget(w.compare)
        n, r = doc["prompts"]["count"], doc["settings"]["repeats"]
        w.prompt_label.setText(f"dspark bench · {n} prompts × {r} repeats · {doc['settings']['max_tokens']} tokens · "
                               f"{Path(doc['_path']).parent.name} · {doc.get('started', '')[:16].replace('T', ' ')}")
        w.prompt_label.show()
        env = doc["environment"]
        w.statusBar().showMessage(f"benchmark {doc['_path']}: {env.get('cpu')}, MLX {env.get('mlx')} on "
                                  f"{env.get('device')}, load average at start {env.get('load_average')}")
        w.refresh()
        return True

    def save_comparison(self, folder: str | None = None) -> Path | None:
        """The last comparison as a ``dspark bench`` result folder (summary.json, trials.jsonl,
        trials.csv), so it opens where benchmarks open and reads with the same tools."""
        w = self.w
        runs = list(w.session.comparison)
        if not runs:
            w.on_failed("nothing to save yet: compare first")
            return None
        if folder is None:
            folder = QFileDialog.getExistingDirectory(w, "Save the comparison as a benchmark into (an empty folder)",
                                                      str(settings.exports_dir()))
            if not folder:
                return None
        try:
            doc, trials = bench_io.comparison_to_bench(runs, w.loaded_target, w.session.compare_prompts,
                                                       w.session.costs, w.environment)
            out = bench_io.write_bench(folder, doc, trials)
        except DsparkError as e:
            w.on_failed(str(e))
            return None
        w.statusBar().showMessage(f"saved {out}")
        return out

    def measure_costs(self, remeasure: bool = True) -> bool:
        """Measure (or read the cached) costs of every usable drafter on the chosen target;
        the Compare tab draws them when they arrive."""
        w = self.w
        target, drafters = w.controls.target_path(), tuple(w.controls.usable_drafters())
        if w.busy:
            w.on_failed("a run is in progress: measure the costs after it")
            return False
        if not target or not drafters:
            w.on_failed("choose a target and at least one drafter to measure their costs")
            return False
        w.tabs.setCurrentWidget(w.compare)
        w.request_costs.emit(CostsRequest(target, drafters, remeasure))
        return True
