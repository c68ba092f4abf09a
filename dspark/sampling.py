"""Token distributions and the lossless acceptance rule.

``distribution`` reproduces mlx-lm's sampler exactly (log-softmax, then top-p, then top-k on
the temperature-1 log-probabilities, then softmax at the temperature), using mlx-lm's own
filters, so speculative sampling and plain mlx-lm sampling target the same distribution.
"""

from __future__ import annotations

import math

import mlx.core as mx
from mlx_lm.sample_utils import apply_top_k, apply_top_p

from .config import SamplingParams


def greedy_choice(logits: mx.array) -> mx.array:
    """The greedy token of each row of ``logits`` [..., V], by mlx-lm's own rule: the argmax of
    the log-probabilities computed in the logits' dtype. In bf16, near-ties round to equal
    log-probabilities and the lowest id wins, exactly as in plain mlx-lm decoding."""
    return mx.argmax(logits - mx.logsumexp(logits, axis=-1, keepdims=True), axis=-1)


def soft_cap(x: mx.array, cap: float | None) -> mx.array:
    """Gemma's logit soft-cap ``cap * tanh(x / cap)``, in the ops mlx-lm uses (``logit_softcap``),
    so capped values round exactly as in plain decoding; ``x`` unchanged without a cap."""
    return mx.tanh(x / cap) * cap if cap else x


def greedy_with_margin(logits: mx.array, softcap: float | None = None) -> tuple[mx.array, mx.array]:
    """The argmax of each row of ``logits`` [S, V] and its margin over the runner-up, with no
    exponential: on MLX's CPU backend a log-sum-exp over a vocabulary costs 4x an argmax
    (25 ms for 8 rows of 262,144). Where the margin exceeds :func:`tie_margin` the argmax is
    :func:`greedy_choice`'s token exactly; elsewhere call it (the engine does).

    With ``softcap``, ``logits`` are the head's output before the soft-cap: the cap is monotone,
    so the best and the runner-up are read before it and only those two are capped (a tanh
    over the vocabulary costs 17 ns an id on that backend: 36 ms for 8 rows of 262,144); the
    margin is the capped one, and ``tie_margin(..., softcap)`` allows for the cap's rounding."""
    best = mx.argmax(logits, axis=-1)
    top = mx.take_along_axis(logits, best[:, None], axis=-1)[:, 0]
    others = mx.where(mx.arange(logits.shape[-1])[None, :] == best[:, None], -mx.inf, logits)
    second = mx.max(others, axis=-1)
    return best, (soft_cap(top, softcap) - soft_cap(second, softcap)).astype(mx.float32)


def tie_margin(vocab: int, dtype, softcap: float | None = None) -> float:
    """A margin above which mlx-lm's greedy rule cannot differ from the plain argmax.

    mlx-lm takes the argmax of ``fl(l - lse)`` in the logits' dtype. ``fl(x - lse)`` is monotone
    in ``x``, so it can only merge the best logit with another (and hand the lower id the
    win) when the two are closer than one spacing of the dtype at ``|l_best - lse|``, which is
    at most ``log V`` for the best token (``lse`` lies in ``[l_best, l_best + log V]``). Two
    spacings at ``2 log V`` leave room for the rounding of ``lse`` itself.

    With ``softcap`` (margins measured by ``greedy_with_margin(..., softcap)``), four more
    spacings at the cap's magnitude: a rounded tanh may be off by an ulp and need not be
    monotone to the last bit, so a token below the runner-up before the cap may come out an
    ulp above it after, and the capped best an ulp below."""
    bits = {mx.bfloat16: 7, mx.float16: 10}.get(dtype, 23)
    magnitude = max(2 * math.log(max(vocab, 2)), 1.0)
    margin = 2 * 2.0 ** (math.floor(math.log2(magnitude)) - bits)
    if softcap:
        margin += 4 * 2.0 ** (math.floor(math.log2(max(abs(softcap), 1.0))) - bits)
    return margin


def distribution(logits: mx.array, sp: SamplingParams) -> mx.array:
    """Probabilities [..., V] the sampler draws from (float32)."""
    logits = logits.astype(mx.float32)
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    if 0 < sp.top_p < 1.0:
        logprobs = apply_top_p(logprobs, sp.top_p)
    if sp.top_k > 0:
        logprobs = apply_top_k(logprobs, sp.top_k)
    return mx.softmax(logprobs * (1.0 / sp.temperature), axis=-1)


def token_probs(logits: mx.array, tokens: mx.array, lse: mx.array | None = None) -> mx.array:
    """Temperature-1 probability of ``tokens`` [S] under ``logits`` [S, V] (for display);
    ``lse``: the rows' float32 log-sum-exp when the caller has it (``rounds.VerifyRows``)."""
    logits = logits.astype(mx.float32)
    picked = mx.take_along_axis(logits, tokens[:, None], axis=-1)[:, 0]
    return mx.exp(picked - (mx.logsumexp(logits, axis=-1) if lse is None else lse))


def sample(probs: mx.array, key: mx.array) -> mx.array:
    """Draw one token per row of ``probs`` [..., V]."""
    return mx.random.categorical(mx.log(probs), key=key)


def accept_sampled(p: mx.array, q: mx.array, drafted: mx.array, key: mx.array):
    """Speculative sampling (Leviathan et al.; Chen et al.) for one round, all lazily.

    ``p`` [l+1, V]: the target's distributions at the verified rows; ``q`` [l, V]: the exact
    distributions the ``l`` drafted tokens were drawn from. Draft k is accepted with
    probability min(1, p_k(d_k) / q_k(d_k)); at the first rejection the token is drawn from
    normalize(max(p_k - q_k, 0)); if all are accepted, a bonus token is drawn from p_l.

    Returns ``(accepted_mask [l], fallback_tokens [l+1])``: fallback k is the residual sample
    for a rejection at k (k < l) or the bonus (k = l). The caller takes the first rejection.
    """
    l = drafted.shape[0]  # noqa: E741 (the docstring's l: the drafted length)
    k_u, k_res = mx.random.split(key)
    if l == 0:
        return mx.zeros((0,), mx.bool_), sample(p, k_res)
    rows = mx.arange(l)
    pd, qd = p[rows, drafted], q[rows, drafted]
    u = mx.random.uniform(shape=(l,), key=k_u)
    accepted = u * qd < pd
    residual = mx.maximum(p[:l] - q, 0.0)
    mass = residual.sum(axis=-1, keepdims=True)
    # Zero residual mass means p <= q everywhere, i.e. p == q: then rejection has probability
    # zero, and the fallback to p only guards against rounding.
    residual = mx.where(mass > 0, residual / mx.maximum(mass, 1e-30), p[:l])
    fallback = sample(mx.concatenate([residual, p[l:]], axis=0), k_res)
    return accepted, fallback
