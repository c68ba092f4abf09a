"""Speculative-decoding metrics as pure functions of per-round counts.

Inputs are per round: ``accepted[i]`` drafted tokens the target accepted, ``widths[i]`` drafted
tokens it verified, ``committed[i]`` tokens the round added to the output. A round in which no
draft was verified (``drafted[i]`` False: the ``auto`` policy decoded plainly because a round
could not pay at that context; a shadow draft it made there is not verified) is a *plain step*:
it is counted as one, and left out of tau, the acceptance figures and the histogram, which
describe the drafter. (Plain decoding's own rounds are no plain steps: each is a round of one
token, tau 1.) :func:`summarize`
computes every figure at once from a run's rounds; the engine, the CLI, the app, calibration,
the demo and the benchmark all report through it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


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


def speedup(speculative_tokens_per_sec: float, plain_tokens_per_sec: float) -> float:
    """Ratio of decode throughputs measured in the same run (0 when plain decoding's is 0)."""
    return speculative_tokens_per_sec / plain_tokens_per_sec if plain_tokens_per_sec else 0.0


def decode_seconds(event) -> float:
    """Seconds of decoding (after the prompt was processed) up to the end of a round: the
    round's own cumulative ``tokens_generated / tokens_per_sec`` (``dspark.events.RoundEvent``)."""
    return event.tokens_generated / event.tokens_per_sec if event.tokens_per_sec > 0 else 0.0


#: A pause of the machine (another process, swapping, a laptop lid): one round or step that took
#: more than ``PAUSE_FACTOR`` times the run's median seconds per token for its tokens, and at least
#: ``PAUSE_MIN_S`` seconds. A slow round of the run's own work is within that (a long verify costs a
#: few steps, not twenty); a stall of seconds is not.
PAUSE_FACTOR, PAUSE_MIN_S = 20.0, 1.0


def pauses(rounds: Sequence) -> list[tuple[int, float]]:
    """(index, seconds left out) of each round of ``rounds`` that was a pause of the machine
    (``PAUSE_FACTOR``, ``PAUSE_MIN_S``): what is left out is its time beyond the run's median
    pace for its tokens, so its tokens still count, at the pace of the rest."""
    times, made = [decode_seconds(r) for r in rounds], [r.tokens_generated for r in rounds]
    spans = [
        (t - (times[i - 1] if i else 0.0), m - (made[i - 1] if i else 0)) for i, (t, m) in enumerate(zip(times, made))
    ]
    paces = sorted(d / n for d, n in spans if n > 0)
    if len(paces) < 3:  # too few to know the run's pace
        return []
    pace = paces[len(paces) // 2]
    return [
        (i, d - n * pace) for i, (d, n) in enumerate(spans) if d >= PAUSE_MIN_S and d > PAUSE_FACTOR * pace * max(n, 1)
    ]


def prefix_work(rounds: Sequence, n: int) -> tuple[int, float]:
    """(tokens, decode seconds) up to the end of the first round that had made ``n`` tokens
    (a round commits several tokens, so tokens may exceed ``n`` by up to a block), the pauses of
    the machine before it left out (:func:`pauses`); (0, 0.0) when the rounds never reached ``n``."""
    left_out = pauses(rounds)
    for i, r in enumerate(rounds):
        if r.tokens_generated >= n:
            return r.tokens_generated, decode_seconds(r) - sum(s for j, s in left_out if j <= i)
    return 0, 0.0


def comparable_rates(pairs: Iterable[tuple[Sequence, Sequence]]) -> tuple[float, float, int]:
    """Decode rates over comparable work: for each (speculative rounds, plain rounds) pair of one
    prompt, both runs are measured over the first n tokens, n = the shorter output (a sampled
    run can stop at EOS after 2 tokens while the other makes 256; their whole-run rates would
    compare different work), a pause of the machine in either left out (:func:`prefix_work`).
    Pooled over pairs: tokens / seconds on each side. Returns
    (speculative tokens/sec, plain tokens/sec, tokens compared summed over the pairs);
    (0.0, 0.0, 0) when no pair made a token."""
    spec_tok = spec_s = base_tok = base_s = 0.0
    compared = 0
    for speculative, base in pairs:
        n = min(speculative[-1].tokens_generated if speculative else 0, base[-1].tokens_generated if base else 0)
        if n <= 0:
            continue
        (st, ss), (bt, bs) = prefix_work(speculative, n), prefix_work(base, n)
        if ss > 0 and bs > 0:
            spec_tok, spec_s, base_tok, base_s = spec_tok + st, spec_s + ss, base_tok + bt, base_s + bs
            compared += n
    if not compared:
        return 0.0, 0.0, 0
    return spec_tok / spec_s, base_tok / base_s, compared


def comparable_speedup(pairs: Iterable[tuple[Sequence, Sequence]]) -> tuple[float, int]:
    """(speculative ÷ plain tokens/sec, tokens compared) over comparable work
    (:func:`comparable_rates`); (0.0, 0) when no pair made a token."""
    speculative, base, compared = comparable_rates(pairs)
    return (speedup(speculative, base), compared) if compared else (0.0, 0)


def rate_curve(
    rounds: Sequence, window: int = 32, offset: float = 0.0, min_tokens: int = 8
) -> tuple[list[float], list[float]]:
    """Decode tokens/sec over a moving window: at the end of each round, the tokens of the last
    ``window`` or more committed tokens (whole rounds) divided by the seconds they took; against
    decode seconds (+ ``offset``, to draw runs back to back). Until ``window`` tokens exist the
    window starts where decoding did; points begin once ``min_tokens`` exist (the first rounds'
    rates are too few tokens to mean anything), or at the last round of a shorter run."""
    xs, ys = [], []
    times = [decode_seconds(r) for r in rounds]
    counts = [r.tokens_generated for r in rounds]
    j = -1  # the window starts after round j (-1: where decoding started)
    for i, (t, c) in enumerate(zip(times, counts)):
        while j + 1 < i and c - counts[j + 1] >= window:
            j += 1
        if c < min_tokens and i < len(rounds) - 1:
            continue
        t0, c0 = (times[j], counts[j]) if j >= 0 else (0.0, 0)
        if t > t0:
            xs.append(offset + t)
            ys.append((c - c0) / (t - t0))
    return xs, ys


#: Context-length buckets of :func:`by_context` (upper bounds, in tokens before the anchor).
CONTEXT_EDGES = (128, 512, 1024, 2048, 4096, 8192, 16384, 32768)


def by_context(rounds: Iterable, edges: Sequence[int] = CONTEXT_EDGES) -> list[dict]:
    """Acceptance by context length: the rounds that drafted, bucketed by their anchor's position
    (``RoundEvent.position``: tokens before it) into ``(previous edge, edge]`` ranges, each with its
    rounds, tau, position-1 acceptance (accepted first drafts / rounds that verified one), and
    acceptance rate (accepted drafts / ``verified`` drafts, the bucket's verified drafted tokens;
    None when it verified none). Empty buckets are left out; a round past the last edge falls in
    an open last bucket."""
    groups: dict[int, list] = {}
    for r in rounds:
        if getattr(r, "plain_step", False):
            continue
        k = next((i for i, e in enumerate(edges) if r.position <= e), len(edges))
        groups.setdefault(k, []).append(r)
    out = []
    for k in sorted(groups):
        rs = groups[k]
        tried = [r for r in rs if r.verify_width >= 1]
        out.append(
            {
                "from": edges[k - 1] + 1 if k else 0,
                "to": edges[k] if k < len(edges) else None,
                "rounds": len(rs),
                "tau": tau([len(r.committed) for r in rs]),
                "first_acceptance": sum(r.accepted >= 1 for r in tried) / len(tried) if tried else None,
                "verified": sum(r.verify_width for r in rs),
                "acceptance_rate": (
                    acceptance_rate([r.accepted for r in rs], [r.verify_width for r in rs])
                    if any(r.verify_width for r in rs)
                    else None
                ),
            }
        )
    return out


def context_edges(last_position: int, buckets: int = 8) -> tuple[int, ...]:
    """Bucket edges for :func:`by_context` over positions 0..``last_position``: at most ``buckets``
    equal steps of a round size (1, 2 or 5 times a power of ten), the last edge at or past
    ``last_position``. One generation's context grows evenly, so equal steps show its trend."""
    need = max(last_position, 1) / max(buckets, 1)
    step = 1
    while step < need:
        step = _next_round(step)
    return tuple(step * i for i in range(1, -(-max(last_position, 1) // step) + 1))


def _next_round(step: int) -> int:
    """The round size after ``step``: 1, 2, 5, 10, 20, 50, ..."""
    return step * 5 // 2 if str(step)[0] == "2" else step * 2


def rejections(rounds: Iterable, top: int | None = 10) -> list[dict]:
    """What a drafter gets wrong: at each round's first rejected draft (draft ``accepted + 1`` of
    a round that verified more than it accepted), the pair (drafted token, the token the target
    committed there instead: its correction), counted over ``rounds``. The ``top`` (None: all)
    most frequent pairs, most first (equal counts in the order first seen), each ``{"drafted", "target",
    "count", "share"}``; share = count / rejections, the rounds that rejected a draft and
    committed a correction (a round whose accepted drafts reached EOS first has none). Plain
    steps and rounds that accepted every verified draft are not rejections."""
    counts: dict[tuple[int, int], int] = {}
    total = 0
    for r in rounds:
        a = r.accepted
        if getattr(r, "plain_step", False) or a >= r.verify_width or len(r.committed) <= a:
            continue
        pair = (r.drafted[a], r.committed[a].id)
        counts[pair] = counts.get(pair, 0) + 1
        total += 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]  # sorted() keeps first-seen order among equals
    return [{"drafted": d, "target": t, "count": n, "share": n / total} for (d, t), n in ranked]


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


@dataclass(frozen=True, kw_only=True)
class Figures:
    """The acceptance figures of a set of rounds (one run, or several pooled)."""

    rounds: int
    tokens: int  # committed tokens
    tau: float
    acceptance_rate: float
    per_position_acceptance: tuple[float, ...]
    accepted_histogram: tuple[int, ...]  # rounds by accepted drafts, 0..max verify width
    plain_steps: int = 0  # rounds in which no draft was verified (in none of the figures above but tokens)


def figures(
    accepted: Sequence[int], widths: Sequence[int], committed: Sequence[int], drafted: Sequence[bool] | None = None
) -> Figures:
    """:class:`Figures` from per-round counts (see the module docstring); ``rounds`` counts the
    rounds that drafted, ``tokens`` every committed token."""
    keep = [i for i in range(len(committed)) if drafted is None or drafted[i]]
    a, w, c = [accepted[i] for i in keep], [widths[i] for i in keep], [committed[i] for i in keep]
    return Figures(
        rounds=len(c),
        tokens=sum(committed),
        tau=tau(c),
        acceptance_rate=acceptance_rate(a, w),
        per_position_acceptance=tuple(per_position_acceptance(a, w)),
        accepted_histogram=tuple(accepted_length_histogram(a, max(w, default=0))),
        plain_steps=len(committed) - len(c),
    )


def summarize(rounds: Iterable) -> Figures:
    """:class:`Figures` of ``rounds``: anything with ``accepted``, ``verify_width``, ``committed``
    and ``plain_step`` (``dspark.events.RoundEvent``)."""
    rounds = list(rounds)
    return figures(
        [r.accepted for r in rounds],
        [r.verify_width for r in rounds],
        [len(r.committed) for r in rounds],
        [not getattr(r, "plain_step", False) for r in rounds],
    )
