"""Exact rollback of the newest ``n`` positions of an mlx-lm KV cache.

Why not ``mlx_lm.models.cache.trim_prompt_cache``: it does nothing at all as soon as one layer
reports ``is_trimmable() == False``, which every ``RotatingKVCache`` does once its sliding window
has wrapped. And ``RotatingKVCache.trim`` only moves counters: after a many-row update the stale
rows stay in the buffer, and the next one-row update (which keeps the last ``max_size`` rows)
attends to them. Both silently break losslessness on Gemma-4.

What we do instead, per cache kind:

- ``KVCache`` / ``QuantizedKVCache``: rows live at ``[0, offset)`` and the next update writes at
  ``offset``, so moving ``offset`` back is exact.
- ``RotatingKVCache``: put the buffer in temporal order, slice the newest ``n`` rows off, and set
  ``_idx`` to the new length. A many-row update keeps ``max_size - 1`` old rows plus the new ones,
  so after slicing, the buffer still holds every row the next query may attend to, whether the
  next update is one row (in place) or many (concatenate).
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import (
    CacheList,
    ConcatenateKVCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
)


def rollback(caches: list, n: int) -> None:
    """Forget the newest ``n`` positions of every cache in ``caches``, in place."""
    if n < 0:
        raise ValueError(f"cannot roll back a negative number of positions ({n})")
    if n == 0:
        return
    for c in caches:
        _rollback_one(c, n)


def _rollback_one(c, n: int) -> None:
    if isinstance(c, RotatingKVCache):
        _rollback_rotating(c, n)
    elif isinstance(c, (KVCache, QuantizedKVCache)):
        if n > c.offset:
            raise ValueError(f"cannot roll back {n} positions of a cache holding {c.offset}")
        c.offset -= n
    elif isinstance(c, ConcatenateKVCache):
        c.keys = c.keys[..., : c.offset - n, :]
        c.values = c.values[..., : c.offset - n, :]
        c.offset -= n
    elif isinstance(c, CacheList):
        for sub in c.caches:
            _rollback_one(sub, n)
    else:
        raise TypeError(f"no exact rollback for cache type {type(c).__name__}")


def _rollback_rotating(c: RotatingKVCache, n: int) -> None:
    keys = c._temporal_order(c.keys)
    values = c._temporal_order(c.values)
    length = keys.shape[2]
    # Rows older than the window may have been dropped, but the n newest must all be present,
    # and after removing them the buffer must still cover the window (or everything seen).
    kept = length - n
    if n > c.offset or kept < min(c.offset - n, c.max_size - 1):
        raise ValueError(
            f"rotating cache cannot roll back {n} positions: it holds {length} rows at "
            f"offset {c.offset} (was the last update a one-row step after the window wrapped?)"
        )
    keys, values = keys[..., :kept, :], values[..., :kept, :]
    c.offset -= n
    if c.offset > kept and kept < c.max_size:
        # The window has wrapped and we removed a whole update, leaving max_size - 1 rows.
        # A one-row update would then try to grow the buffer by (max_size - offset) < 0 rows;
        # one zero row in front restores a full ring. The next one-row update overwrites it
        # before anything attends to it, and a many-row update trims it as the oldest row.
        pad, k = c.max_size - kept, c.keep
        keys = mx.concatenate([keys[..., :k, :], mx.zeros_like(keys[..., :pad, :]), keys[..., k:, :]], axis=2)
        values = mx.concatenate([values[..., :k, :], mx.zeros_like(values[..., :pad, :]), values[..., k:, :]], axis=2)
        kept += pad
    c.keys, c.values, c._idx = keys, values, kept
