"""DSpark's Markov head while drafting: each drafted position's bias ``W2 W1[x_prev]`` depends on
the token drafted just before it, so the head runs left to right inside the block. Two ways keep
that loop cheap, chosen by the head's size: a table of every previous token's bias (small heads,
``bias_table``), or scoring each position's best backbone candidates only (large vocabularies,
``draft_on_candidates``); a middle-sized head scores every id (``scores_candidates`` says which).
``dspark.drafting`` runs the loop; the constants are measured trade-offs.
"""

from __future__ import annotations

import mlx.core as mx
from mlx.utils import tree_flatten

from .config import SamplingParams
from .sampling import distribution

#: Bytes up to which a Markov head's biases are tabulated for every previous token (the demo's
#: 4,096 x 4,096 float32 head: 64 MiB). Measured interleaved on the demo pair (10 prompts x 3,
#: 256 greedy tokens): 1.07x tok/s over the candidate loop (spread 1.01-1.10), same tokens.
MARKOV_TABLE_BYTES = 64 << 20
#: Draft-vocabulary candidates per position that the Markov loop scores on large heads.
MARKOV_SCORED = 256
#: W2 weights (draft vocabulary x rank) up to which the Markov loop scores every id: exact, and
#: at that size a pass over W2 costs less than picking and gathering candidates. Measured
#: interleaved on this project's CPU: a DeepSpec head with 8,192 ids x rank 32 drafted 4% faster
#: per round in full (and exactly: tau 2.25, on candidates 2.17); the demo's 4,096 x 256
#: 4% faster on candidates (same tau); Gemma's 262,144 x 256 is 11x faster on candidates.
MARKOV_FULL_WEIGHTS = 1 << 19


def scores_candidates(markov_head) -> bool:
    """Whether the Markov loop scores candidates (a large head) rather than every id."""
    rank, vocab = markov_head.markov_w1.weight.shape[1], markov_head.markov_w2.weight.shape[0]
    if hasattr(markov_head.markov_w1, "scales"):  # quantized: packed columns
        rank *= 32 // markov_head.markov_w1.bits
    return vocab > 2 * MARKOV_SCORED and vocab * rank > MARKOV_FULL_WEIGHTS


def weight_rows(linear, ids: mx.array) -> mx.array:
    """Rows ``ids`` of a Linear's (possibly quantized) weight, as floats: [*ids.shape, in]."""
    if hasattr(linear, "scales"):
        biases = linear["biases"][ids] if "biases" in linear else None
        return mx.dequantize(
            linear.weight[ids],
            linear.scales[ids],
            biases,
            group_size=linear.group_size,
            bits=linear.bits,
            mode=getattr(linear, "mode", "affine"),
        )
    return linear.weight[ids]


def draft_on_candidates(drafter, proj, raw: mx.array, prev: mx.array, *, sampling: SamplingParams, keys):
    """The Markov loop on each position's ``MARKOV_SCORED`` best backbone candidates.

    The bias W2 W1[x_prev] of a whole vocabulary is a pass over all of W2 per position (at
    Gemma's 262,144 ids and rank 256, 67M weights read seven times a round, as much as the
    head itself). The bias moves a logit by a bounded amount, so the drafted token is
    almost always among the backbone's best few hundred: the candidates are picked for
    all positions at once, their W2 rows gathered once, and the loop scores only them.
    The draft is then the best (or, sampling, a draw) among the candidates: a drafter's
    choice may differ from the full-vocabulary one in rare rounds, which changes only
    what is proposed, never what is committed (the target decides), and under sampling
    ``q`` is exactly the distribution drawn from. Returns (draft ids, q over the draft
    vocabulary or None, q(token), W1 rows of the previous tokens). ``raw``: the head's
    output before the soft-cap (monotone: the candidates are the same), capped here on the
    candidates only. ``sampling`` decides greedy or a draw, with one of ``keys`` per position."""
    sp = sampling
    head = drafter.net.markov_head
    A, G, V = raw.shape
    cand = mx.argpartition(-raw, MARKOV_SCORED - 1, axis=-1)[..., :MARKOV_SCORED]  # [A, G, M] draft ids
    base_c = drafter.cap(proj, mx.take_along_axis(raw, cand, axis=-1))
    w2 = weight_rows(head.markov_w2, cand)  # [A, G, M, r]
    toks, embs, probs, qs = [], [], [], []
    for k in range(G):
        e_k = head.markov_w1(prev)  # [A, r]; W1 is indexed by target ids
        logits_k = base_c[:, k] + (w2[:, k] @ e_k[..., None])[..., 0]
        if sp.greedy:
            i = mx.argmax(logits_k, axis=-1)
            probs.append(mx.softmax(logits_k.astype(mx.float32), axis=-1)[mx.arange(A), i])
        else:
            q_c = distribution(logits_k, sp)
            i = mx.random.categorical(mx.log(q_c), key=keys[k])
            probs.append(q_c[mx.arange(A), i])
            qs.append(mx.put_along_axis(mx.zeros((A, V), q_c.dtype), cand[:, k], q_c, axis=-1))
        choice = cand[:, k][mx.arange(A), i].astype(mx.int32)
        prev = drafter.to_target(choice)
        toks.append(choice), embs.append(e_k)
    q = None if sp.greedy else mx.stack(qs, axis=1)
    return mx.stack(toks, axis=1), q, mx.stack(probs, axis=1), mx.stack(embs, axis=1)


def bias_table(drafter) -> mx.array | None:
    """Every previous token's Markov bias, W2 W1[x] for all x ([V, V_draft], the head's own
    ops batched), when it takes at most ``MARKOV_TABLE_BYTES``: a drafted position then
    reads one row instead of a pass over W2. Built on first use and again whenever the
    head's weights are replaced (training installs new arrays)."""
    head = drafter.net.markov_head
    rows, cols = head.markov_w1.weight.shape[0], head.markov_w2.weight.shape[0]
    out = head.markov_w2.scales if hasattr(head.markov_w2, "scales") else head.markov_w2.weight  # the bias dtype
    if rows * cols * out.dtype.size > MARKOV_TABLE_BYTES:
        return None
    weights = [w for _, w in tree_flatten(head.parameters())]
    cached = getattr(drafter, "_table", None)
    if cached is not None and len(cached[0]) == len(weights) and all(a is b for a, b in zip(cached[0], weights)):
        return cached[1]
    table = head(mx.arange(rows))[0]
    mx.eval(table)
    drafter._table = (weights, table)
    return table


__all__ = [
    "MARKOV_FULL_WEIGHTS",
    "MARKOV_SCORED",
    "MARKOV_TABLE_BYTES",
    "bias_table",
    "draft_on_candidates",
    "scores_candidates",
    "weight_rows",
]
