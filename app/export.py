"""Writing runs and comparisons to JSON and CSV (events through ``dspark.events``), plots to
PNG, and the automatic run history under the platformdirs data folder."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

from PySide6.QtWidgets import QWidget

from .runs import RunRecord, compare_rows
from dspark import __version__
from dspark.events import event_to_dict

RUN_FIELDS = ["label", "method", "prompt_index", "tokens", "rounds", "tau", "acceptance_rate",
              "tokens_per_sec", "ttft_seconds", "peak_memory_bytes", "finish_reason",
              "per_position_acceptance", "drafter", "prompt", "text"]
COMPARE_FIELDS = ["label", "runs", "finished", "tokens", "rounds", "tau", "acceptance_rate",
                  "tokens_per_sec", "speedup", "identical", "per_position_acceptance", "drafter"]


def run_dict(run: RunRecord) -> dict:
    return {
        "label": run.label,
        "method": run.method,
        "drafter": run.drafter,
        "prompt": run.prompt,
        "prompt_index": run.prompt_index,
        "config": run.config,
        "events": [event_to_dict(ev) for ev in run.rounds],
        "summary": run.summary.to_dict() if run.summary is not None else None,
    }


def document(runs: list[RunRecord], target: str | None, comparison: bool) -> dict:
    doc = {
        "app": "dspark-studio",
        "version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "target": target,
        "runs": [run_dict(r) for r in runs],
    }
    if comparison:
        doc["comparison"] = compare_rows(runs)
    return doc


def write_json(path: str | Path, runs: list[RunRecord], target: str | None, comparison: bool = False) -> Path:
    path = Path(path)
    path.write_text(json.dumps(document(runs, target, comparison), indent=1, default=str))
    return path


def _run_row(run: RunRecord) -> dict:
    s, f = run.summary, run.figures()
    return {
        "label": run.label, "method": run.method, "prompt_index": run.prompt_index,
        "tokens": f.tokens, "rounds": f.rounds, "tau": round(f.tau, 4),
        "acceptance_rate": round(f.acceptance_rate, 4),
        "tokens_per_sec": round(run.tokens_per_sec(), 3),
        "ttft_seconds": round(s.ttft_seconds, 4) if s else "",
        "peak_memory_bytes": s.peak_memory_bytes if s else "",
        "finish_reason": s.finish_reason if s else "running",
        "per_position_acceptance": " ".join(f"{x:.4f}" for x in f.per_position_acceptance),
        "drafter": run.drafter or "", "prompt": run.prompt, "text": s.text if s else "",
    }


def write_csv(path: str | Path, runs: list[RunRecord], comparison: bool = False) -> Path:
    """One row per run, or (comparison) one row per drafter plus plain decoding."""
    path = Path(path)
    if comparison:
        fields = COMPARE_FIELDS
        rows = [{**r, "per_position_acceptance": " ".join(f"{x:.4f}" for x in r["per_position_acceptance"]),
                 "drafter": r["drafter"] or ""} for r in compare_rows(runs)]
    else:
        fields, rows = RUN_FIELDS, [_run_row(r) for r in runs]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def write_pngs(folder: str | Path, widgets: dict[str, QWidget]) -> list[Path]:
    """Each widget (a plot, the draft grid, the window) grabbed to ``folder/<name>.png``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, w in widgets.items():
        p = folder / f"{name}.png"
        if w.grab().save(str(p)):
            out.append(p)
    return out


def save_history(runs: list[RunRecord], target: str | None, comparison: bool) -> str | None:
    """Keep a finished job as JSON in the run history folder. Never fails the app: returns a
    one-line problem to show instead (an unwritable or misplaced folder), or None."""
    from . import settings

    try:
        folder = settings.history_dir()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        kind = "compare" if comparison else "run"
        write_json(folder / f"{stamp}-{kind}.json", runs, target, comparison)
    except OSError as e:
        return f"the run was not kept in the history ({e.strerror or e}: {getattr(e, 'filename', '') or ''})"
    return None
