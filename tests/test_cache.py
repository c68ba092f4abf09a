"""``dspark.cache.rollback``, specified against attention itself.

The specification: after any sequence of updates and rollbacks, the next update of width w
(queries at positions p..p+w-1) must attend exactly as if the cache had only ever seen the
rows that were kept, i.e. each query at position t sees the kept keys at positions
[t - window + 1, t] (a window of ``max_size`` for sliding caches, everything otherwise).
This is checked for every cache kind, before and after a sliding window wraps, with one-row
and many-row updates in any order, against a plain-numpy attention over the kept history.
"""

import random

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.base import create_attention_mask, scaled_dot_product_attention
from mlx_lm.models.cache import CacheList, ConcatenateKVCache, KVCache, QuantizedKVCache, RotatingKVCache

from dspark.cache import rollback

D, WINDOW = 64, 8


def rows(start: int, n: int, seed: int) -> tuple[mx.array, mx.array]:
    """Keys/values [1, 1, n, D] for positions start..start+n-1 (distinct per position and seed)."""
    rng = np.random.default_rng([start, n, seed])
    k = rng.normal(size=(1, 1, n, D)).astype(np.float32)
    v = rng.normal(size=(1, 1, n, D)).astype(np.float32)
    return mx.array(k), mx.array(v)


def reference(keys: list, values: list, q: np.ndarray, first: int, window: int | None) -> np.ndarray:
    """Softmax attention of queries at positions first.. over the kept history (numpy)."""
    K, V = np.stack(keys), np.stack(values)
    out = []
    for i, qi in enumerate(q):
        t = first + i
        lo = 0 if window is None else max(0, t - window + 1)
        s = K[lo : t + 1] @ qi * D**-0.5
        w = np.exp(s - s.max())
        out.append((w / w.sum()) @ V[lo : t + 1])
    return np.stack(out)


def probe(cache, history: tuple[list, list], width: int, seed: int, window: int | None, atol: float):
    """Feed ``width`` new rows as a model layer would and compare its attention with the spec."""
    keys, values = history
    first = len(keys)
    k, v = rows(first, width, seed)
    q_np = np.random.default_rng(seed + 7).normal(size=(1, 1, width, D)).astype(np.float32)
    q = mx.array(q_np)  # (mlx-lm's quantized attention scales its queries in place)
    mask = create_attention_mask(mx.zeros((1, width, D)), cache, window_size=window)
    ck, cv = cache.update_and_fetch(k, v)
    if isinstance(mask, str):  # "causal": mlx-lm hands SDPA the string
        mask = "causal"
    got = np.array(scaled_dot_product_attention(q, ck, cv, cache, scale=D**-0.5, mask=mask))[0, 0]
    keys.extend(np.array(k)[0, 0])
    values.extend(np.array(v)[0, 0])
    want = reference(keys, values, q_np[0, 0], first, window)
    np.testing.assert_allclose(got, want, atol=atol)


def scenario(make, window: int | None, steps: int, seed: int, atol: float = 1e-5):
    """Random updates (widths 1..6) and rollbacks (up to the last update's width - 1, as the
    engine does: the anchor row always stays), probing after each rollback."""
    rng = random.Random(seed)
    cache, history = make(), ([], [])
    for step in range(steps):
        width = rng.choice([1, 1, 2, 3, 5, 6])
        probe(cache, history, width, seed * 1000 + step, window, atol)
        n = rng.randint(0, width - 1)
        rollback([cache], n)
        if n:
            del history[0][-n:], history[1][-n:]
    return cache, history


@pytest.mark.parametrize("seed", range(4))
def test_kv_cache(seed):
    scenario(KVCache, None, 40, seed)


@pytest.mark.parametrize("seed", range(6))
def test_rotating_cache_before_and_after_the_window_wraps(seed):
    cache, history = scenario(lambda: RotatingKVCache(max_size=WINDOW, keep=0), WINDOW, 60, seed)
    assert len(history[0]) > 4 * WINDOW  # wrapped several times


def test_rotating_cache_one_row_steps_after_a_rollback_past_the_wrap():
    """The case that breaks a counters-only trim: wrap, verify 6 rows, reject 5, then decode
    single rows (the in-place path keeps the last max_size rows, stale ones included)."""
    cache, history = RotatingKVCache(max_size=WINDOW, keep=0), ([], [])
    for w in [5, 6]:
        probe(cache, history, w, w, WINDOW, 1e-5)
    rollback([cache], 5)
    del history[0][-5:], history[1][-5:]
    for s in range(12):
        probe(cache, history, 1, 100 + s, WINDOW, 1e-5)


def test_quantized_cache():
    scenario(lambda: QuantizedKVCache(group_size=32, bits=8), None, 30, 0, atol=0.05)


def test_concatenate_cache():
    scenario(ConcatenateKVCache, None, 30, 1)


def test_cache_list_rolls_back_every_member():
    c = CacheList(KVCache(), RotatingKVCache(max_size=WINDOW, keep=0))
    for i in range(3):
        k, v = rows(4 * i, 4, i)
        for sub in c.caches:
            sub.update_and_fetch(k, v)
    rollback([c], 3)
    assert [sub.offset for sub in c.caches] == [9, 9]


def test_rollback_refuses_what_it_cannot_do_exactly():
    c = KVCache()
    c.update_and_fetch(*rows(0, 3, 0))
    with pytest.raises(ValueError, match="cannot roll back 4"):
        rollback([c], 4)
    with pytest.raises(ValueError, match="negative"):
        rollback([c], -1)
    r = RotatingKVCache(max_size=WINDOW, keep=0)
    for i in range(2 * WINDOW):
        r.update_and_fetch(*rows(i, 1, i))
    with pytest.raises(ValueError, match="one-row step"):
        rollback([r], 2)  # a one-row update after the wrap overwrote the row it would need
    with pytest.raises(TypeError, match="no exact rollback"):
        rollback([object()], 1)
