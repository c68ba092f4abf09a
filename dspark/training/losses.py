"""The DSpark drafter training objective (the DSpark paper's: cross-entropy, total variation to the
target's distribution, and the confidence head's survival BCE, weighted by position).

For one block of ``G`` positions after an anchor at sequence position ``p`` (slot ``k`` =
0..G-1 predicts the token at ``p + k + 1``):

- ``p^d_k = softmax(U_k + B(x*_{k-1}))``: the drafter's distribution, Markov bias included and
  teacher-forced with the true previous token (just ``softmax(U_k)`` without a Markov head);
- ``p^t_k = softmax(target logits at position p + k)``: the target's own prediction of label k;
- ``CE_k = -log p^d_k(x*_k)``: cross-entropy against the data (label) token;
- ``TV_k = ||p^d_k - p^t_k||_1``: total variation distance to the target, *without* the 1/2
  (as in the paper's Eq. 10 and DeepSpec's code), so it lies in [0, 2];
- ``BCE_k = BCE(sigmoid(z_k), c*_k)`` with the soft label ``c*_k = 1 - TV_k / 2`` detached:
  the analytic chance that draft k survives verification given drafts 1..k-1 did (the
  acceptance rate of sampling ``p^d_k`` against ``p^t_k``); ``z_k`` is the confidence logit.

``L = 0.1 * CE + 0.9 * TV + 1.0 * BCE``, each term a weighted mean over valid slots with
weights ``w_k = exp(-k / decay)`` (k = 0..G-1; decay 4.0 for G = 7), so early slots, which are
verified in every round, count most. A DFlash-style drafter (no heads) uses CE + TV only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

CE_WEIGHT, TV_WEIGHT, CONF_WEIGHT = 0.1, 0.9, 1.0


def default_decay(block_size: int) -> float:
    """DeepSpec's ``loss_decay_gamma`` is 4.0 for a block of 7; scale it with the block."""
    return 4.0 * block_size / 7.0


def position_weights(block_size: int, decay: float) -> mx.array:
    """``w_k = exp(-k / decay)`` for k = 0..G-1."""
    return mx.array([math.exp(-k / decay) for k in range(block_size)], dtype=mx.float32)


@dataclass
class LossParts:
    total: mx.array
    ce: mx.array
    tv: mx.array
    conf: mx.array  # 0 when the drafter has no confidence head


def dspark_loss(
    logits: mx.array,
    *,
    conf_logits: mx.array | None,
    target_logits: mx.array,
    labels: mx.array,
    valid: mx.array,
    weights: mx.array,
    ce_weight: float = CE_WEIGHT,
    tv_weight: float = TV_WEIGHT,
    conf_weight: float = CONF_WEIGHT,
    weight: mx.array | None = None,
) -> LossParts:
    """The objective above. ``logits`` [A, G, V] are the drafter's (Markov bias included),
    ``conf_logits`` [A, G] or None, ``target_logits`` [A, G, V] the target's at positions
    p..p+G-1 (no gradient flows into them), ``labels`` [A, G] the true tokens p+1..p+G,
    ``valid`` [A, G] 1 where the slot has a label, ``weights`` [G] the position weights.
    ``weight``, when given, divides the weighted sums instead of these anchors' own weight: the
    whole batch's, when these anchors are one process's part of it (the parts' losses then add
    up to the whole batch's)."""
    logits = logits.astype(mx.float32)
    target_logits = mx.stop_gradient(target_logits.astype(mx.float32))
    logp_d = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    p_d = mx.exp(logp_d)
    p_t = mx.softmax(target_logits, axis=-1)

    ce = -mx.take_along_axis(logp_d, labels[..., None].astype(mx.int32), axis=-1)[..., 0]
    tv = mx.abs(p_d - p_t).sum(axis=-1)

    w = weights[None, :] * valid.astype(mx.float32)
    denom = mx.maximum(w.sum(), 1e-8) if weight is None else weight

    def mean(x: mx.array) -> mx.array:
        return (w * x).sum() / denom

    ce_m, tv_m = mean(ce), mean(tv)
    total = ce_weight * ce_m + tv_weight * tv_m
    conf_m = mx.array(0.0)
    if conf_logits is not None:
        survive = mx.stop_gradient(1.0 - 0.5 * tv)
        bce = nn.losses.binary_cross_entropy(
            conf_logits.astype(mx.float32), survive, with_logits=True, reduction="none"
        )
        conf_m = mean(bce)
        total = total + conf_weight * conf_m
    return LossParts(total, ce_m, tv_m, conf_m)


__all__ = ["CE_WEIGHT", "CONF_WEIGHT", "LossParts", "TV_WEIGHT", "default_decay", "dspark_loss", "position_weights"]
