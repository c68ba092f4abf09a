import pytest
"""The metric definitions, on counts small enough to check by hand."""

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
