"""One round and its parts (``dspark.rounds``): the pipelined plain steps as mlx-lm decodes (each
timed by its own forward), and the inspector's view of a verify (its candidates, and the rows
``accept`` read reused)."""

from __future__ import annotations

import mlx.core as mx
import pytest
from tiny import PROMPT, WRAPPING, wrapping_case


@pytest.fixture(scope="module", params=list(WRAPPING))
def case(request):
    return wrapping_case(request.param)


def plain_run(target, cache, taps: list[int], steps: int):
    """``steps`` plain steps from the prompt's last token (its rest in ``cache``), greedy."""
    from dspark.config import SamplingParams
    from dspark.engine import _round_keys
    from dspark.plain import plain_steps

    return plain_steps(
        target,
        cache,
        tap_layers=taps,
        anchor=PROMPT[-1],
        position=len(PROMPT) - 1,
        sampling=SamplingParams(),
        keys=_round_keys(0),
        more=lambda p: p < len(PROMPT) - 1 + steps,
        threads={},
    )


def test_plain_steps_queue_the_next_forward_before_a_token_is_read_and_decode_as_mlx_lm(case):
    """Pipelined as mlx-lm's generate_step: when step i is handed over, the forward of step i + 1
    has been issued already (the host's read of a token overlaps the next forward); the last
    token is not fed (it is the next round's anchor); tokens are plain greedy's and each step's
    tap row is the target's own for that token."""
    target, n, ref = case
    taps = [0, 1]
    calls = []
    real = target.forward

    def counting(*a, **k):
        calls.append(a[0].shape)
        return real(*a, **k)

    cache = target.make_cache()
    target.forward(mx.array([PROMPT[:-1]]), cache, taps, logits=False)
    steps = 12
    target.forward = counting
    try:
        seen, rows = [], []
        for i, v in enumerate(plain_run(target, cache, taps, steps)):
            assert len(calls) == min(i + 2, steps), (i, len(calls))
            assert v.plain_step and v.width == 0 and len(v.tokens) == 1
            seen += v.tokens
            rows.append(v.new_rows)
    finally:
        del target.forward
    assert seen == ref[:steps] and all(shape == (1, 1) for shape in calls)
    fresh = target.make_cache()
    _, want = target.forward(mx.array([PROMPT + ref[: steps - 1]]), fresh, taps, logits=False)
    got = mx.concatenate(rows, axis=1)
    assert mx.allclose(got, want[:, len(PROMPT) - 1 :], atol=1e-5).item()


@pytest.mark.parametrize("steps", [1, 2, 6])
def test_each_plain_step_is_timed_by_its_own_forward(monkeypatch, steps):
    """Where mlx's ``async_eval`` returns only once the forward is computed (this project's CPU),
    a step timed from one read to the next carried the next step's forward: the first of a
    stretch read about twice a step, the last about nothing, and auto's clock misjudged plain
    steps by a probe of two. Every forward here takes 60 ms more: each step must read about that."""
    import time

    from tiny import tiny_target

    import dspark.plain
    from dspark.plain import prefill

    target = tiny_target(seed=0)
    cache = target.make_cache()
    prefill(target, cache, PROMPT[:-1], [1], step=64)
    real = dspark.plain.mx.async_eval

    def computed_at_once(*arrays):  # a forward that is done when async_eval returns
        mx.eval(*arrays)
        time.sleep(0.06)
        return real(*arrays)

    monkeypatch.setattr(dspark.plain.mx, "async_eval", computed_at_once)
    seconds = [v.verify_seconds for v in plain_run(target, cache, [1], steps)]
    assert len(seconds) == steps
    assert all(0.055 < s < 0.1 for s in seconds), seconds


@pytest.mark.parametrize("vocab", [14, 100, 4096, 4100])
def test_the_candidates_are_the_highest_values_of_each_row(vocab):
    """The inspector's candidates (chunk maxima, then a partition of the best chunks) are the
    very ids a partition of the whole row gives, ties apart."""
    from dspark.rounds import candidates

    score = mx.random.normal((7, vocab), key=mx.random.key(vocab))
    got = mx.sort(mx.take_along_axis(score, candidates(score, 13), -1), axis=-1)
    want = mx.sort(score, axis=-1)[:, -13:]
    assert mx.array_equal(got, want)


def test_inspecting_reuses_what_accept_computed_and_gives_the_same_view():
    """The round's VerifyRows (read by accept) and a fresh inspection give the same view."""
    from dspark.config import SamplingParams
    from dspark.rounds import VerifyRows, inspection

    raw = mx.random.normal((6, 96), key=mx.random.key(3)) * 4
    drafted = [3, 7, 11, 2, 90]
    for sp in (SamplingParams(), SamplingParams(temperature=0.7, top_k=20)):
        rows = VerifyRows.of(raw, 30.0, sp)
        mx.eval(rows.logits, rows.lse, *([rows.dist] if rows.dist is not None else []))
        assert inspection(raw[:5], 30.0, drafted, sp, rows=rows) == inspection(raw[:5], 30.0, drafted, sp)
