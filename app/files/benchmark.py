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
from dspark.validate import costs_problem

from ..state.runs import MIN_COMPARED, Run, bench_rows, complete_prompts, machine, speedup
from ..state.session import Session
from .checking import (
    ENVIRONMENT,
    MAX_BLOCK,
    MAX_RATE,
    SECONDS,
    boolean,
    flat_object,
    integer,
    items,
    number,
    optional,
    plain_value,
    record,
    text,
)

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
    whole (``check_bench``) before anything of it is drawn; a DsparkError saying
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
    """The status bar's line about where a benchmark was measured; the load averages as a person
    writes them ("0.52, 0.61, 0.70 (1, 5, 15 min)"), not as Python prints a list."""
    env = doc["environment"]
    line = f"benchmark {doc['_path']}: {env.get('cpu')}, MLX {env.get('mlx')} on {env.get('device')}"
    load = env.get("load_average")
    if isinstance(load, (list, tuple)) and load and all(isinstance(x, (int, float)) for x in load):
        minutes = ", ".join(str(m) for m in (1, 5, 15)[: len(load)])
        line += f", load average at start {', '.join(f'{x:.2f}' for x in load)} ({minutes} min)"
    elif isinstance(load, (int, float)):
        line += f", load average at start {load:.2f}"
    return line


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


# --------------------------------------------------------------------------- a summary, checked whole
MAX_ARMS = 1_000
MAX_TRIALS = 10_000_000
SPREAD = optional(
    lambda v: (
        None
        if isinstance(v, dict)
        and len(v) <= 10
        and all(isinstance(k, str) and number(-1e12, 1e12)(x) is None for k, x in v.items())
        else "must be an object of numbers"
    )
)
RATIO = optional(number(0.0, 1e6))
ARM = record(
    {
        "arm": text(500),
        "drafter": optional(text(4096)),
        "policy": optional(text(100)),
        "trials": integer(0, MAX_TRIALS),
        "tokens_per_sec": number(0.0, MAX_RATE),
        "speedup": RATIO,
        "draft_ms": optional(number(0.0, 1e8)),
        "verify_ms": optional(number(0.0, 1e8)),
        "overhead_ms": optional(number(-1e8, 1e8)),
        "in_loop": optional(number(0.0, 1e6)),
        "step_ms": optional(number(0.0, 1e8)),
        "limit": RATIO,
        "efficiency": RATIO,
        "ttft_seconds": optional(SECONDS),
        "peak_memory_bytes": optional(integer(0, 2**50)),
        "tau": optional(number(0.0, MAX_BLOCK)),
        "acceptance_rate": optional(number(0.0, 1.0)),
        "per_position_acceptance": items(number(0.0, 1.0), MAX_BLOCK),
        "accepted_histogram": items(integer(0, 2**50), MAX_BLOCK + 1),
        "rounds": optional(integer(0, 2**50)),
        "identical": optional(integer(0, MAX_TRIALS)),
        "compared": optional(integer(0, MAX_TRIALS)),
        "lossless": optional(integer(0, MAX_TRIALS)),
        **{f"{k}_spread": SPREAD for k in report.SPREAD_FIGURES},
    },
    ("arm", "tokens_per_sec"),
    strict=False,
    others=plain_value,
)


BENCH = record(
    {
        "command": text(100_000),
        "environment": ENVIRONMENT,
        "target": optional(text(4096)),
        "started": optional(text(100)),
        "finished": optional(text(100)),
        "interrupted": optional(boolean),
        "settings": flat_object(100),
        "costs_context": optional(integer(0, 100_000_000)),
    },
    ("environment",),
    strict=False,
)


def check_bench(doc, name: str) -> None:
    """A ``dspark bench`` summary (``summary.json``), checked whole: its arms, their figures, the
    counts the table shows and the costs it carries."""
    problem = _bench_problem(doc)
    if problem:
        raise DsparkError(f"{name} is a damaged benchmark summary ({problem})")


def _bench_problem(doc) -> str | None:
    problem = BENCH(doc)
    if problem:
        return problem
    if not isinstance(doc.get("arms"), list) or len(doc["arms"]) > MAX_ARMS:
        return f"arms must be a list of at most {MAX_ARMS:,} arms"
    for i, arm in enumerate(doc["arms"]):
        problem = ARM(arm)
        if problem:
            return f"arm {i + 1}: {problem}"
        if (
            "compared" in arm
            and not arm.get("identical", 0) <= arm.get("lossless", arm.get("identical", 0)) <= arm["compared"]
        ):
            return f"arm {i + 1}: its identical, lossless and compared counts disagree"
    problem = record(
        {
            "key": optional(text(500)),
            "name": optional(text(500)),
            "description": optional(text(10_000)),
            "count": integer(0, 10_000_000),
        },
        ("count",),
    )(doc.get("prompts"))
    if problem:
        return f"prompts: {problem}"
    settings = doc.get("settings")
    if not isinstance(settings, dict) or integer(1, 1_000_000)(settings.get("repeats")):
        return "settings.repeats must be a whole number from 1 to 1,000,000"
    costs = doc.get("costs") or {}
    if not isinstance(costs, dict) or len(costs) > MAX_ARMS:
        return "costs must map drafters to their measured costs"
    by_repeat = doc.get("costs_by_repeat") or []
    if not isinstance(by_repeat, list) or len(by_repeat) > 1_000_000 or not all(isinstance(r, dict) for r in by_repeat):
        return "costs_by_repeat must be a list of measured costs by drafter"
    # what the app reads of them: the costs measured at the start and the last repeat's (app.state.runs.bench_costs)
    for what, measured in (("the costs", costs), ("the last repeat's costs", by_repeat[-1] if by_repeat else {})):
        for drafter, c in measured.items():
            problem = costs_problem(c)
            if problem:
                return f"{what} of {str(drafter)[:100]}: {problem}"
    return None


__all__ = ["bench_rows", "comparison_to_bench", "is_bench", "is_bench_file", "read_bench", "write_bench"]
