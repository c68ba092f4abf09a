"""The rejection inspector (issue #25): for every verified draft, what the target thought (its top
tokens with probabilities, the drafted token's rank), with the invariants greedy decoding
implies: an accepted draft has rank 0 and is the target's top token; at the first rejected
position the target's top token is the correction the round committed and the draft's rank is at
least 1, and a draft that lost only a numerical tie (bf16: equal log-probabilities, the lower id
wins as in mlx-lm) is reported as a tie."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest
from tiny import tiny_target, write_tiny_target_dir

from dspark import DflashConfig, DflashDrafter, GenerationConfig, generate
from dspark.cli import main

PROMPT = [5, 9, 11, 3, 7, 21, 2]


def check_greedy_invariants(events) -> int:
    """Every round's inspection against its outcome; returns how many ties were seen."""
    ties = 0
    for e in events:
        if e.plain_step:
            assert e.target_top is None or e.target_top == ()
            continue
        w, a = e.verify_width, e.accepted
        assert len(e.target_top) == len(e.draft_rank) == w
        for row in e.target_top:
            probs = [p for _, p in row]
            assert len(row) == 5 and probs == sorted(probs, reverse=True) and 0 <= sum(probs) <= 1 + 1e-5
        for k in range(a):
            assert e.draft_rank[k] == 0 and e.target_top[k][0][0] == e.drafted[k]
        if a < w:
            correction = e.committed[a].id
            assert e.target_top[a][0][0] == correction and e.draft_rank[a] >= 1 and e.drafted[a] != correction
            ties += e.draft_tie[a]  # its log-probability equal to the correction's: lost to the lower id
        assert not any(e.draft_tie[:a])
    return ties


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_the_target_view_of_every_verified_draft_holds_greedy_invariants(dtype):
    target = tiny_target(seed=0, scale=0.15, vocab=96, window=16)
    target.model.set_dtype(dtype)
    drafter = DflashDrafter.init(target, DflashConfig(block_size=5, num_layers=1, markov_rank=16), seed=1)
    cfg = GenerationConfig(max_tokens=120, stop_at_eos=False)
    events = list(generate(target, drafter, PROMPT, cfg, inspect=True))[:-1]
    assert sum(e.verify_width for e in events) > 100
    ties = check_greedy_invariants(events)
    if dtype == mx.float32:
        assert ties == 0
    plain = list(generate(target, drafter, PROMPT, cfg))[:-1]
    assert all(e.target_top is None and e.draft_rank is None for e in plain)  # off unless asked for
    assert [e.accepted for e in plain] == [e.accepted for e in events]  # inspecting changes nothing


def test_sampled_rounds_carry_the_sampling_distribution_and_ranks():
    target = tiny_target(seed=0, scale=0.15, vocab=96, window=16)
    drafter = DflashDrafter.init(target, DflashConfig(block_size=4, num_layers=1, markov_rank=16), seed=1)
    cfg = GenerationConfig(max_tokens=40, stop_at_eos=False, temperature=0.8, top_k=20)
    events = list(generate(target, drafter, PROMPT, cfg, inspect=True))[:-1]
    for e in events:
        for row, rank, _drafted in zip(e.target_top, e.draft_rank, e.drafted):
            assert 0 <= rank < 96 and abs(sum(p for _, p in row) - 1) < 1.01
            assert all(p == 0 for t, p in row[-1:]) or len({t for t, _ in row}) == 5


def test_dspark_generate_inspect_json_lists_every_round(tmp_path, capsys):
    t = write_tiny_target_dir(tmp_path / "t", window=16)
    assert (
        main(
            [
                "init",
                "--target",
                str(t),
                "--out",
                str(tmp_path / "d"),
                "--block-size",
                "4",
                "--layers",
                "1",
                "--markov-rank",
                "16",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "generate",
                "--target",
                str(t),
                "--drafter",
                str(tmp_path / "d"),
                "--prompt",
                "def add(a, b):",
                "--max-tokens",
                "24",
                "--inspect",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    rounds = out["rounds"]
    assert rounds and sum(len(r["tokens"]) for r in rounds) == 24
    for r in rounds:
        assert set(r) >= {"drafted", "accepted", "tokens", "target_top", "draft_rank", "draft_probs", "tie"}
        assert len(r["target_top"]) == len(r["draft_rank"]) == len(r["draft_probs"]) <= len(r["drafted"])
        assert all(len(row) >= 5 and all(len(pair) == 2 for pair in row) for row in r["target_top"])
        assert all(rank == 0 for rank in r["draft_rank"][: r["accepted"]])


@pytest.mark.parametrize("name", ["dspark", "dflash"])
def test_the_greedy_invariants_hold_on_the_demo_pair(name):
    """The bundled demo target and drafter on a held-out demo prompt: a trained pair, so rounds
    both accept and reject, with the auto policy's plain steps among them."""
    from dspark import load_drafter, load_target, prompts, resources

    target = load_target(resources.demo_model("target"))
    drafter = load_drafter(resources.demo_model(name), target)
    prompt = prompts.get("demo").prompts[0]
    events = list(generate(target, drafter, prompt, GenerationConfig(max_tokens=96), inspect=True))[:-1]
    verified = [e for e in events if not e.plain_step]
    assert any(e.accepted == e.verify_width for e in verified) and any(e.accepted < e.verify_width for e in verified)
    check_greedy_invariants(events)
