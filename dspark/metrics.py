"""Speculative-decoding metrics as pure functions of per-round counts.

Inputs are per round: ``accepted[i]`` drafted tokens the target accepted, ``widths[i]`` drafted
tokens it verified, ``committed[i]`` tokens the round added to the output. :func:`summarize`
computes every figure at once from a run's rounds; the engine, the CLI, the app, calibration,
the demo and the benchmark all report through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence


def tau(committed: Sequence[int]) -> float:
    """Acceptance length: committed tokens per round, the target's correction or bonus token
    included (so a round that accepts nothing still counts 1). 0 for no rounds."""
    return sum(committed) / len(committed) if committed else 0.0


def acceptance_rate(accepted: Sequence[int], widths: Sequence[int]) -> float:
    """Accepted drafted tokens / verified drafted tokens (0 when nothing was verified)."""
    total = sum(widths)
    return sum(accepted) / total if total else 0.0


def per_position_acceptance(accepted: Sequence[int], widths: Sequence[int]) -> list[float]:
    """For draft position k = 1, 2, ..: the share of rounds that verified position k in which
    drafts 1..k were all accepted. Denominator: rounds with verify width >= k."""
    out = []
    for k in range(1, max(widths, default=0) + 1):
        verified = sum(1 for w in widths if w >= k)
        survived = sum(1 for a, w in zip(accepted, widths) if w >= k and a >= k)
        out.append(survived / verified if verified else 0.0)
    return out


def accepted_length_histogram(accepted: Sequence[int], max_len: int | None = None) -> list[int]:
    """Count of rounds by number of accepted drafts, index 0..max_len."""
    top = max(accepted, default=0) if max_len is None else max_len
    hist = [0] * (top + 1)
    for a in accepted:
        hist[min(a, top)] += 1
    return hist


def speedup(spec_tokens_per_sec: float, baseline_tokens_per_sec: float) -> float:
    """Ratio of decode throughputs measured in the same run (0 when the baseline is 0)."""
    return spec_tokens_per_sec / baseline_tokens_per_sec if baseline_tokens_per_sec else 0.0


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first token at which two outputs differ, None when they are identical.
    When one output is a strict prefix of the other, the shorter one's length."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def repetition_share(tokens: Sequence[int], max_period: int = 12, repeats: int = 3) -> float:
    """Share of ``tokens`` inside a stretch where a pattern of at most ``max_period`` tokens
    repeats at least ``repeats`` times in a row (``#\\n#\\n#\\n``, ``'w', 'w', 'w'``): how
    degenerate an output is. Drafters predict such stretches perfectly, so a prompt set made
    of them would show a speedup no real text gets."""
    n, covered = len(tokens), [False] * len(tokens)
    for p in range(1, max_period + 1):
        run = 0  # tokens that equal the one p before, in a row
        for i in range(p, n):
            run = run + 1 if tokens[i] == tokens[i - p] else 0
            if run >= p * (repeats - 1):
                for j in range(i - run - p + 1, i + 1):
                    covered[j] = True
    return sum(covered) / n if n else 0.0


@dataclass(frozen=True)
class Figures:
    """The acceptance figures of a set of rounds (one run, or several pooled)."""

    rounds: int
    tokens: int  # committed tokens
    tau: float
    acceptance_rate: float
    per_position_acceptance: tuple[float, ...]
    accepted_histogram: tuple[int, ...]  # rounds by accepted drafts, 0..max verify width


def figures(accepted: Sequence[int], widths: Sequence[int], committed: Sequence[int]) -> Figures:
    """:class:`Figures` from per-round counts (see the module docstring)."""
    return Figures(
        rounds=len(committed),
        tokens=sum(committed),
        tau=tau(committed),
        acceptance_rate=acceptance_rate(accepted, widths),
        per_position_acceptance=tuple(per_position_acceptance(accepted, widths)),
        accepted_histogram=tuple(accepted_length_histogram(accepted, max(widths, default=0))),
    )


def summarize(rounds: Iterable) -> Figures:
    """:class:`Figures` of ``rounds``: anything with ``accepted``, ``verify_width`` and
    ``committed`` (``dspark.events.RoundEvent``)."""
    rounds = list(rounds)
    return figures([r.accepted for r in rounds], [r.verify_width for r in rounds], [len(r.committed) for r in rounds])
