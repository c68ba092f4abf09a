"""What the rejection inspector costs (issue #25): ``generate(..., inspect=True)`` against
``inspect=False`` on the same target, drafter and prompts, the two arms interleaved in one
process (their order alternating), so both share the machine's changing load.

Each (prompt, repeat) is one pair; its ratio is the inspected run's decode seconds per round over
the plain run's (greedy: both make the same rounds, which is checked). On a busy machine that
ratio spreads far more than the inspector costs, so the time spent in the inspection itself
(``dspark.rounds.inspection``, timed around its call, its host sync included) is also measured,
as a share of the inspected run's decode seconds. Printed: the median of each, its middle half
and range, the rounds measured and the load average before and after. Not a test (pytest does
not collect it): run it by hand, on a machine as quiet as it gets.

    python measure/measure_inspect.py [--target DIR] [--drafter DIR] [--prompts N] [--repeats R]
                                      [--max-tokens T] [--display | --no-display] [--json]

Every inspected run also has ``display=True`` (the app shows each token's probability, and
``dspark generate --inspect`` turns it on), so that is the default of both arms here;
``--no-display`` measures the two arms without it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default=str(ROOT / "resources" / "demo" / "target"))
    p.add_argument("--drafter", default=str(ROOT / "resources" / "demo" / "dspark"))
    p.add_argument("--prompts", type=int, default=10, help="prompts of the demo set (default 10)")
    p.add_argument("--repeats", type=int, default=3, help="pairs per prompt (default 3)")
    p.add_argument("--max-tokens", type=int, default=256, help="greedy tokens per run (default 256)")
    p.add_argument(
        "--display",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="token probabilities as the app keeps them (default on)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


class InspectionClock:
    """Seconds spent in ``dspark.rounds.inspection`` (the engine calls it by its module name)."""

    def __init__(self):
        from dspark import rounds

        self.seconds, self.original = 0.0, rounds.inspection

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return self.original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        rounds.inspection = timed


def timed(
    target, drafter, prompt: str, config, display: bool, inspect: bool, clock: InspectionClock
) -> tuple[int, float, list[int], float]:
    """(rounds that drafted, decode seconds, tokens, seconds inspecting) of one generation."""
    from dspark import generate, run_to_summary

    clock.seconds = 0.0
    s = run_to_summary(generate(target, drafter, prompt, config, display=display, inspect=inspect))
    decode = len(s.tokens) / s.tokens_per_sec if s.tokens_per_sec > 0 else float("nan")
    return s.rounds, decode, list(s.tokens), clock.seconds


def quantiles(xs: list[float]) -> dict:
    xs = sorted(xs)
    at = lambda q: xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]
    return {
        "median": statistics.median(xs),
        "p25": at(0.25),
        "p75": at(0.75),
        "min": xs[0],
        "max": xs[-1],
        "n": len(xs),
    }


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    from dspark.blas import use_fast_blas

    use_fast_blas()
    from dspark import GenerationConfig, load_drafter, load_target
    from dspark.prompts import DEFAULT, prompt_sets

    target = load_target(a.target)
    drafter = load_drafter(a.drafter, target)
    prompts = list(prompt_sets()[DEFAULT].prompts)[: a.prompts]
    config = GenerationConfig(max_tokens=a.max_tokens, stop_at_eos=False)
    clock = InspectionClock()
    timed(target, drafter, prompts[0], GenerationConfig(max_tokens=16, stop_at_eos=False), a.display, True, clock)
    before, ratios, shares, rounds, per_round = load(), [], [], 0, {False: [], True: [], "inspection": []}
    for r in range(a.repeats):
        for i, prompt in enumerate(prompts):
            arms = {}
            for inspect in (False, True) if (r + i) % 2 == 0 else (True, False):
                arms[inspect] = timed(target, drafter, prompt, config, a.display, inspect, clock)
            (n0, s0, t0, _), (n1, s1, t1, spent) = arms[False], arms[True]
            if (n0, t0) != (n1, t1):
                raise SystemExit(f"prompt {i + 1}: inspecting changed the output ({n0} vs {n1} rounds)")
            ratios.append((s1 / n1) / (s0 / n0))
            shares.append(spent / s1)
            rounds += n0
            per_round[False].append(1000 * s0 / n0)
            per_round[True].append(1000 * s1 / n1)
            per_round["inspection"].append(1000 * spent / n1)
    out = {
        "target": a.target,
        "drafter": a.drafter,
        "prompts": len(prompts),
        "repeats": a.repeats,
        "max_tokens": a.max_tokens,
        "display": a.display,
        "rounds_per_arm": rounds,
        "ratio": quantiles(ratios),
        "inspection_share": quantiles(shares),
        "ms_per_round": {
            k: statistics.median(v)
            for k, v in (
                ("plain", per_round[False]),
                ("inspect", per_round[True]),
                ("inspection", per_round["inspection"]),
            )
        },
        "load_before": before,
        "load_after": load(),
        "cpus": os.cpu_count(),
    }
    if a.json:
        print(json.dumps(out))
    else:
        q, s, ms = out["ratio"], out["inspection_share"], out["ms_per_round"]
        print(
            f"inspect / plain seconds per round: median {q['median']:.3f} (middle half {q['p25']:.3f}-{q['p75']:.3f}, "
            f"range {q['min']:.3f}-{q['max']:.3f}, {q['n']} pairs, {rounds} rounds an arm); "
            f"{ms['plain']:.2f} -> {ms['inspect']:.2f} ms per round\n"
            f"time in the inspection: {ms['inspection']:.2f} ms per round, {s['median']:.1%} of decoding (middle half "
            f"{s['p25']:.1%}-{s['p75']:.1%}, range {s['min']:.1%}-{s['max']:.1%}); "
            f"load {before:.2f} -> {out['load_after']:.2f} on {out['cpus']} cores"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
