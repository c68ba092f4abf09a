"""One speculative round (DSpark convention: the anchor is the last committed token, not yet seen
by the target), the loop's unit of work; ``dspark.engine`` runs rounds, ``dspark.costs`` times
their phases on this machine:

1. draft: the drafter proposes ``block_size`` tokens from the anchor and the tap rows so far;
2. verify: the target scores ``[anchor, d_1..d_w]`` in one forward (``w`` from the policy);
3. accept: greedy, while ``d_k`` is the target's choice; sampling, the ratio test; then one
   target token (a correction, or a bonus when all ``w`` were accepted);
4. roll back: the target's KV cache forgets the ``w - a`` rejected rows;
5. the tap rows of ``[anchor, d_1..d_a]`` become the drafter's new context rows.

A round has two host syncs: reading the draft (which also times it) and reading the outcome.
Where the ``auto`` policy decodes plainly, :func:`dspark.plain.plain_steps` runs the target
alone, pipelined as mlx-lm's own decoding is, so those stretches run at plain decoding's speed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Protocol

import mlx.core as mx

from . import blas
from .cache import rollback
from .config import SamplingParams
from .policy import Scheduler
from .sampling import (
    accept_sampled,
    distribution,
    greedy_choice,
    greedy_with_margin,
    soft_cap,
    tie_margin,
    token_probs,
)
from .target import Target


class Proposer(Protocol):
    """Anything that drafts: ``DflashDrafter``, a published checkpoint (``dspark.formats``) or,
    in tests, an oracle. ``cache`` is the target's KV cache for the generation: a drafter that
    reads the target's own K/V (the Gemma-4 assistant) keeps it; the others ignore it."""

    def start(self, target: Target, *, cache: list | None = None) -> DraftSession: ...


class DraftSession(Protocol):
    """A drafter's state for one generation: ``dspark.drafting.BlockDraftSession`` (a block drafted
    in one forward) or an autoregressive one (``dspark.stepwise``: a token per drafter step)."""

    tap_layers: Sequence[int]
    block_size: int

    def propose(
        self,
        anchor: int,
        position: int,
        *,
        new_rows: mx.array | None,
        history: Sequence[int],
        block_size: int,
        sampling: SamplingParams,
        key: mx.array,
    ):
        """Draft ``block_size`` tokens after ``anchor`` at ``position``. ``new_rows`` are the tap
        rows the session has not seen (of the committed tokens before ``anchor``); ``history`` is
        every committed token id, the prompt's included, ending with ``anchor`` (``len(history)
        == position + 1``): a drafter that embeds the token after each row (EAGLE-3) reads it.
        Return an object with ``tokens`` [1, G], ``draft_probs`` [1, G], ``q`` [1, G, V]
        (the exact distributions sampled from; None if greedy), ``confidences`` and
        ``conf_logits`` [1, G] (or None), all lazy."""

    def state(self) -> list: ...


@dataclass(kw_only=True)
class RoundOutcome:
    """What one round decided, as host values: the drafts and what the drafter thought of them,
    how many the round verified (``width``) and accepted, the tokens it committed (the accepted
    drafts, then the target's own: a correction or a bonus) with the target's probabilities of
    them, the time of each phase, and the tap rows the drafter reads next. A plain step is a
    round with no draft: ``width`` 0 and one token."""

    drafted: list[int]
    draft_probs: list[float]
    confidences: list[float] | None
    conf_logits: list[float] | None
    width: int
    accepted: int
    tokens: list[int]  # accepted drafts, then the target's token
    target_probs: list[float]
    draft_seconds: float
    verify_seconds: float
    new_rows: mx.array  # tap rows of [anchor, d_1..d_a], the drafter's next context
    plain_step: bool = False  # no draft was verified (a plain step)
    inspected: Inspection | None = None  # what the target thought at each verified position (inspect=True)


@dataclass(frozen=True)
class Inspection:
    """What the target thought at each verified draft position of a round (the rejection
    inspector): per position k = 1..width, its ``TOP`` most likely tokens with their
    probabilities, best first, the drafted token's rank among all (0: the target's own choice;
    else how many tokens it would choose first), and whether the draft lost only a numerical tie
    (its log-probability equal to the best one's, lost to the lower id, as mlx-lm's greedy rule
    breaks ties). Greedy: ordered and ranked by mlx-lm's own rule (log-probabilities in the
    model's dtype, ties to the lowest id), so the top token is the one a round commits there;
    sampling: by the distribution the ratio test reads."""

    top: tuple[tuple[tuple[int, float], ...], ...]
    rank: tuple[int, ...]
    tie: tuple[bool, ...]


#: How many of the target's best tokens the inspector keeps per verified position.
TOP = 5


@dataclass(frozen=True)
class VerifyRows:
    """What a round reads over the whole vocabulary of its verify rows, built once, lazily:
    the soft-capped logits, each row's float32 log-sum-exp (the normaliser of the probabilities
    a screen shows) and, sampling, the distribution the ratio test reads. :func:`accept` and
    :func:`inspection` read the same arrays, so each is computed once, at the first host sync
    that needs it, and kept for the other (a tanh and a log-sum-exp over the vocabulary are most
    of what inspecting a round costs on a CPU)."""

    logits: mx.array
    lse: mx.array
    dist: mx.array | None

    @classmethod
    def of(cls, raw: mx.array, softcap: float | None, sp: SamplingParams) -> VerifyRows:
        logits = soft_cap(raw, softcap)
        return cls(
            logits, mx.logsumexp(logits.astype(mx.float32), axis=-1), None if sp.greedy else distribution(logits, sp)
        )


def speculative_round(
    target: Target,
    draft_session: DraftSession,
    cache: list,
    *,
    anchor: int,
    position: int,
    new_rows: mx.array | None,
    history: Sequence[int],
    block_size: int,
    budget: int,
    sched: Scheduler,
    sampling: SamplingParams,
    key: mx.array,
    threads: dict,
    display: bool = True,
    inspect: bool = False,
) -> RoundOutcome:
    """One round from ``anchor`` (the last committed token, not yet in ``cache``) at cache length
    ``position``. ``draft_session`` drafts ``block_size`` tokens (0: none, and the round is a plain step
    of the target), reading ``new_rows`` first (the tap rows it has not seen; None: none);
    ``history`` the committed ids ending with ``anchor`` (``DraftSession.propose``);
    ``sched`` verifies at most ``budget`` of them (the tokens the run may still commit, less the
    one the target always adds: the round never commits more than the run asked for). The target
    scores the anchor and the verified drafts, ``cache`` is rolled back to the accepted ones, and
    ``sched`` learns the outcome. ``sampling`` and ``key`` decide acceptance (greedy, or the ratio
    test with this key); ``threads`` holds the BLAS thread count of each phase; ``display`` reads
    the probabilities a screen shows, ``inspect`` what the target thought at each verified
    position. Two host syncs (the draft, the outcome). Returns what the round decided."""
    sp = sampling
    k_draft, k_accept = mx.random.split(key)
    t0 = perf_counter()
    use_phase_threads(threads, "draft")
    draft = (
        draft_session.propose(
            anchor, position, new_rows=new_rows, history=history, block_size=block_size, sampling=sp, key=k_draft
        )
        if block_size > 0
        else None
    )
    conf = None
    if draft is not None and draft.confidences is not None and sched.reads_confidences:
        conf = draft.confidences[0].tolist()  # a host sync (it evaluates the draft), only for these policies
    elif draft is not None:
        # Start the draft before the verify graph is built below. On MLX's CPU backend the
        # dispatch runs nearly in step with the compute, so the overlap is small: with the
        # confidence head skipped (below) 1.04x on the demo pair, within the noise.
        mx.async_eval(draft.tokens, draft_session.state())
    width = sched.width(draft.tokens.shape[1], budget, conf, position) if draft is not None else 0
    # The verify graph is built on the lazy draft, so it is ready when the draft is read.
    logits, taps = verify_forward(
        target,
        cache,
        tap_layers=draft_session.tap_layers,
        anchor=anchor,
        draft_tokens=draft.tokens if width else None,
        width=width,
    )
    drafted, dprobs, z = [], [], None
    if draft is not None:
        drafted, dprobs, c, z = read_draft(draft, draft_session, display, heads=display or conf is not None)  # sync 1
        conf = c if conf is None else conf
    t1 = perf_counter()
    use_phase_threads(threads, "verify")
    q = draft.q[0, :width] if width and draft.q is not None else None
    rows = VerifyRows.of(logits[0], target.projection.softcap, sp)
    a, tokens, probs = accept(
        logits[0],
        target.projection.softcap,
        drafted[:width],
        q,
        sampling=sp,
        key=k_accept,
        taps=taps,
        display=display,
        rows=rows,
    )  # sync 2
    rollback(cache, width - a)
    sched.observe(width, a)
    t2 = perf_counter()
    seen = inspection(logits[0, :width], target.projection.softcap, drafted[:width], sp, rows=rows) if inspect else None
    return RoundOutcome(
        drafted=drafted,
        draft_probs=dprobs,
        confidences=conf,
        conf_logits=z,
        width=width,
        accepted=a,
        tokens=tokens,
        target_probs=probs,
        draft_seconds=t1 - t0,
        verify_seconds=t2 - t1,
        new_rows=taps[:, : a + 1],
        plain_step=block_size == 0,
        inspected=seen,
    )


def inspection(
    raw: mx.array, softcap: float | None, drafted: list[int], sp: SamplingParams, *, rows: VerifyRows | None = None
) -> Inspection:
    """The target's view of each verified draft (:class:`Inspection`), from the verify rows' head
    outputs ``raw`` [w, V] before the soft-cap, reusing what ``rows`` (the round's
    :class:`VerifyRows`, whose first ``w`` rows these are) has computed. One host sync, after the
    round's own; besides what accept read, a comparison and a partition over the vocabulary."""
    if not drafted:
        return Inspection((), (), ())
    w = len(drafted)
    rows = rows or VerifyRows.of(raw, softcap, sp)
    logits = rows.logits[:w]
    if sp.greedy:  # mlx-lm's order: log-probabilities in the model's dtype, ties to the lowest id
        # in float32 the shared log-sum-exp is that very one; in another dtype mlx-lm's is computed in it
        lse = rows.lse[:w, None] if logits.dtype == mx.float32 else mx.logsumexp(logits, axis=-1, keepdims=True)
        score = logits - lse
        probs = None  # only the candidates' are read (below): no exponential over the vocabulary
    else:
        probs = rows.dist[:w]
        score = probs
    V = score.shape[-1]
    d = mx.array(drafted, mx.int32)[:, None]
    mine = mx.take_along_axis(score, d, axis=-1)
    ids = mx.arange(V)[None, :]
    rank = ((score > mine) | ((score == mine) & (ids < d))).sum(axis=-1)
    n = min(V, TOP + 8)  # a few more than shown, so ties at the edge are ordered by id
    cand = candidates(score, n) if V > n else mx.broadcast_to(ids, (len(drafted), V))
    picked = mx.take_along_axis(score, cand, -1).astype(mx.float32)
    c_prob = mx.exp(picked) if probs is None else mx.take_along_axis(probs, cand, -1)
    c_score, c_prob, rank_l, mine_l = (x.tolist() for x in (picked, c_prob, rank, mine[:, 0].astype(mx.float32)))
    top, tie = [], []
    for row_ids, row_score, row_prob, r, m in zip(cand.tolist(), c_score, c_prob, rank_l, mine_l):
        order = sorted(range(len(row_ids)), key=lambda i: (-row_score[i], row_ids[i]))[:TOP]
        top.append(tuple((row_ids[i], row_prob[i]) for i in order))
        tie.append(r > 0 and m == row_score[order[0]])
    return Inspection(tuple(top), tuple(int(r) for r in rank_l), tuple(tie))


def candidates(score: mx.array, n: int, chunk: int = 64) -> mx.array:
    """The ids of ``n`` highest values of each row of ``score`` [w, V], in no order. A partition
    of the whole row costs 4x this on a CPU: the row is cut into chunks of ``chunk`` ids, the
    ``n`` chunks with the highest maxima hold the ``n`` highest values (a chunk holding one of
    them has a maximum at least the n-th value, and at most n chunks do), and only those are
    partitioned (demo pair: 0.06 against 0.25 ms for 7 rows of 4,096)."""
    w, V = score.shape
    pad = (-V) % chunk
    blocks = (mx.pad(score, [(0, 0), (0, pad)], constant_values=-mx.inf) if pad else score).reshape(w, -1, chunk)
    k = min(n, blocks.shape[1])
    best = mx.argpartition(-blocks.max(axis=-1), k - 1, axis=-1)[:, :k]
    ids = (best[:, :, None] * chunk + mx.arange(chunk)[None, None, :]).reshape(w, -1)
    values = mx.take_along_axis(blocks, best[:, :, None], axis=1).reshape(w, -1)
    return mx.take_along_axis(ids, mx.argpartition(-values, n - 1, axis=-1)[:, :n], axis=-1)


def verify_forward(target: Target, cache: list, *, tap_layers: Sequence[int], anchor: int, draft_tokens, width: int):
    """The target's forward over ``[anchor, d_1..d_width]`` (lazy), its head outputs before the
    soft-cap (greedy verification caps only the values it compares: :func:`accept`) and its taps."""
    verify_ids = mx.array([anchor], mx.int32)
    if width:
        verify_ids = mx.concatenate([verify_ids, draft_tokens[0, :width].astype(mx.int32)])
    return target.forward(verify_ids[None], cache, tap_layers, capped=False)


def read_draft(draft, draft_session: DraftSession, display: bool, heads: bool):
    """Evaluate a draft as a round reads it (one host sync): (drafted ids, their draft
    probabilities, confidences, confidence logits). What only a screen reads is left unevaluated,
    so never computed, without one: the draft probabilities (NaN) and, unless ``heads``, the
    confidence head (None)."""
    shown = draft.draft_probs if display else None
    c_arr, z_arr = (draft.confidences, draft.conf_logits) if heads else (None, None)
    mx.eval(draft.tokens, shown, c_arr, z_arr, draft_session.state())
    drafted = draft.tokens[0].tolist()
    dprobs = shown[0].tolist() if display else [math.nan] * len(drafted)
    return (
        drafted,
        dprobs,
        c_arr[0].tolist() if c_arr is not None else None,
        z_arr[0].tolist() if z_arr is not None else None,
    )


def use_phase_threads(threads: dict, phase: str) -> None:
    """The BLAS thread count measured best for this phase (dspark.costs), if any."""
    n = threads.get(phase)
    if n:
        blas.set_threads(n)


def accept(
    raw: mx.array,
    softcap: float | None,
    drafted: list[int],
    q: mx.array | None,
    *,
    sampling: SamplingParams,
    key,
    taps,
    display: bool = True,
    rows: VerifyRows | None = None,
):
    """(accepted drafts a, the committed tokens d_1..d_a + the target's own, and the target's
    probability of each, NaN without ``display``), from the verify rows' head outputs ``raw``
    before the soft-cap (``rows``: their :class:`VerifyRows`, shared with the inspector).
    ``drafted`` are the verified drafts, ``q`` the distributions they were sampled from (None:
    greedy drafts); ``sampling`` and ``key`` decide acceptance (greedy, or the ratio test).
    Evaluates the verify forward, ``taps`` included: one host sync (two when a row's best
    logits are within rounding of a tie)."""
    sp = sampling
    w = len(drafted)
    rows = rows or VerifyRows.of(raw, softcap, sp)
    logits = rows.logits  # lazy: computed only where read
    if sp.greedy:
        best, margin = greedy_with_margin(raw, softcap)
        shown = token_probs(logits, best, rows.lse) if display else None
        mx.eval(best, margin, shown, taps)
        if min(margin.tolist()) <= tie_margin(raw.shape[-1], raw.dtype, softcap):
            best = greedy_choice(logits)  # a near tie: mlx-lm's own rule decides, as in plain decoding
            shown = token_probs(logits, best, rows.lse) if display else None
            mx.eval(best, shown)
        best = best.tolist()
        shown = shown.tolist() if display else [math.nan] * len(best)
        a = 0
        while a < w and drafted[a] == best[a]:
            a += 1
        return a, drafted[:a] + [best[a]], shown[: a + 1]
    p = rows.dist
    d = mx.array(drafted, mx.int32)
    ok, fallback = accept_sampled(p, q, d, key)
    p_drafted, p_fallback = p[mx.arange(w), d], p[mx.arange(w + 1), fallback]
    mx.eval(ok, fallback, p_drafted, p_fallback, taps)  # p is the sampling distribution: free to show
    ok = ok.tolist()
    a = ok.index(False) if False in ok else w
    return a, drafted[:a] + [fallback.tolist()[a]], p_drafted.tolist()[:a] + [p_fallback.tolist()[a]]


__all__ = [
    "TOP",
    "DraftSession",
    "Inspection",
    "Proposer",
    "RoundOutcome",
    "VerifyRows",
    "accept",
    "inspection",
    "read_draft",
    "speculative_round",
    "use_phase_threads",
    "verify_forward",
]
