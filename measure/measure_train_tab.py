"""What training from the app's Train tab costs the run and the app (issue #44): the same ``dspark
train`` command started by the tab (headless, ``QT_QPA_PLATFORM=offscreen``) and from a terminal
(a plain child process), in interleaved pairs, each run's ``train_seconds`` read from its report;
and while the tab watches its run, a 10 ms timer on the GUI thread: the longest gap between two
ticks (a frame the window could not draw), how many gaps were over 100 ms, and the most CPU the
GUI thread itself spent between two ticks (its polls and paints; a gap longer than that was the
scheduler's, the run holding the cores).

    python measure/measure_train_tab.py [--target DIR] [--start-from DIR] [--data PATH ...]
                                        [--steps N] [--pairs P] [--json]

The defaults go on training the demo DSpark drafter on this checkout's ``docs/`` (a slice held
out by ``dspark train`` itself), 150 steps, with three held-out measurements, so the tab also
watches the measuring phases. Not a test (pytest does not collect it): run it by hand, on a
machine as quiet as it gets, and say its load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: A gap between ticks the window would show as a stall (the issue's "no frame over 100 ms").
STALL = 0.100


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default=str(ROOT / "resources" / "demo" / "target"))
    p.add_argument("--start-from", default=str(ROOT / "resources" / "demo" / "dspark"))
    p.add_argument("--data", nargs="+", default=[str(ROOT / "docs")])
    p.add_argument("--steps", type=int, default=150, help="training steps per run (default 150)")
    p.add_argument("--pairs", type=int, default=2, help="tab/terminal pairs, their order alternating (default 2)")
    p.add_argument(
        "--nice", type=int, default=None, help="how much lower the tab schedules its run (default: the app's, NICE)"
    )
    p.add_argument(
        "--no-ticks",
        action="store_true",
        help="no 10 ms timer in the window (its wake-ups are the measurement's, not the app's): the speeds only",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def the_command(a: argparse.Namespace, out: Path) -> list[str]:
    from dspark_studio.state import training as tr

    plan = tr.TrainPlan(
        target=a.target,
        start_from=a.start_from,
        data=tuple(a.data),
        steps=a.steps,
        eval_every=max(1, a.steps // 3),
        eval_prompts=4,
        eval_tokens=64,
        out=str(out),
        extra="--no-progress",
    )
    program = tr.dspark_program()
    why = tr.refusal(plan, program)
    if why:
        sys.exit(f"measure_train_tab: {why}")
    return tr.command(plan, program)


def train_seconds(out: Path) -> float:
    return float(json.loads((out / "train_report.json").read_text())["train_seconds"])


def from_the_tab(argv: list[str], out: Path, *, ticks: bool = True) -> dict:
    """The run started by a Train tab in a shown window, watched until it finished."""
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from dspark_studio.panes.train import TrainPane
    from dspark_studio.startup import keep_out_of_full_collections

    app = QApplication.instance() or QApplication([])
    pane = TrainPane(None)
    pane.resize(1280, 800)
    pane.show()
    keep_out_of_full_collections()  # as the app does once its window is open
    wall, cpu = [], []
    clock = QTimer()
    clock.setInterval(10)
    clock.timeout.connect(lambda: (wall.append(time.monotonic()), cpu.append(time.thread_time())))
    if ticks:
        clock.start()
    assert pane.launch(argv, str(out)), pane.message.text()
    loop = QEventLoop()  # the app's own loop: it sleeps between events, as a shown window's does
    done = QTimer()
    done.setInterval(100)
    done.timeout.connect(lambda: None if pane.child.running() else loop.quit())
    done.start()
    loop.exec()
    done.stop()
    clock.stop()
    pane.shutdown()
    pane.deleteLater()
    app.processEvents()
    if not (out / "train_report.json").is_file():
        sys.exit(f"measure_train_tab: the tab's run did not finish: {pane.state.sentence}")
    if not ticks:
        return {"train_seconds": train_seconds(out)}
    gaps = [b - a for a, b in zip(wall, wall[1:])]
    spent = [b - a for a, b in zip(cpu, cpu[1:])]
    return {
        "train_seconds": train_seconds(out),
        "ticks": len(wall),
        "longest_gap_ms": 1000 * max(gaps),
        "gaps_over_100ms": sum(g > STALL for g in gaps),
        "gap_p99_ms": 1000 * statistics.quantiles(gaps, n=100)[98],
        "gui_cpu_between_ticks_ms": 1000 * max(spent),
        # when (seconds after the start) the longest gap and the busiest tick came: the window's
        # first paint is at the start, the run's phases (data, steps, measurements) after
        "longest_gap_at_s": wall[gaps.index(max(gaps))] - wall[0],
        "busiest_tick_at_s": wall[spent.index(max(spent))] - wall[0],
    }


def from_a_terminal(argv: list[str], out: Path) -> dict:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    return {"train_seconds": train_seconds(out)}


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from dspark_studio.state import training as tr

    if a.nice is not None:
        tr.NICE = a.nice
    results: dict[str, list[dict]] = {"tab": [], "terminal": []}
    loads = [load()]
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DSPARK_STUDIO_HOME"] = str(Path(tmp) / "home")  # the app's prefs, not the user's
        for pair in range(a.pairs):
            order = ("tab", "terminal") if pair % 2 == 0 else ("terminal", "tab")
            for arm in order:
                out = Path(tmp) / f"{arm}-{pair}"
                if arm == "tab":
                    results[arm].append(from_the_tab(the_command(a, out), out, ticks=not a.no_ticks))
                else:
                    results[arm].append(from_a_terminal(the_command(a, out), out))
                loads.append(load())
                if not a.json:
                    print(f"pair {pair + 1} {arm}: {results[arm][-1]}", flush=True)
    tab, term = (statistics.median(r["train_seconds"] for r in results[k]) for k in ("tab", "terminal"))
    summary = {
        "steps": a.steps,
        "nice": tr.NICE,
        "pairs": a.pairs,
        "train_seconds_tab": tab,
        "train_seconds_terminal": term,
        "tab_over_terminal": tab / term,
        "longest_gap_ms": max((r["longest_gap_ms"] for r in results["tab"] if "ticks" in r), default=None),
        "gaps_over_100ms": sum(r.get("gaps_over_100ms", 0) for r in results["tab"]),
        "gui_cpu_between_ticks_ms": max(
            (r["gui_cpu_between_ticks_ms"] for r in results["tab"] if "ticks" in r), default=None
        ),
        "load": [min(loads), max(loads)],
        "runs": results,
    }
    if a.json:
        print(json.dumps(summary))
    elif a.no_ticks:
        print(
            f"{a.steps} steps, {a.pairs} pairs, the tab's run at nice +{tr.NICE}, no ticks, load "
            f"{min(loads):.1f}-{max(loads):.1f}: training seconds from the tab {tab:.1f}, from a terminal "
            f"{term:.1f} ({tab / term:.3f}x)"
        )
    else:
        print(
            f"{a.steps} steps, {a.pairs} pairs, the tab's run at nice +{tr.NICE}, load "
            f"{min(loads):.1f}-{max(loads):.1f}: training seconds from the tab "
            f"{tab:.1f}, from a terminal {term:.1f} ({tab / term:.3f}x); the GUI thread: longest gap "
            f"{summary['longest_gap_ms']:.0f} ms, {summary['gaps_over_100ms']} gaps over 100 ms, its own CPU "
            f"between two ticks at most {summary['gui_cpu_between_ticks_ms']:.0f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
