"""Speculative-decoding metrics as pure functions of per-round counts.

Inputs are per round: ``accepted[i]`` drafted tokens the target accepted, ``widths[i]`` drafted
tokens it verified, ``committed[i]`` tokens the round added to the output.
"""

from __future__ import annotations

from typing import Sequence


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
