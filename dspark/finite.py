"""Weights that are numbers: a checkpoint holding NaN or infinite values is refused at load, in
one sentence, instead of producing padding tokens and a perfect-looking acceptance length.

Checking every weight would cost a pass over the whole model, so the load checks what is cheap
and telling: every norm and every small tensor (a damaged norm poisons every position), and the
logits of one short forward of the target (an all-NaN embedding, an infinite weight anywhere on
the path, a tied head with one bad row: all show up there).
"""

from __future__ import annotations

import mlx.core as mx
from mlx.utils import tree_flatten

from .errors import DsparkError

#: Tensors up to this many elements are checked whole at load (the norms are checked whatever their size).
SMALL = 1 << 20
#: Tokens of the target's first forward at load.
PROBE_TOKENS = 8


def check_params(module, where) -> None:
    """Refuse ``module`` when one of its norms or small floating-point tensors holds NaN or inf."""
    named = [
        (name, v)
        for name, v in tree_flatten(module.parameters())
        if mx.issubdtype(v.dtype, mx.floating) and (v.size <= SMALL or "norm" in name)
    ]
    if not named:
        return
    flags = mx.stack([mx.isfinite(v).all() for _, v in named])
    mx.eval(flags)
    bad = [name for (name, _), ok in zip(named, flags.tolist()) if not ok]
    if bad:
        raise DsparkError(f"{where}: {bad[0]} holds NaN or infinite values (the checkpoint is damaged)")


def check_target(target, where) -> None:
    """Refuse a target whose norms or small tensors are not finite, or whose first forward on a
    few tokens gives a logit that is not."""
    check_params(target.lm, where)
    vocab = target.dims.vocab_size
    tokens = mx.array([[i % vocab for i in range(PROBE_TOKENS)]])
    logits = target.lm(tokens)
    ok = mx.isfinite(logits).all()
    mx.eval(ok)
    if not ok.item():
        raise DsparkError(
            f"the target in {where} computes NaN or infinite logits on a first forward of "
            f"{PROBE_TOKENS} tokens: its weights or config are damaged"
        )


__all__ = ["PROBE_TOKENS", "SMALL", "check_params", "check_target"]
