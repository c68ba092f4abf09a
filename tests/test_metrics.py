"""The metric definitions, on counts small enough to check by hand."""

import pytest

from dspark import metrics

ACCEPTED = [0, 2, 3, 1]  # accepted drafts per round
WIDTHS = [3, 3, 3, 1]  # verified drafts per round


def test_tau_counts_the_target_token():
    assert metrics.tau([a + 1 for a in ACCEPTED]) == (1 + 3 + 4 + 2) / 4
    assert metrics.tau([]) == 0.0


def test_acceptance_rate():
    assert metrics.acceptance_rate(ACCEPTED, WIDTHS) == 6 / 10
    assert metrics.acceptance_rate([0], [0]) == 0.0


def test_per_position_acceptance_denominator_is_rounds_that_verified_k():
    # k=1: 4 rounds verified it, 3 accepted it; k=2: 3 verified, 2 got drafts 1..2; k=3: 3, 1.
    assert metrics.per_position_acceptance(ACCEPTED, WIDTHS) == [3 / 4, 2 / 3, 1 / 3]


def test_histogram_and_speedup():
    assert metrics.accepted_length_histogram(ACCEPTED) == [1, 1, 1, 1]
    assert metrics.accepted_length_histogram(ACCEPTED, max_len=2) == [1, 1, 2]
    assert metrics.speedup(30.0, 10.0) == 3.0 and metrics.speedup(1.0, 0.0) == 0.0


def test_repetition_share_finds_short_cycles_only():
    from dspark.metrics import repetition_share

    assert repetition_share([7, 8] * 10) == 1.0
    assert repetition_share(list(range(40))) == 0.0
    assert repetition_share(list(range(20)) + [5] * 10) == pytest.approx(10 / 30)
    assert repetition_share(list(range(30)) * 3) == 0.0  # a 30-token block repeated: plausible code, not a cycle


class _Round:
    """What the decode-rate metrics read of a RoundEvent: cumulative tokens and tokens/sec."""

    def __init__(self, tokens: int, seconds: float):
        self.tokens_generated, self.tokens_per_sec = tokens, tokens / seconds


def test_comparable_speedup_measures_both_runs_over_the_shorter_output():
    # Sampled runs: the speculative one met EOS after 2 tokens (0.1 s); plain decoding made 256,
    # its first 2 in 0.2 s and then 100 tok/s. Whole runs would compare 20 tok/s with ~98.
    spec = [_Round(2, 0.1)]
    base = [_Round(1, 0.1), _Round(2, 0.2)] + [_Round(k, 0.2 + (k - 2) / 100) for k in range(3, 257)]
    s, n = metrics.comparable_speedup([(spec, base)])
    assert n == 2 and s == (2 / 0.1) / (2 / 0.2)
    # a round that overshoots n is measured to its own end: 5 tokens in 0.1 s against 2 in 0.1 s
    s, n = metrics.comparable_speedup([([_Round(5, 0.1)], [_Round(1, 0.05), _Round(2, 0.1)])])
    assert n == 2 and s == (5 / 0.1) / (2 / 0.1)
    # pooled over prompts: tokens / seconds on each side
    s, n = metrics.comparable_speedup([([_Round(4, 0.1)], [_Round(4, 0.2)]), ([_Round(4, 0.3)], [_Round(4, 0.2)])])
    assert n == 8 and s == (8 / 0.4) / (8 / 0.4)
    assert metrics.comparable_speedup([([], [_Round(1, 0.1)])]) == (0.0, 0)


def test_rate_curve_is_a_moving_window_of_committed_tokens():
    rounds = [_Round(4 * (i + 1), 0.1 * (i + 1)) for i in range(10)]  # 40 tok/s throughout
    xs, ys = metrics.rate_curve(rounds, window=8, min_tokens=8)
    assert xs[0] == rounds[1].tokens_generated / rounds[1].tokens_per_sec  # from 8 tokens on
    assert len(xs) == 9 and all(abs(y - 40) < 1e-9 for y in ys)
    # a slow first round does not drag the later points down, unlike a cumulative mean
    slow = [_Round(4, 1.0)] + [_Round(4 * (i + 1), 1.0 + 0.1 * i) for i in range(1, 10)]
    _, ys = metrics.rate_curve(slow, window=8, min_tokens=8)
    assert abs(ys[-1] - 40) < 1e-9 and ys[-1] > slow[-1].tokens_per_sec
    xs, _ = metrics.rate_curve(rounds[:1], window=8, min_tokens=8, offset=5.0)
    assert xs == [5.1]  # a run shorter than min_tokens still shows its one point, drawn at the offset


def test_acceptance_by_context_length_buckets_the_rounds_that_drafted():
    from types import SimpleNamespace as R

    from dspark.metrics import by_context

    def r(position, accepted, width=4, plain=False):
        return R(
            position=position, accepted=accepted, verify_width=width, committed=[0] * (accepted + 1), plain_step=plain
        )

    rounds = [r(10, 3), r(100, 0), r(700, 4), r(700, 1, plain=True), r(5000, 0, width=0), r(90000, 2)]
    out = by_context(rounds, edges=(128, 1024, 8192))
    assert [(b["from"], b["to"], b["rounds"]) for b in out] == [
        (0, 128, 2),
        (129, 1024, 1),
        (1025, 8192, 1),
        (8193, None, 1),
    ]
    assert out[0]["tau"] == 2.5 and out[0]["first_acceptance"] == 0.5
    assert out[2]["first_acceptance"] is None  # no round there verified a draft
    assert out[0]["verified"] == 8 and out[0]["acceptance_rate"] == 3 / 8  # accepted drafts / verified drafts
    assert out[2]["verified"] == 0 and out[2]["acceptance_rate"] is None


def test_context_edges_are_equal_round_steps_covering_the_positions():
    from dspark.metrics import context_edges

    assert context_edges(290) == (50, 100, 150, 200, 250, 300)
    assert context_edges(3001) == (500, 1000, 1500, 2000, 2500, 3000, 3500)
    assert context_edges(8) == tuple(range(1, 9)) and context_edges(0) == (1,)
    for n in (1, 9, 77, 1234, 99_999):
        edges = context_edges(n)
        assert len(edges) <= 8 and edges[-1] >= n and len({b - a for a, b in zip((0,) + edges, edges)}) == 1


def test_rejections_count_the_first_rejected_draft_against_the_correction():
    from types import SimpleNamespace as R

    from dspark.metrics import rejections

    def r(drafted, accepted, width, committed, plain=False):
        return R(
            drafted=drafted,
            accepted=accepted,
            verify_width=width,
            plain_step=plain,
            committed=[R(id=t) for t in committed],
        )

    rounds = [
        r((5, 6, 7), 1, 3, (5, 9)),  # draft 2 (6) rejected, the target committed 9
        r((6, 6), 0, 2, (9,)),  # the same pair again
        r((3, 4), 0, 2, (8,)),  # another pair
        r((1, 2), 2, 2, (1, 2, 3)),  # everything accepted: no rejection
        r((1, 2), 0, 0, (4,)),  # nothing verified: no rejection
        r((), 0, 0, (7,), plain=True),
        r((1, 2, 3), 1, 3, (1,)),
    ]  # draft 1 was EOS: no correction committed, not counted
    out = rejections(rounds)
    assert out == [
        {"drafted": 6, "target": 9, "count": 2, "share": 2 / 3},
        {"drafted": 3, "target": 8, "count": 1, "share": 1 / 3},
    ]
    assert rejections(rounds, top=1) == out[:1] and rejections([]) == []


def test_a_pause_of_the_machine_is_left_out_of_comparable_rates():
    """Plain decoding stalls 5 s at its 3rd token (100 tok/s otherwise): the pause is found, its
    time beyond the run's pace left out, so the rates compare the two loops, not the stall. A
    slow round of the run's own work (a few steps' time) is no pause."""
    base = [_Round(k, k / 100 + (5.0 if k >= 3 else 0.0)) for k in range(1, 101)]
    ((i, seconds),) = metrics.pauses(base)
    assert i == 2 and seconds == pytest.approx(5.0)
    spec = [_Round(4 * k, 4 * k / 200) for k in range(1, 26)]  # 200 tok/s
    s, n = metrics.comparable_speedup([(spec, base)])
    assert n == 100 and s == pytest.approx(2.0)
    slow = [_Round(k, k / 100 + (0.1 if k >= 3 else 0.0)) for k in range(1, 101)]  # one step of 110 ms
    assert metrics.pauses(slow) == [] and metrics.pauses(base[:2]) == []
