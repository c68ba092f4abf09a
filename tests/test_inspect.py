"""The rejection inspector (issue #25): for every verified draft, what the target thought (its top
tokens with probabilities, the drafted token's rank), with the invariants greedy decoding
implies: an accepted draft has rank 0 and is the target's top token; at the first rejected
position the target's top token is the correction the round committed and the draft's rank is at
least 1, and a draft that lost only a numerical tie (bf16: equal log-probabilities, the lower id
wins as in mlx-lm) is reported as a tie."""

from __future__ import annotations

import json

import assistant_checkpoints as ac
import dflash2_checkpoints as d2
import drafter_checkpoints as ckpt
import eagle3_checkpoints as e3
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
    cfg = GenerationConfig(policy="fixed", max_tokens=120, stop_at_eos=False)
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
    cfg = GenerationConfig(policy="fixed", max_tokens=40, stop_at_eos=False, temperature=0.8, top_k=20)
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
                "--policy",
                "fixed",  # every token from a round: auto's plain steps have nothing to inspect
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
    events = list(generate(target, drafter, prompt, GenerationConfig(policy="fixed", max_tokens=96), inspect=True))[:-1]
    verified = [e for e in events if not e.plain_step]
    assert any(e.accepted == e.verify_width for e in verified) and any(e.accepted < e.verify_width for e in verified)
    check_greedy_invariants(events)


# --------------------------------------------------------------------------- dspark inspect, every kind
@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    """A drafter of every kind for one tiny target: the Gemma-4 assistant, EAGLE-3, DFlash 2, z-lab DFlash."""
    root = tmp_path_factory.mktemp("kinds")
    model = ckpt.target_model()
    target = ckpt.write_target(root / "target", model)
    table = model.model.embed_tokens.weight
    return {
        "assistant": ac.write(root / "assistant", target),
        "eagle3": e3.write_eagle3(root / "eagle3", table, ckpt.PROMPT * 4, num_target_layers=6, aux_ids=[2, 4, 6]),
        "dflash2": d2.write_dflash2(root / "dflash2"),
        "zlab": ckpt.write_zlab(root / "zlab"),
    }


def inspect_text(path, capsys) -> str:
    capsys.readouterr()
    assert main(["inspect", str(path)]) == 0
    return capsys.readouterr().out


def test_inspect_says_an_autoregressive_drafter_drafts_a_token_a_step(kinds, capsys):
    """No block, mask token or heads for EAGLE-3 and the assistant: how each drafts, what it reads
    of the target, its default tokens a round, its draft vocabulary and the target it needs."""
    e3 = inspect_text(kinds["eagle3"], capsys)
    assert "eagle3 drafter (EAGLE-3)" in e3
    assert "drafts a token a step, with a KV cache of its own" in e3
    assert "5 tokens a round by default; the verify policy sets how many" in e3
    assert "draft vocabulary 48 of the target's 256" in e3 and "after layers [1, 3, 5] (taps)" in e3
    assert "needs a target with hidden size 64, vocabulary 256, at least 6 layers" in e3
    a = inspect_text(kinds["assistant"], capsys)
    assert "gemma4-assistant drafter (Gemma-4 assistant)" in a
    assert "from the target's own K/V cache and its last hidden state" in a
    assert "4 tokens a round by default" in a and "layers 4 (3 sliding, 1 full attention)" in a
    assert "draft vocabulary 256 (the target's)" in a
    assert "hidden size 64, vocabulary 256 (the Gemma-4 size it was made for)" in a
    assert "full attention 32, sliding attention 16" in a  # the target's K/V head widths it reads
    assert "not to zlab: a Gemma-4 assistant drafts a token a step" in a
    for text in (a, e3):
        assert "mask token" not in text.replace("no block, mask token", "")
        assert "slots" not in text and "DFlash-style" not in text and "taps target layers" not in text


def test_an_autoregressive_drafter_is_not_exported_but_served_as_it_is(kinds, tmp_path, capsys):
    """dspark export of an EAGLE-3 head or an assistant: the sentence inspect gives, not an internal
    error (a KeyError on the format), and nothing written."""
    for name, what in (("eagle3", "an EAGLE-3 head"), ("assistant", "a Gemma-4 assistant")):
        capsys.readouterr()
        out = tmp_path / name
        assert main(["export", str(kinds[name]), "--format", "speculators", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"{what} drafts a token a step, which no block format holds" in err
        assert "serve it from its folder as it is" in err and "internal error" not in err
        assert not out.exists()


def test_inspect_keeps_the_block_lines_for_block_drafters(kinds, capsys):
    for name, kind in (("dflash2", "DFlash 2"), ("zlab", "DFlash")):
        text = inspect_text(kinds[name], capsys)
        assert f"drafter ({kind})" in text and "drafts a block in one forward: block size 7" in text
        assert "the checkpoint's block has 8 slots" in text and "mask token 4" in text
        assert "taps target layers [1, 3, 4]" in text and "a token a step" not in text
    info = json.loads(_json(kinds["eagle3"], capsys))
    assert info["kind"] == "EAGLE-3" and info["autoregressive"] and "block_slots" not in info
    assert not json.loads(_json(kinds["dflash2"], capsys))["autoregressive"]


def _json(path, capsys) -> str:
    capsys.readouterr()
    assert main(["inspect", str(path), "--json"]) == 0
    return capsys.readouterr().out
