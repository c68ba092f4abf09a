"""Verify-width policies: the pure rules, the measured costs and their cache, and every policy
staying exactly lossless (greedy) on targets whose sliding window wraps."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step

from dspark import DflashConfig, DflashDrafter, GenerationConfig, generate, run_to_summary
from dspark import costs as costs_mod
from dspark.costs import Costs
from dspark.errors import DsparkError
from dspark.policy import RunningAcceptance, auto_width, parse, survival, threshold_width
from oracle import OracleDrafter
from same import assert_same_greedy
from tiny import tiny_target

PROMPT = [5, 9, 11, 3, 7, 21, 2]
#: A machine where verifying more rows costs more and more: auto must trade width for time.
STEEP = Costs(verify_ms=(2.0, 2.4, 3.0, 4.0, 5.5, 7.5, 10.0), draft_ms=2.0, step_ms=1.5)


def test_parse_round_trips():
    for text in ("fixed", "fixed:0", "fixed:3", "threshold:0.25", "auto"):
        assert str(parse(text)) == text


def test_auto_admits_while_the_rate_rises_and_stops_at_the_first_drop():
    # flat costs: every likely draft is worth verifying
    assert auto_width([0.9, 0.8, 0.7], 1.0, [1.0, 1.0, 1.0, 1.0], 3) == 3
    # steep costs: nothing is (the round verifies the anchor alone)
    assert auto_width([0.5, 0.2, 0.1], 1.0, [1.0, 5.0, 9.0, 13.0], 3) == 0
    # rate 1/2, then 1.9/2.5 = 0.76, then 2.0/3 = 0.67 (a drop): stop at 1 even though
    # a later position would be cheap again; looking past the drop would peek at later drafts
    assert auto_width([0.9, 0.1, 0.1], 1.0, [1.0, 1.5, 2.0, 2.05], 3) == 1
    assert auto_width([0.9, 0.9, 0.9], 1.0, [1.0, 1.0, 1.0, 1.0], 2) == 2  # the budget caps it


def test_threshold_keeps_the_prefix_whose_survival_stays_above():
    assert survival([0.9, 0.5, 1.0]) == pytest.approx([0.9, 0.45, 0.45])
    assert threshold_width([0.9, 0.5, 1.0], 0.5, 3) == 1
    assert threshold_width([0.9, 0.5, 1.0], 0.4, 3) == 3
    assert threshold_width([0.9, 0.5, 1.0], 0.4, 2) == 2


def test_running_acceptance_learns_from_the_positions_that_were_tried():
    r = RunningAcceptance(3)
    for _ in range(60):
        r.observe(width=3, accepted=1)  # position 1 always accepted, position 2 always rejected
    assert r.p[0] > 0.99 and r.p[1] < 0.01 and r.p[2] == pytest.approx(0.9)  # 3 was never tried


def test_costs_are_measured_once_and_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DSPARK_COSTS_DIR", str(tmp_path))
    target = tiny_target(seed=0, scale=0.15, vocab=96, window=16)
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=1)
    said = []
    first = costs_mod.load_or_measure(target, drafter, 4, say=said.append)
    assert len(first.verify_ms) == 5 and first.draft_ms > 0 and first.step_ms > 0 and len(said) == 1
    again = costs_mod.load_or_measure(target, drafter, 4, say=said.append)
    assert again == first and len(said) == 1  # from the cache, not measured again
    (file,) = tmp_path.glob("*.json")
    assert json.loads(file.read_text())["verify_ms"] == list(first.verify_ms)
    file.write_text("{damaged")
    assert costs_mod.load_or_measure(target, drafter, 4, say=said.append).key == first.key and len(said) == 2
    other = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=2, markov_rank=16), seed=1)
    assert costs_mod.key_for(target, other, 4) != first.key  # another drafter shape: other costs


@pytest.mark.parametrize("slow", [1, 2])
def test_the_loop_runs_at_the_thread_count_whole_rounds_are_faster_at(slow, tmp_path, monkeypatch):
    """The draft and the verify share one BLAS thread count, the one whole rounds are timed
    faster at (here rounds are made 3 ms slower at ``slow`` threads; the phases timed alone
    are not, so a choice from them would be a coin toss)."""
    import time

    from dspark import blas, rounds

    monkeypatch.setenv("DSPARK_COSTS_DIR", str(tmp_path))
    now = {"threads": 2}
    monkeypatch.setattr(blas, "default_threads", lambda: 2)
    monkeypatch.setattr(blas, "set_threads", lambda n: now.update(threads=n))
    monkeypatch.setattr(blas, "restore_threads", lambda: now.update(threads=2))
    real_round = rounds.speculative_round

    def round_slower_at_one_count(*a, **k):
        if now["threads"] == slow:
            time.sleep(0.003)
        return real_round(*a, **k)

    monkeypatch.setattr(rounds, "speculative_round", round_slower_at_one_count)
    target = tiny_target(seed=0, scale=0.15, vocab=96, window=16)
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=1)
    c = costs_mod.measure(target, drafter, 4, context=32, repeats=2)
    fast = 3 - slow
    assert c.threads["draft"] == c.threads["verify"] == fast and c.threads["step"] in (1, 2)


TARGETS = {"sliding16": dict(window=16), "sliding24-kvshared-perlayer": dict(window=24, shared=2, per_layer=8)}


@pytest.fixture(scope="module", params=list(TARGETS))
def case(request):
    kw = TARGETS[request.param]
    target = tiny_target(seed=0, scale=0.15, vocab=96, **kw)
    n = 5 * kw["window"]
    return target, n, [tok for tok, _ in generate_step(mx.array(PROMPT), target.model, max_tokens=n)]


POLICIES = ["fixed:2", "threshold:0.05", "auto"]


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_matches_plain_greedy(case, policy):
    target, n, ref = case
    drafter = DflashDrafter.init(target, DflashConfig(block_size=6, num_layers=1, markov_rank=16), seed=2)
    cfg = GenerationConfig(max_tokens=n, stop_at_eos=False, policy=policy)
    s = run_to_summary(generate(target, drafter, PROMPT, cfg, costs=STEEP))
    assert_same_greedy(target, PROMPT, s.tokens, ref)
    if policy == "fixed:2":
        assert set(s.verify_widths) <= {0, 1, 2} and 2 in s.verify_widths
    else:
        assert len(set(s.verify_widths)) > 1  # the policy did choose


def test_auto_without_a_confidence_head_learns_widths_and_stays_exact(case):
    """An oracle drafter (no confidence head) whose later positions are mostly wrong: auto's
    running acceptance must shrink the width, and the output stays plain greedy's."""
    target, n, ref = case
    oracle = OracleDrafter(PROMPT + ref, target.dims.vocab_size, block_size=6, corrupt=0.5, seed=3)
    cfg = GenerationConfig(max_tokens=n, stop_at_eos=False, policy="auto")
    s = run_to_summary(generate(target, oracle, PROMPT, cfg, costs=STEEP))
    assert_same_greedy(target, PROMPT, s.tokens, ref)
    late = s.verify_widths[len(s.verify_widths) // 2:]
    assert max(late) < 6 and len(set(s.verify_widths)) > 1


def test_threshold_without_a_confidence_head_is_one_sentence(case):
    target, n, ref = case
    oracle = OracleDrafter(PROMPT + ref, target.dims.vocab_size, block_size=6, corrupt=0.0)
    cfg = GenerationConfig(max_tokens=8, stop_at_eos=False, policy="threshold:0.5")
    with pytest.raises(DsparkError, match="needs a drafter with a confidence head"):
        run_to_summary(generate(target, oracle, PROMPT, cfg))


def test_measured_verify_costs_are_made_non_decreasing():
    assert costs_mod.monotone([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert costs_mod.monotone([2.0, 1.0, 1.0]) == pytest.approx([4 / 3] * 3)
    assert costs_mod.monotone([1.0, 2.0]) == [1.0, 2.0]


def test_the_costs_command_measures_then_reads_the_cache(tmp_path, monkeypatch, capsys):
    from dspark.cli import main
    from tiny import write_tiny_target_dir

    monkeypatch.setenv("DSPARK_COSTS_DIR", str(tmp_path / "costs"))
    target = write_tiny_target_dir(tmp_path / "target")
    assert main(["init", "--target", str(target), "--out", str(tmp_path / "d"), "--block-size", "3",
                 "--layers", "1"]) == 0
    argv = ["costs", "--target", str(target), "--drafter", str(tmp_path / "d"), "--json"]
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "measuring this machine's" in out.err and len(json.loads(out.out)["verify_ms"]) == 4
    assert main(argv) == 0 and "measuring" not in capsys.readouterr().err
    assert main([*argv, "--remeasure"]) == 0 and "measuring" in capsys.readouterr().err
