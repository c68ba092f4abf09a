"""The Compare tab and ``dspark bench`` speak one format: a folder with ``summary.json``,
``trials.jsonl`` and ``trials.csv`` (:mod:`dspark.bench.report` defines every figure).

``comparison_to_bench`` turns the app's comparison into that format (each finished prompt of
each drafter a trial, paired with plain decoding of the same prompt), ``write_bench`` saves
it, ``read_bench`` opens a benchmark's summary for the Compare tab, and ``bench_rows`` gives
its arms the Compare table's row shape. Plain Python: no Qt, no MLX.
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

from .file_checks import check_bench

from .runs import BASELINE, MIN_COMPARED, Run, bench_machine, complete_prompts, machine, speedup

MAX_SUMMARY_BYTES = 16 * 2**20
COMMAND = "DSpark Studio: Compare"


def _trial(run: Run, arm: str, policy: str | None) -> dict:
    s = run.summary
    trial = {"arm": arm, "drafter": None if run.drafter is None else run.label, "policy": policy, "repeat": 0,
             "prompt_index": run.prompt_index, "tokens": len(s.tokens), "token_ids": list(s.tokens),
             "decode_seconds": len(s.tokens) / s.tokens_per_sec if s.tokens_per_sec > 0 else 0.0,
             "ttft_seconds": s.ttft_seconds, "peak_memory_bytes": s.peak_memory_bytes}
    if run.method == "speculative":
        trial.update(rounds=s.rounds, accepted=list(s.accepted_lengths), widths=list(s.verify_widths),
                     draft_seconds=s.draft_seconds, verify_seconds=s.verify_seconds, plain_steps=s.plain_steps,
                     plain_seconds=s.plain_seconds)
    return trial


def comparison_to_bench(runs: list[Run], target: str | None, prompts: int, *,
                        costs: dict[str, dict] | None = None, environment: dict | None = None) -> tuple[dict, list[dict]]:
    """(summary document, trials) of a comparison, as ``dspark bench`` writes them. Only
    finished runs count; a drafter's prompt without a finished plain run has no speedup.
    ``costs``: drafter directory -> measured costs (``Costs.to_dict()``), for limit and
    efficiency; ``environment``: the worker's record of the machine (``messages.Loaded``). The speedup is the app's own, over comparable work (``app.runs.speedup``),
    which equals the benchmark's rate ratio whenever both runs made the same tokens."""
    complete = set(complete_prompts(runs))  # the prompts the table pools: a saved benchmark agrees with it
    done = [r for r in runs if r.prompt_index in complete and r.summary.tokens_per_sec > 0]
    if not done:
        raise DsparkError("nothing to save yet: no prompt of the comparison has finished")
    bases = {r.prompt_index: r for r in done if r.method == "baseline"}
    costs = costs or {}
    trials = []
    for r in done:
        if r.method == "baseline":
            trials.append(report.derive(_trial(r, report.PLAIN, None), None))
            continue
        policy = str(r.config.get("policy", "fixed"))
        # what report.derive reads of a dspark.costs.Costs, from its dict (no MLX here)
        c = SimpleNamespace(**costs[r.drafter]) if r.drafter in costs else None
        base = bases.get(r.prompt_index)
        t = report.derive(_trial(r, f"{r.label} {policy}", policy), _trial(base, report.PLAIN, None) if base else None, c)
        if base is not None:
            ratio, compared = speedup(r, base)
            t["speedup"] = ratio if compared >= MIN_COMPARED else None
            if t.get("limit") and t["speedup"]:
                t["efficiency"] = t["speedup"] / t["limit"]
        if r.verdict is not None:
            t.update(identical=r.verdict.identical, lossless=r.verdict.lossless)
        trials.append(t)
    config = runs[0].config
    doc = {"command": COMMAND, "environment": dict(environment or {}), "target": target,
           "prompts": {"key": "app", "name": "the app's prompts", "count": prompts},
           "settings": {"max_tokens": config.get("max_tokens"), "repeats": 1,
                        "temperature": config.get("temperature", 0.0)},
           "costs": {Path(p).name: c for p, c in costs.items() if any(r.drafter == p for r in done)},
           "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "arms": report.summarize(trials),
           "machine": machine(done)}  # the load while it ran, and plain decoding's spread (app.runs.machine)
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
    whole (``app.file_checks.check_bench``) before anything of it is drawn; a DsparkError saying
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


def bench_costs(doc: dict) -> dict:
    """The costs a benchmark's limits were computed from: the last repeat's (measured at the
    trials' context and load), else those measured at its start."""
    last = (doc.get("costs_by_repeat") or [None])[-1]
    return last or doc.get("costs") or {}


def _same_mark(arm: dict) -> str | None:
    if "compared" not in arm:
        return None
    n, same, lossless = int(arm["compared"]), int(arm["identical"]), int(arm.get("lossless", arm["identical"]))
    if lossless < n:
        return "✗"
    ties = lossless - same
    return "✓" if not ties else f"≈ {ties} tie{'s' * (ties > 1)}"


def bench_rows(doc: dict) -> list[dict]:
    """The Compare table's rows (``app.runs.compare_rows``' keys) for a benchmark's arms;
    plain decoding is the baseline row. Figures are the benchmark's: medians over trials."""
    rows = []
    trials_per_arm = f"{doc['prompts']['count']}×{doc['settings']['repeats']}"
    measured_on = bench_machine(doc)  # the header's "machine busy" note reads it
    for arm in doc["arms"]:
        plain = arm["arm"] == report.PLAIN
        n = int(arm.get("trials", 0))
        speed = float(arm["speedup"]) if arm.get("speedup") is not None else (1.0 if plain else None)
        rows.append({
            "label": BASELINE if plain else str(arm["arm"]),
            "method": "baseline" if plain else "speculative",
            "drafter": arm.get("drafter"),
            "policy": arm.get("policy"),
            "machine": measured_on,
            "runs": n, "planned": n, "finished": n, "stopped": 0,
            "runs_text": trials_per_arm,
            "tokens": 0, "rounds": int(arm.get("rounds", 0)),
            "tau": float(arm.get("tau", 0.0)),
            "acceptance_rate": float(arm.get("acceptance_rate", 0.0)),
            "per_position_acceptance": [float(x) for x in arm.get("per_position_acceptance", [])],
            "tokens_per_sec": float(arm["tokens_per_sec"]),
            "speedup": speed,
            "speedup_spread": arm.get("speedup_spread"),
            "limit": arm.get("limit"), "efficiency": arm.get("efficiency"),
            "compared_tokens": 0, "compared_rates": [0.0, 0.0], "same_length": True,
            "identical": None if plain else _same_mark(arm),
            "ttft_seconds": arm.get("ttft_seconds"),
            "peak_memory_bytes": int(arm.get("peak_memory_bytes") or 0),
        })
    return rows


__all__ = ["bench_costs", "bench_rows", "comparison_to_bench", "is_bench", "is_bench_file", "read_bench", "write_bench"]
