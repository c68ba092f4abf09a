"""Greedy speculative output equals mlx-lm's plain greedy decoding, token for token, on tiny
random Gemma-4 targets whose sliding window wraps several times (float32)."""

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step
from oracle import OracleDrafter
from same import assert_same_greedy
from tiny import tiny_target

from dspark import DflashConfig, DflashDrafter, GenerationConfig, generate, run_to_summary

TARGETS = {
    "sliding16": dict(window=16),
    "sliding24-kvshared-perlayer": dict(window=24, shared=2, per_layer=8),
    "sliding32-kvshared": dict(window=32, shared=3, layers=7),
}
PROMPT = [5, 9, 11, 3, 7, 21, 2]


def plain_greedy(target, prompt, n):
    return [tok for tok, _ in generate_step(mx.array(prompt), target.model, max_tokens=n)]


@pytest.fixture(scope="module", params=list(TARGETS))
def case(request):
    kw = TARGETS[request.param]
    target = tiny_target(seed=0, scale=0.15, vocab=96, **kw)
    n = 5 * kw["window"]  # at least four windows of output
    return target, n, plain_greedy(target, PROMPT, n)


def spec(target, drafter, n, **kw):
    cfg = GenerationConfig(max_tokens=n, stop_at_eos=False, **{"policy": "fixed", **kw})
    return run_to_summary(generate(target, drafter, PROMPT, cfg))


def test_reference_is_not_degenerate(case):
    target, n, ref = case
    assert len(ref) == n and len(set(ref)) >= 8


@pytest.mark.parametrize("scored", [None, "full", 8])
def test_random_drafter_matches_plain_greedy(case, scored, monkeypatch):
    """The Markov loop reads a table of biases (small heads, None), scores every id ("full"),
    or only 8 candidates a position (8, the large-vocabulary path)."""
    import dspark.markov

    if scored == "full":
        monkeypatch.setattr(dspark.markov, "MARKOV_TABLE_BYTES", 0)
    if scored == 8:
        monkeypatch.setattr(dspark.markov, "MARKOV_SCORED", scored)
        monkeypatch.setattr(dspark.markov, "MARKOV_FULL_WEIGHTS", 0)
        monkeypatch.setattr(dspark.markov, "MARKOV_TABLE_BYTES", 0)
    target, n, ref = case
    drafter = DflashDrafter.init(target, DflashConfig(block_size=5, num_layers=1, markov_rank=16), seed=1)
    if scored == 8:  # a Markov head that moves logits, so the candidates matter
        w2 = drafter.net.markov_head.markov_w2
        w2.weight = mx.random.normal(w2.weight.shape, key=mx.random.key(3)) * 2.0
    s = spec(target, drafter, n)
    assert_same_greedy(target, PROMPT, s.tokens, ref)
    assert s.rounds > n // 3  # mostly rejections


@pytest.mark.parametrize("seed", [0, 1])
def test_oracle_drafter_matches_plain_greedy(case, seed):
    target, n, ref = case
    oracle = OracleDrafter(PROMPT + ref, target.dims.vocab_size, block_size=6, corrupt=0.25, seed=seed)
    s = spec(target, oracle, n)
    assert_same_greedy(target, PROMPT, s.tokens, ref)
    assert 0 in s.verify_widths  # rounds of width 1: the anchor alone
    assert max(s.accepted_lengths) == 6  # long accepts
    assert any(0 < a < w for a, w in zip(s.accepted_lengths, s.verify_widths))  # mixed rejections


def test_confidence_policy_varies_width_and_stays_exact(case):
    target, n, ref = case
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=2)
    s = spec(target, drafter, n, policy="threshold:0.2")
    assert_same_greedy(target, PROMPT, s.tokens, ref)
    assert len(set(s.verify_widths)) > 1


def test_max_tokens_truncates_exactly(case):
    target, n, ref = case
    oracle = OracleDrafter(PROMPT + ref, target.dims.vocab_size, corrupt=0.0)
    for m in (1, 2, 7):
        assert_same_greedy(target, PROMPT, spec(target, oracle, m).tokens, ref[:m])


def test_without_display_the_output_is_the_same_and_nothing_is_shown(case):
    """``display=False`` (the benchmark's and the CLI's runs) skips the token probabilities and
    changes nothing else: the same tokens, rounds and widths."""
    import math

    target, n, ref = case
    oracle = OracleDrafter(PROMPT + ref, target.dims.vocab_size, block_size=6, corrupt=0.25, seed=1)
    cfg = GenerationConfig(policy="fixed", max_tokens=n, stop_at_eos=False)
    events = list(generate(target, oracle, PROMPT, cfg, display=False))
    s = events[-1]
    assert_same_greedy(target, PROMPT, s.tokens, ref)
    assert s.token_logprobs == ()
    shown = run_to_summary(generate(target, oracle, PROMPT, cfg))
    assert s.accepted_lengths == shown.accepted_lengths and s.verify_widths == shown.verify_widths
    assert all(math.isnan(p) for e in events[:-1] for p in e.draft_probs)
    assert all(math.isnan(t.target_prob) for e in events[:-1] for t in e.committed)
    assert len(shown.token_logprobs) == len(ref)


def test_without_display_the_confidence_head_runs_only_for_a_policy_that_reads_it(case):
    """A fixed width reads no confidences: without a screen they are not computed (None in the
    events), and the output, rounds and widths stay those of a displayed run; a threshold
    policy reads them, so its rounds still carry them."""
    target, n, ref = case
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=2)
    cfg = GenerationConfig(policy="fixed", max_tokens=n, stop_at_eos=False)
    hidden = list(generate(target, drafter, PROMPT, cfg, display=False))
    shown = list(generate(target, drafter, PROMPT, cfg))
    assert list(hidden[-1].tokens) == list(shown[-1].tokens)  # the same kernels: no room for a tie
    assert_same_greedy(target, PROMPT, hidden[-1].tokens, ref)
    assert hidden[-1].verify_widths == shown[-1].verify_widths
    assert all(e.confidences is None and e.confidence_logits is None for e in hidden[:-1])
    assert all(len(e.confidences) == 4 for e in shown[:-1])
    cfg = GenerationConfig(max_tokens=n, stop_at_eos=False, policy="threshold:0.3")
    read = list(generate(target, drafter, PROMPT, cfg, display=False))
    assert_same_greedy(target, PROMPT, read[-1].tokens, ref)
    assert all(len(e.confidences) == 4 for e in read[:-1])


def test_a_difference_from_plain_decoding_passes_only_on_a_gpu_and_only_as_a_tie(case, monkeypatch):
    """The helper every engine test uses (tests/same.py) fails on a real difference: always on the
    CPU, and on a GPU unless the target's own evaluations find a numerical tie."""
    import same

    target, n, ref = case
    wrong = list(ref)
    wrong[10] = (wrong[10] + 1) % target.dims.vocab_size
    with pytest.raises(AssertionError, match="on the CPU"):
        same.assert_same_greedy(target, PROMPT, wrong, ref)
    monkeypatch.setattr(same, "on_gpu", lambda: True)
    with pytest.raises(AssertionError, match="a mismatch, not a tie"):
        same.assert_same_greedy(target, PROMPT, wrong, ref)
    same.assert_same_greedy(target, PROMPT, ref, ref)


def test_each_round_says_where_in_the_sequence_its_anchor_is(case):
    """RoundEvent.position: the tokens before the anchor, prompt and output (what acceptance by
    context length buckets by); plain decoding's steps say it too."""
    from dspark import generate_plain

    target, n, ref = case
    oracle = OracleDrafter(PROMPT + ref, target.dims.vocab_size, block_size=6, corrupt=0.3, seed=1)
    cfg = GenerationConfig(policy="fixed", max_tokens=40, stop_at_eos=False)
    for events in (list(generate(target, oracle, PROMPT, cfg))[:-1], list(generate_plain(target, PROMPT, cfg))[:-1]):
        expected, pos = [], len(PROMPT) - 1
        for e in events:
            expected.append(pos)
            pos += len(e.committed)
        assert [e.position for e in events] == expected
