"""The Compare tab and ``dspark bench`` speak one format: a folder with ``summary.json``,
``trials.jsonl`` and ``trials.csv`` (:mod:`dspark.bench.report` defines every figure).

``comparison_to_bench`` turns the app's comparison into that format (each finished prompt of
each drafter a trial, paired with plain decoding of the same prompt), ``write_bench`` saves
it, ``read_bench`` opens a benchmark's summary for the Compare tab, and ``bench_rows`` gives
its arms the Compare table's row shape (``app.state.runs.bench_rows``). ``open_bench`` and
``save_comparison`` are the File menu's steps on the session: each changes only it, and says what
went wrong in its message bar. Plain Python: no Qt, no MLX.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

from dspark.bench import report
from dspark.errors import DsparkError
from dspark.files import write_text
from dspark.reading import read_json

from ..state.runs import MIN_COMPARED, Run, bench_rows, complete_prompts, machine, speedup
from ..state.session import Session
from .checking import check_bench

MAX_SUMMARY_BYTES = 16 * 2**20
COMMAND = "DSpark Studio: Compare"


def _trial(run: Run, arm: str, policy: str | None) -> dict:
    s = run.summary
    trial = {
        "arm": arm,
        "drafter": None if run.drafter is None else run.label,
        "policy": policy,
        "repeat": 0,
        "prompt_index": run.prompt_index,
        "tokens": len(s.tokens),
        "token_ids": list(s.tokens),
        "decode_seconds": len(s.tokens) / s.tokens_per_sec if s.tokens_per_sec > 0 else 0.0,
        "ttft_seconds": s.ttft_seconds,
        "peak_memory_bytes": s.peak_memory_bytes,
    }
    if run.method == "speculative":
        trial.update(
            rounds=s.rounds,
            accepted=list(s.accepted_lengths),
            widths=list(s.verify_widths),
            draft_seconds=s.draft_seconds,
            verify_seconds=s.verify_seconds,
            plain_steps=s.plain_steps,
            plain_seconds=s.plain_seconds,
        )
    return trial


def comparison_to_bench(
    runs: list[Run],
    target: str | None,
    prompts: int,
    *,
    costs: dict[str, dict] | None = None,
    environment: dict | None = None,
) -> tuple[dict, list[dict]]:
    """(summary document, trials) of a comparison, as ``dspark bench`` writes them. Only
    finished runs count; a drafter's prompt without a finished plain run has no speedup.
    ``costs``: drafter directory -> measured costs (``Costs.to_dict()``), for limit and
    efficiency; ``environment``: the worker's record of the machine (``messages.Loaded``). The speedup is the app's
    own, over comparable work (``app.state.runs.speedup``),
    which equals the benchmark's rate ratio whenever both runs made the same tokens."""
    complete = set(complete_prompts(runs))  # the prompts the table pools: a saved benchmark agrees with it
    done = [r for r in runs if r.prompt_index in complete and r.summary.tokens_per_sec > 0]
    if not done:
        raise DsparkError("nothing to save yet: no prompt of the comparison has finished")
    plain_by_prompt = {r.prompt_index: r for r in done if r.method == "plain"}
    costs = costs or {}
    trials = []
    for r in done:
        if r.method == "plain":
            trials.append(report.derive(_trial(r, report.PLAIN, None), None))
            continue
        policy = str(r.config.get("policy", "fixed"))
        # what report.derive reads of a dspark.costs.Costs, from its dict (no MLX here)
        c = SimpleNamespace(**costs[r.drafter]) if r.drafter in costs else None
        plain = plain_by_prompt.get(r.prompt_index)
        plain_trial = _trial(plain, report.PLAIN, None) if plain else None
        t = report.derive(_trial(r, f"{r.label} {policy}", policy), plain_trial, c)
        if plain is not None:
            ratio, compared = speedup(r, plain)
            t["speedup"] = ratio if compared >= MIN_COMPARED else None
            if t.get("limit") and t["speedup"]:
                t["efficiency"] = t["speedup"] / t["limit"]
        if r.verdict is not None:
            t.update(identical=r.verdict.identical, lossless=r.verdict.lossless)
        trials.append(t)
    config = runs[0].config
    doc = {
        "command": COMMAND,
        "environment": dict(environment or {}),
        "target": target,
        "prompts": {"key": "app", "name": "the app's prompts", "count": prompts},
        "settings": {
            "max_tokens": config.get("max_tokens"),
            "repeats": 1,
            "temperature": config.get("temperature", 0.0),
        },
        "costs": {Path(p).name: c for p, c in costs.items() if any(r.drafter == p for r in done)},
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "arms": report.summarize(trials),
        "machine": machine(done),
    }  # the load while it ran, and plain decoding's spread (app.state.runs.machine)
    return doc, trials


def write_bench(folder: str | Path, doc: dict, trials: list[dict]) -> Path:
    """``summary.json``, ``trials.jsonl`` and ``trials.csv`` in ``folder``; refuses a folder
    that already holds results, so nothing saved before is overwritten."""
    folder = Path(folder).expanduser()
    if (folder / "summary.json").exists() or (folder / "trials.jsonl").exists():
        raise DsparkError(f"{folder} already holds benchmark results: choose an empty folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        log = report.TrialLog(folder)
        try:
            for t in trials:
                log.add({k: v for k, v in t.items() if k != "token_logprobs"})
        finally:
            log.close()
        write_text(folder / "summary.json", json.dumps(doc, indent=1))  # whole or not at all
    except OSError as e:
        raise DsparkError(f"cannot write to {folder}: {e.strerror or e}") from None
    return folder / "summary.json"


def is_bench(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("arms"), list) and isinstance(doc.get("environment"), dict)


def _summary_path(path: str | Path) -> Path:
    path = Path(path).expanduser()
    return path / "summary.json" if path.is_dir() else path


def _read_doc(path: Path):
    """The JSON of a summary: only a regular file, bounded in size, depth and number length."""
    return read_json(path, MAX_SUMMARY_BYTES, "benchmark summary")


def is_bench_file(path: str | Path) -> bool:
    """Whether ``path`` holds a benchmark summary (a quick look: the reader checks it)."""
    try:
        return is_bench(_read_doc(_summary_path(path)))
    except DsparkError:
        return False


def read_bench(path: str | Path) -> dict:
    """A ``dspark bench`` summary (its ``summary.json``, or the folder holding it), checked as a
    whole (``app.files.checking.check_bench``) before anything of it is drawn; a DsparkError saying
    in one sentence why not."""
    path = _summary_path(path)
    doc = _read_doc(path)
    if not is_bench(doc):
        raise DsparkError(f"{path.name} is not a benchmark summary written by dspark bench (no arms)")
    check_bench(doc, path.name)
    try:
        bench_rows(doc)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DsparkError(f"{path.name} is a damaged benchmark summary ({type(e).__name__}: {e})") from None
    doc["_path"] = str(path)
    return doc


def open_bench(session: Session, path: str) -> bool:
    """Show a benchmark summary (file or folder) on the Compare tab; False, said in one
    sentence, when it is not one or a job is running."""
    if session.busy:
        session.fail("a run is in progress: stop it before opening a benchmark")
        return False
    try:
        doc = read_bench(path)
    except DsparkError as e:
        session.fail(str(e))
        return False
    return session.show_bench(doc)


def describe_bench(doc: dict) -> str:
    """The status bar's line about where a benchmark was measured."""
    env = doc["environment"]
    return (
        f"benchmark {doc['_path']}: {env.get('cpu')}, MLX {env.get('mlx')} on {env.get('device')}, "
        f"load average at start {env.get('load_average')}"
    )


def save_comparison(session: Session, folder: str) -> Path | None:
    """The last comparison as a ``dspark bench`` result folder (summary.json, trials.jsonl,
    trials.csv), so it opens where benchmarks open and reads with the same tools."""
    runs = list(session.comparison)
    if not runs:
        session.fail("nothing to save yet: compare first")
        return None
    try:
        doc, trials = comparison_to_bench(
            runs, session.loaded_target, session.compare_prompts, costs=session.costs, environment=session.environment
        )
        return write_bench(folder, doc, trials)
    except DsparkError as e:
        session.fail(str(e))
        return None


__all__ = ["bench_rows", "comparison_to_bench", "is_bench", "is_bench_file", "read_bench", "write_bench"]
