"""Benchmarks on the Compare tab: open a ``dspark bench`` result, save the last comparison in
the benchmark's format, and ask for this machine's measured costs (the auto policy's). The
format itself is ``app.bench_io``. Each function takes the session, changes only it, and says
what went wrong in its message bar; the window does the dialogs and shows the result."""

from __future__ import annotations

from pathlib import Path

from dspark.errors import DsparkError

from . import bench_io
from .messages import CostsRequest
from .session import Session


def open_bench(session: Session, path: str) -> bool:
    """Show a benchmark summary (file or folder) on the Compare tab; False, said in one
    sentence, when it is not one or a job is running."""
    if session.busy:
        session.fail("a run is in progress: stop it before opening a benchmark")
        return False
    try:
        doc = bench_io.read_bench(path)
    except DsparkError as e:
        session.fail(str(e))
        return False
    return session.show_bench(doc)


def describe_bench(doc: dict) -> str:
    """The status bar's line about where a benchmark was measured."""
    env = doc["environment"]
    return (f"benchmark {doc['_path']}: {env.get('cpu')}, MLX {env.get('mlx')} on {env.get('device')}, "
            f"load average at start {env.get('load_average')}")


def save_comparison(session: Session, folder: str) -> Path | None:
    """The last comparison as a ``dspark bench`` result folder (summary.json, trials.jsonl,
    trials.csv), so it opens where benchmarks open and reads with the same tools."""
    runs = list(session.comparison)
    if not runs:
        session.fail("nothing to save yet: compare first")
        return None
    try:
        doc, trials = bench_io.comparison_to_bench(runs, session.loaded_target, session.compare_prompts,
                                                   costs=session.costs, environment=session.environment)
        return bench_io.write_bench(folder, doc, trials)
    except DsparkError as e:
        session.fail(str(e))
        return None


def costs_request(session: Session, remeasure: bool = True) -> CostsRequest | None:
    """Measure (or read the cached) costs of every ticked drafter that can run, on the chosen
    target; None, said in one sentence, when there is nothing to measure."""
    target, drafters = session.choices.target, tuple(session.choices.checked())
    if session.busy:
        session.fail("a run is in progress: measure the costs after it")
        return None
    if not target or not drafters:
        session.fail("choose a target and tick at least one drafter to measure their costs")
        return None
    return CostsRequest(target, drafters, remeasure)
