"""Writing runs and comparisons to JSON and CSV (events through ``dspark.events``), plots to
PNG, and the automatic run history under the platformdirs data folder. ``export_runs``,
``export_rejections`` and ``save_pngs`` are the File menu's steps: what a tab shows, written where
the person chose, and what went wrong said in the session's message bar."""

from __future__ import annotations

import csv
import json
import re
import time
from dataclasses import asdict
from pathlib import Path

from PySide6.QtWidgets import QWidget

from dspark import __version__
from dspark.events import event_to_dict

from ..state import inspector
from ..state.runs import Run, compare_rows
from ..state.session import Session
from . import settings

RUN_FIELDS = [
    "label",
    "method",
    "prompt_index",
    "tokens",
    "rounds",
    "tau",
    "acceptance_rate",
    "tokens_per_sec",
    "ttft_seconds",
    "peak_memory_bytes",
    "finish_reason",
    "per_position_acceptance",
    "drafter",
    "prompt",
    "text",
]
COMPARE_FIELDS = [
    "label",
    "runs",
    "finished",
    "tokens",
    "rounds",
    "tau",
    "acceptance_rate",
    "tokens_per_sec",
    "speedup",
    "identical",
    "per_position_acceptance",
    "drafter",
]


def run_dict(run: Run) -> dict:
    return {
        "label": run.label,
        "method": run.method,
        "drafter": run.drafter,
        "drafter_kind": run.drafter_kind,  # a file saved before kinds has none: it opens without
        "prompt": run.prompt,
        "prompt_index": run.prompt_index,
        "config": run.config,
        "events": [event_to_dict(ev) for ev in run.rounds],
        "drafted_text": [list(t) for t in run.drafted_text],  # the draft grid's cells, for a replay
        "top_text": [[list(pos) for pos in t] for t in run.top_text],  # the target's best tokens' text (the inspector)
        "summary": run.summary.to_dict() if run.summary is not None else None,
        "verdict": asdict(run.verdict) if run.verdict is not None else None,
        "machine": run.machine,  # the load while it ran: a replay says "machine busy" too
    }


def document(
    runs: list[Run],
    target: str | None,
    comparison: bool,
    prompts: int | None = None,
    *,
    environment: dict | None = None,
) -> dict:
    """Everything needed to read the runs back (``app.files.replay``): the events, the drafted
    tokens' text, the verdicts, and (a comparison) its table as it was shown; ``environment``:
    the machine, MLX, BLAS and the device the runs computed on (the worker's record, with the
    first-launch GPU check's answer)."""
    doc = {
        "app": "dspark-studio",
        "version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "kind": "compare" if comparison else "run",
        "prompts": prompts or len({r.prompt_index for r in runs}),
        "target": target,
        "environment": dict(environment or {}),
        "runs": [run_dict(r) for r in runs],
    }
    if comparison:
        doc["comparison"] = compare_rows(runs, doc["prompts"])
    return doc


def write_json(
    path: str | Path,
    runs: list[Run],
    target: str | None,
    *,
    comparison: bool = False,
    prompts: int | None = None,
    environment: dict | None = None,
) -> Path:
    """``runs`` on ``target`` written to ``path`` as :func:`document` makes them (a comparison
    or not, of ``prompts`` prompts, on the machine ``environment`` describes); returns the path."""
    path = Path(path)
    doc = document(runs, target, comparison, prompts, environment=environment)
    path.write_text(json.dumps(doc, indent=1, default=str))
    return path


def _slug(text: str, limit: int = 24) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:limit].strip("-").lower()


def default_name(runs: list[Run], comparison: bool, fmt: str) -> str:
    """A file name that says what is in it: time, drafter(s), prompt(s)."""
    stamp = time.strftime("%Y%m%d-%H%M")
    drafters = list(dict.fromkeys(r.label for r in runs if r.method == "speculative"))
    prompts = {r.prompt_index for r in runs}
    if comparison:
        what = f"compare-{'-'.join(_slug(d, 12) for d in drafters[:3]) or 'plain'}"
        what += f"-{len(prompts)}-prompts" if len(prompts) > 1 else f"-{_slug(runs[0].prompt)}"
    else:
        what = f"{_slug(drafters[0]) if drafters else 'plain'}-{_slug(runs[0].prompt)}"
    return f"{stamp}-{what.strip('-')}.{fmt}"


def _run_row(run: Run) -> dict:
    s, f = run.summary, run.figures()
    return {
        "label": run.label,
        "method": run.method,
        "prompt_index": run.prompt_index,
        "tokens": f.tokens,
        "rounds": f.rounds,
        "tau": round(f.tau, 4),
        "acceptance_rate": round(f.acceptance_rate, 4),
        "tokens_per_sec": round(run.tokens_per_sec(), 3),
        "ttft_seconds": round(s.ttft_seconds, 4) if s else "",
        "peak_memory_bytes": s.peak_memory_bytes if s else "",
        "finish_reason": s.finish_reason if s else "running",
        "per_position_acceptance": " ".join(f"{x:.4f}" for x in f.per_position_acceptance),
        "drafter": run.drafter or "",
        "prompt": run.prompt,
        "text": s.text if s else "",
    }


def write_csv(path: str | Path, runs: list[Run], comparison: bool = False, prompts: int | None = None) -> Path:
    """One row per run, or (comparison) one row per drafter plus plain decoding."""
    path = Path(path)
    if comparison:
        fields = COMPARE_FIELDS
        rows = [
            {
                **r,
                "per_position_acceptance": " ".join(f"{x:.4f}" for x in r["per_position_acceptance"]),
                "drafter": r["drafter"] or "",
            }
            for r in compare_rows(runs, prompts)
        ]
    else:
        fields, rows = RUN_FIELDS, [_run_row(r) for r in runs]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


CONTEXT_FIELDS = ["drafter", "from", "to", "rounds", "verified", "acceptance_rate", "first_acceptance", "tau"]
WRONG_FIELDS = ["drafter", "drafted", "drafted_text", "target", "target_text", "count", "share"]


def write_rejections(folder: str | Path, context: dict[str, list[dict]], wrong: dict[str, list[dict]]) -> list[Path]:
    """The Rejections tab's two views as ``acceptance_by_context.csv`` (one row per drafter and
    context bucket: ``dspark.metrics.by_context``; ``to`` empty for an open last bucket) and
    ``what_it_gets_wrong.csv`` (one row per drafter and pair shown: ``dspark.metrics.rejections``
    with both tokens' text), from ``app.state.inspector``'s ``context_view`` / ``wrong_view``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, fields, groups in (
        ("acceptance_by_context", CONTEXT_FIELDS, context),
        ("what_it_gets_wrong", WRONG_FIELDS, wrong),
    ):
        path = folder / f"{name}.csv"
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
            w.writeheader()
            w.writerows({**row, "drafter": label} for label, rows in groups.items() for row in rows)
        out.append(path)
    return out


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


def keep_in_history(session, prefs) -> str | None:
    """A finished job of ``session`` (an ``app.state.session.Session``) kept in the run history, within
    the limits the settings give; a one-line problem, or None."""
    runs = session.runs
    if not runs or not any(r.done for r in runs):
        return None
    keep = prefs.get("history/keep", settings.HISTORY_KEEP, int) if prefs else None
    max_mb = prefs.get("history/max_mb", settings.HISTORY_MAX_MB, int) if prefs else None
    return save_history(
        runs,
        session.loaded_target,
        comparison=session.shown_kind == "compare",
        prompts=session.prompt_count,
        keep=keep,
        max_bytes=max_mb * 2**20 if max_mb is not None else None,
        environment=session.environment,
    )


HISTORY_NAME = re.compile(r"^\d{8}-\d{6}(-\d+)?-(run|compare)\.json$")


def save_history(
    runs: list[Run],
    target: str | None,
    *,
    comparison: bool,
    prompts: int | None = None,
    keep: int | None = None,
    max_bytes: int | None = None,
    environment: dict | None = None,
) -> str | None:
    """Keep a finished job (``runs`` on ``target``, a comparison or not, of ``prompts`` prompts,
    on the machine ``environment`` describes) as JSON in the run history folder, as
    :func:`write_json` writes it, then drop the oldest kept jobs beyond ``keep`` files or
    ``max_bytes`` (``prune_history``; None: the settings' defaults). Never fails the app: returns a
    one-line problem to show instead (an unwritable or misplaced folder), or None."""
    try:
        folder = settings.history_dir()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        kind = "compare" if comparison else "run"
        path, n = folder / f"{stamp}-{kind}.json", 1
        while path.exists():  # two jobs in one second keep both
            n += 1
            path = folder / f"{stamp}-{n}-{kind}.json"
        write_json(path, runs, target, comparison=comparison, prompts=prompts, environment=environment)
        prune_history(
            folder,
            keep if keep is not None else settings.HISTORY_KEEP,
            max_bytes if max_bytes is not None else settings.HISTORY_MAX_MB * 2**20,
        )
    except OSError as e:
        return f"the run was not kept in the history ({e.strerror or e}: {getattr(e, 'filename', '') or ''})"
    return None


def prune_history(folder: Path, keep: int, max_bytes: int) -> list[Path]:
    """Delete the oldest history files (only names this module writes) until at most ``keep``
    remain and they hold at most ``max_bytes``; the newest is always kept. Returns the deleted."""
    files = sorted(
        (p for p in Path(folder).iterdir() if HISTORY_NAME.match(p.name) and p.is_file()),
        key=lambda p: (p.stat().st_mtime, p.name),
        reverse=True,
    )
    kept, total, gone = 0, 0, []
    for p in files:
        size = p.stat().st_size
        if not gone and (kept == 0 or (kept < keep and total + size <= max_bytes)):
            kept, total = kept + 1, total + size
        else:  # this one and every older one
            p.unlink()
            gone.append(p)
    return gone


def export_name(session: Session, fmt: str, comparison: bool) -> str | None:
    """The file name an export of a tab starts with (time, drafter, prompt); None, said in
    one sentence, when the tab has nothing to export yet."""
    runs, _prompts = _exported(session, comparison)
    if not runs:
        session.fail("nothing to export yet: " + ("compare first" if comparison else "run first"))
        return None
    return default_name(runs, comparison, fmt)


def export_runs(session: Session, fmt: str, comparison: bool, path: str) -> Path | None:
    """What a tab shows, as JSON or CSV: the Run tab's run and its plain decoding, or the
    Compare tab's comparison (every run, and its table rows)."""
    runs, prompts = _exported(session, comparison)
    try:
        if fmt == "json":
            return write_json(
                path,
                runs,
                session.loaded_target,
                comparison=comparison,
                prompts=prompts,
                environment=session.environment,
            )
        return write_csv(path, runs, comparison, prompts)
    except OSError as e:
        session.fail(f"could not write {path}: {e.strerror or e}")
        return None


def _exported(session: Session, comparison: bool) -> tuple[list, int]:
    if comparison:
        return list(session.comparison), session.compare_prompts
    return [r for r in session.shown_runs() if r is not None], 1


def export_rejections(session: Session, folder: str) -> list[Path]:
    """The Rejections tab's two views as CSV into ``folder`` (``write_rejections``): the
    last job's run, or every drafter of its comparison, as the tab draws them."""
    view = session.view()
    groups = inspector.drafter_runs(view.runs, view.kind, view.speculative)
    if not groups:
        session.fail("nothing to export yet: run first (the Rejections tab describes the last run or comparison)")
        return []
    try:
        return write_rejections(folder, inspector.context_view(groups)[1], inspector.wrong_view(groups)[1])
    except OSError as e:
        session.fail(f"could not write into {folder}: {e.strerror or e}")
        return []


def save_pngs(folder: str, widgets: dict[str, QWidget]) -> tuple[list[Path], list[str]]:
    """Each widget on screen grabbed to ``folder/<name>.png`` as it is drawn: (written, skipped).
    A plot with nothing measured yet (empty axes) and one on a tab not on screen (grabbed at a
    size it was never laid out at, its titles cut) are skipped, and named in ``skipped``."""
    shown = {name: w for name, w in widgets.items() if w.isVisible() and not w.property("empty")}
    return write_pngs(folder, shown), [name for name in widgets if name not in shown]
