"""Google's Gemma-4 assistant (MTP) drafters (``dspark.formats.assistant``), written in their
published layout (``assistant_checkpoints.py``) for the miniature targets of every published
layout (``miniatures.py``): each loads, generates exactly what plain greedy decoding does past
three sliding windows, keeps the target's distribution when sampling, computes each step what
transformers' own ``Gemma4AssistantForCausalLM`` computes on the same inputs (run in the
reference environment ``.venv-ref``), and is refused in one sentence where it does not fit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import assistant_checkpoints as ac
import miniatures as mini
import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from dspark import GenerationConfig, generate, generate_plain, load_target, lossless, run_to_summary
from dspark.config import SamplingParams
from dspark.costs import Costs
from dspark.errors import DrafterMismatchError, DsparkError
from dspark.events import RoundEvent
from dspark.loading import describe_drafter, load_drafter
from dspark.plain import prefill

ROOT = Path(__file__).resolve().parent.parent
REF = ROOT / ".venv-ref" / "bin" / "python"
PROMPT = [2, 17, 40, 33, 91, 120, 7, 45, 45, 200, 13, 66, 81, 19, 150, 22, 9, 31, 77, 140]
N = 110  # tokens: past three sliding windows of every miniature (16, and 32 for the large ones)

#: layout -> (writer of the target directory, the assistant's options)
LAYOUTS = {
    "e2b-kvshared-perlayer": (lambda d: mini.write_hf(d, "e2b", seed=3), {}),
    "e4b-ordered-embeddings": (lambda d: mini.write_hf(d, "e4b", seed=4), {"ordered": True}),
    "31b-k-eq-v": (lambda d: mini.write_hf(d, "31b", seed=5), {}),
    "26b-a4b-moe": (lambda d: mini.write_hf(d, "26b-a4b", seed=6), {}),
    "12b-unified": (lambda d: mini.write_hf(d, "12b", seed=7), {}),
    "e2b-mlx-community-4bit": (lambda d: mini.write_mlx_community(d, "e2b", 4, seed=3), {"ordered": True}),
}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("assistant")


def pair(root: Path, name: str):
    """(target directory, assistant directory) of a layout, written once per module."""
    t, a = root / name / "target", root / name / "assistant"
    if not a.exists():
        write_target, options = LAYOUTS[name]
        write_target(t)
        ac.write(a, t, **options)
    return t, a


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_greedy_is_plain_decoding_past_three_windows_on_every_layout(root, name):
    """Token for token on a float32 copy of each layout; as published (bf16, 4-bit) the verdict
    of ``dspark.lossless`` (identical, or a first difference at a numerical tie of the target)."""
    t, a = pair(root, name)
    wide = root / name / "target-f32"
    if not wide.exists():
        ac.as_float32(t, wide)
    cfg = GenerationConfig(policy="fixed", max_tokens=N, stop_at_eos=False)
    for path, exact in ((wide, True), (t, False)):
        target = load_target(path)
        drafter = load_drafter(a, target)
        plain = run_to_summary(generate_plain(target, PROMPT, cfg))
        spec = run_to_summary(generate(target, drafter, PROMPT, cfg))
        if exact:
            assert spec.tokens == plain.tokens
            accepted = spec.accepted_lengths
        else:
            v = lossless.compare(target, spec, plain)
            assert v.lossless, v.explain()
    window = target.lm.args.sliding_window
    assert len(PROMPT) + N >= 3 * window
    assert sum(accepted) > 0, "the planted assistant should have drafts accepted"
    assert 0 in accepted, "rounds with a rejection too: the cache rollback is exercised"


def test_describe_names_the_kind_and_the_block_from_generation_config(root):
    _, a = pair(root, "12b-unified")
    d = describe_drafter(a)
    assert d["format"] == "gemma4-assistant" and d["variant"] == "Gemma-4 unified assistant"
    assert d["block_size"] == 4 and d["target"]["hidden_size"] == 64 and d["target"]["vocab_size"] == 512
    assert d["kind"] == "Gemma-4 unified assistant" and d["autoregressive"] and "mask_token_id" not in d
    (a / "generation_config.json").rename(a / "generation_config.off")
    try:
        assert describe_drafter(a)["block_size"] == 20  # transformers' default num_assistant_tokens
    finally:
        (a / "generation_config.off").rename(a / "generation_config.json")


def test_a_second_draft_at_the_same_position_is_the_same(root):
    """Cost timing and auto's shadow drafts propose again without new rows: nothing a draft step
    computed may outlive it."""
    t, a = pair(root, "e2b-kvshared-perlayer")
    target = load_target(t)
    drafter = load_drafter(a, target)
    ids = PROMPT * 2
    cache = target.make_cache()
    session = drafter.start(target, cache=cache)
    rows = prefill(target, cache, ids[:-1], session.tap_layers, step=8)
    sp = SamplingParams()
    first = session.propose(ids[-1], len(ids) - 1, new_rows=rows, history=ids, block_size=5, sampling=sp, key=None)
    again = session.propose(ids[-1], len(ids) - 1, new_rows=None, history=ids, block_size=5, sampling=sp, key=None)
    assert first.tokens.tolist() == again.tokens.tolist()
    assert mx.array_equal(first.logits, again.logits).item()


# --------------------------------------------------------------------------- the owner's classes
def reference(*args) -> dict:
    if os.environ.get("DSPARK_SKIP_REFERENCE"):
        pytest.skip("DSPARK_SKIP_REFERENCE is set")
    if not REF.exists():
        pytest.skip("the reference environment is missing: run `make reference` (make test does)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [str(REF), str(ROOT / "tests" / "reference" / "assistant_ref.py"), *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def step_inputs(target, drafter, ids: list[int], block: int) -> tuple[dict, np.ndarray, list[int]]:
    """What dspark's assistant drafted from at the end of ``ids`` (the prompt prefilled in one
    chunk, so the target's sliding cache holds every row and transformers' mask picks its
    window): the arrays the reference reads, dspark's logits and tokens."""
    cache = target.make_cache()
    session = drafter.start(target, cache=cache)
    rows = prefill(target, cache, ids[:-1], session.tap_layers, step=4096)
    P = len(ids) - 1
    d = session.propose(ids[-1], P, new_rows=rows, history=ids, block_size=block, sampling=SamplingParams(), key=None)
    tokens = d.tokens[0].tolist()
    full, sliding = (cache[i] for i in (session.sources["full_attention"], session.sources["sliding_attention"]))
    arrays = {
        "full_k": full.keys[..., :P, :],
        "full_v": full.values[..., :P, :],
        "sliding_k": sliding._temporal_order(sliding.keys)[..., -P:, :],
        "sliding_v": sliding._temporal_order(sliding.values)[..., -P:, :],
        "emb": target.projection.embed(mx.array([ids[-1], *tokens[:-1]]))[None][0],
        "h0": session.h_last[0],
        "position": mx.array([P]),
    }
    assert arrays["sliding_k"].shape[2] == P, "the one-chunk prefill keeps every sliding row"
    return {k: v.astype(mx.float32) if k != "position" else v for k, v in arrays.items()}, np.array(d.logits[0]), tokens


@pytest.mark.parametrize("name", ["e2b-kvshared-perlayer", "e4b-ordered-embeddings", "12b-unified"])
def test_each_step_is_what_transformers_assistant_computes(root, tmp_path, name):
    """The hard test: on the same inputs (the target's K/V and hidden state, each step's token),
    transformers' ``Gemma4AssistantForCausalLM`` / ``Gemma4UnifiedAssistantForCausalLM`` (float32)
    and dspark's give the same logits within float32 tolerance and the same argmax; before the
    sliding window is full and long after it (where transformers' bidirectional sliding mask,
    |q - k| <= window, reads the last window + 1 rows)."""
    t, _ = pair(root, name)
    a = ac.write(tmp_path / "f32", t, ordered=LAYOUTS[name][1].get("ordered", False), dtype="float32")
    target = load_target(t)
    drafter = load_drafter(a, target)
    window = target.lm.args.sliding_window
    cases, ours = {}, {}
    for label, ids in {"short": PROMPT[:9], "long": (PROMPT * 4)[: 3 * window + 5]}.items():
        arrays, logits, tokens = step_inputs(target, drafter, ids, 6)
        cases.update({f"{label}.{k}": v for k, v in arrays.items()})
        ours[label] = (logits, tokens)
    mx.save_safetensors(str(tmp_path / "inputs.safetensors"), cases)
    theirs = reference("steps", a, tmp_path / "inputs.safetensors")
    for label, (logits, tokens) in ours.items():
        ref = np.array(theirs[label]["logits"])
        assert np.abs(ref - logits).max() < 1e-3, label  # measured: at most 4e-5 on logits up to 21
        assert theirs[label]["argmax"] == tokens, label


def rounds_of(events) -> tuple[list[int], dict[int, tuple[list[int], int]]]:
    """(committed tokens, anchor position -> (drafted, accepted)) of a dspark run's events."""
    tokens, rounds = [], {}
    for ev in events:
        if isinstance(ev, RoundEvent):
            rounds[ev.position] = (list(ev.drafted), ev.accepted)
            tokens += [c.id for c in ev.committed]
    return tokens, rounds


def test_round_for_round_against_transformers_assisted_generation(root, tmp_path):
    """transformers' own assisted generation (``Gemma4ForCausalLM.generate(assistant_model=...,
    do_sample=False)``, the runtime ``SinglePositionMultiTokenCandidateGenerator``) and dspark, on
    the same float32 weights, past three sliding windows: the same output; the same drafts at
    every anchor position both draft from, except after a round with a rejection, where the
    runtime hands the assistant the K/V of the verify sliced to ``input_ids``' length, which keeps
    rejected drafts' rows (the first one at the anchor's position; once the window is full, every
    one of the sliding layer's). With those rows cut off before the runtime reads them, every
    round is the same: that slicing is the whole departure (docs/formats.md)."""
    src, _ = pair(root, "e2b-kvshared-perlayer")
    t = ac.text_only(src, tmp_path / "target")
    a = ac.write(tmp_path / "assistant", t, dtype="float32")
    n = 60
    target = load_target(t)
    ours, mine = rounds_of(
        generate(
            target, load_drafter(a, target), PROMPT, GenerationConfig(policy="fixed", max_tokens=n, stop_at_eos=False)
        )
    )
    after_rejection = {p + acc + 1 for p, (d, acc) in mine.items() if acc < len(d)}
    for mode, differing_allowed in (("generate", True), ("generate-committed", False)):
        theirs = reference(mode, t, a, n, *PROMPT)
        assert theirs["tokens"] == ours[:n], mode
        common = [r for r in theirs["rounds"] if r["position"] in mine]
        assert len(common) >= 15, mode
        differ = [r["position"] for r in common if r["drafted"] != mine[r["position"]][0][: len(r["drafted"])]]
        if differing_allowed:
            assert set(differ) <= after_rejection, (mode, differ)
        else:
            assert differ == [], mode


# --------------------------------------------------------------------------- sampling
def test_sampled_decoding_keeps_the_target_distribution(tmp_path):
    """The statistical test of ``test_sampling`` with an assistant: each step draws from its
    distribution and feeds the draw to the next step; the ratio test keeps the target's marginals."""
    from test_sampling import PROMPT as P
    from test_sampling import VOCAB, exact_marginals, tv_bound
    from tiny import tiny_target

    small = tiny_target(seed=5, scale=1.0, vocab=VOCAB, window=4, layers=3)
    tdir = tmp_path / "tiny"
    tdir.mkdir()
    (tdir / "config.json").write_text(json.dumps(vars(small.lm.args)))
    mx.save_safetensors(str(tdir / "model.safetensors"), dict(tree_flatten(small.lm.parameters())))
    drafter = load_drafter(ac.write(tmp_path / "assistant", tdir, block=3, dtype="float32"), small)
    cfg = GenerationConfig(policy="fixed", max_tokens=3, stop_at_eos=False, temperature=1.0)
    exact = exact_marginals(small, cfg.sampling)
    n, counts, accepted = 1000, np.zeros((3, VOCAB)), 0
    for seed in range(n):
        s = run_to_summary(generate(small, drafter, P, GenerationConfig(**{**cfg.__dict__, "seed": seed})))
        for i, tok in enumerate(s.tokens):
            counts[i, tok] += 1
        accepted += sum(s.accepted_lengths)
    assert accepted > n // 10, "the test needs accepted drafts to exercise the ratio test"
    for i in range(3):
        tv = 0.5 * np.abs(counts[i] / n - exact[i]).sum()
        assert tv <= tv_bound(exact[i], n), f"token {i}: TV {tv:.4f}"


# --------------------------------------------------------------------------- refusals
def _edit(src: Path, dst: Path, **changes) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    text = changes.pop("text_config", {})
    config.update(changes)
    config["text_config"].update(text)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def test_what_does_not_fit_is_refused_in_one_sentence(root, tmp_path):
    t, a = pair(root, "e2b-kvshared-perlayer")
    target = load_target(t)
    other_size = ac.write(tmp_path / "size", t, backbone=96)
    other_vocab = ac.write(tmp_path / "vocab", t, vocab=1024)
    cases = {
        other_size: "made for a Gemma-4 of hidden size 96 (backbone_hidden_size), this target's is 64",
        other_vocab: "the assistant's vocabulary is 1024, this target's is 512",
        _edit(a, tmp_path / "heads", text_config={"head_dim": 48}): "sliding_attention heads are 48 wide",
        _edit(
            a,
            tmp_path / "moe",
            text_config={"enable_moe_block": True, "num_experts": 8, "top_k_experts": 2, "moe_intermediate_size": 64},
        ): "enable_moe_block is True, expected False",
        _edit(a, tmp_path / "kv", text_config={"num_kv_shared_layers": 2}): "num_kv_shared_layers is 2",
        _edit(a, tmp_path / "notext", text_config={}, use_ordered_embeddings=True): "token_ordering is missing",
    }
    for path, message in cases.items():
        with pytest.raises((DsparkError, DrafterMismatchError), match=message.replace("(", r"\(").replace(")", r"\)")):
            load_drafter(path, target)


def test_a_target_without_a_sliding_layer_to_share_is_refused(tmp_path):
    from tiny import tiny_target

    full_only = tiny_target(seed=1, vocab=64, layers=2, sliding_window_pattern=1)
    tdir = tmp_path / "t"
    tdir.mkdir()
    (tdir / "config.json").write_text(json.dumps(vars(full_only.lm.args)))
    mx.save_safetensors(str(tdir / "model.safetensors"), dict(tree_flatten(full_only.lm.parameters())))
    a = ac.write(tmp_path / "a", tdir, dtype="float32")
    with pytest.raises(DrafterMismatchError, match="this target has no sliding_attention layer that keeps its own K/V"):
        load_drafter(a, full_only)


def test_auto_drafts_what_pays_and_its_shadow_drafts_read_committed_rows(root):
    """Under ``auto`` the policy sets how many tokens the assistant drafts; where no round pays it
    decodes plainly, pipelined (the next step's K/V is already in the target's cache when a
    shadow draft is asked for), and the shadow drafts read the committed rows only. Lossless
    throughout, past three windows."""
    t, a = pair(root, "e2b-kvshared-perlayer")
    wide = root / "e2b-kvshared-perlayer" / "target-f32"
    if not wide.exists():
        ac.as_float32(t, wide)
    target = load_target(wide)
    drafter = load_drafter(a, target)
    cfg = GenerationConfig(max_tokens=N, stop_at_eos=False, policy="auto")
    plain = run_to_summary(
        generate_plain(target, PROMPT, GenerationConfig(policy="fixed", max_tokens=N, stop_at_eos=False))
    )
    # a draft step as dear as a verify: no round pays, every stretch is plain with shadow drafts
    dear = Costs(verify_ms=(2.0,) * 5, draft_ms=2.0, step_ms=2.0, draft_steps_ms=(2.0,))
    asked = []
    session_class = type(drafter.start(target, cache=target.make_cache()))
    propose = session_class.propose

    def recorded(self, *args, **kw):
        out = propose(self, *args, **kw)
        asked.append(out.tokens.shape[1])
        return out

    session_class.propose = recorded
    try:
        s = run_to_summary(generate(target, drafter, PROMPT, cfg, costs=dear))
    finally:
        session_class.propose = propose
    assert s.tokens == plain.tokens and s.plain_steps > N // 2 and asked  # shadow drafts were asked for
    cheap = Costs(verify_ms=(2.0, 2.05, 2.1, 2.15, 2.2), draft_ms=0.1, step_ms=2.0, draft_steps_ms=(0.1,))
    s = run_to_summary(generate(target, drafter, PROMPT, cfg, costs=cheap))
    assert s.tokens == plain.tokens and s.rounds > 0
