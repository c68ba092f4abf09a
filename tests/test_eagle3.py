"""EAGLE-3 heads (speculators layout, ``dspark.formats.eagle3``), written synthetically in the
published layout (``eagle3_checkpoints.py``): each loads, drafts a token a step with its own KV
cache, generates losslessly past several sliding windows of the target, keeps the target's
distribution when sampling, computes the logits speculators' own torch model computes for the
same head and taps (``reference/eagle3_ref.py`` in ``.venv-ref``), and drafts what mlx-vlm's
EAGLE-3 loop drafts, round for round (``peers/run_peer.py`` in ``.venv-peers``), where mlx-vlm's
own verifier, and its rollback of a sliding cache, are not lossless and ours is."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import drafter_checkpoints as ckpt
import eagle3_checkpoints as e3
import mlx.core as mx
import numpy as np
import pytest

from dspark import GenerationConfig, generate, generate_plain, load_target, run_to_summary
from dspark import costs as costs_mod
from dspark.config import SamplingParams
from dspark.errors import DrafterMismatchError, DsparkError
from dspark.loading import describe_drafter, load_drafter
from dspark.modeldir import drafter_format

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / ".venv-peers" / "bin" / "python"
REFERENCE = ROOT / ".venv-ref" / "bin" / "python"
N = 120  # tokens: more than seven sliding windows (16) of the target
AUX = [2, 4, 6]  # hidden states 2, 4, 6: the outputs of layers 1, 3 and 5 (the last, before the final norm)

#: the head variants, each lossless and checked against speculators' model
VARIANTS = {
    "llama": {},
    "qwen3-two-sliding-layers": dict(arch="qwen3", layers=2, sliding_window=8),
    "eagle-3.1-norms": dict(norm_output=True, norm_before_fc=True, norm_before_residual=False, focus=0.6),
    "borrowed-embedding-fc-norm-gelu": dict(with_embedding=False, fc_norm=True, hidden_act="gelu_pytorch_tanh"),
}


@pytest.fixture(scope="module")
def model():
    return ckpt.target_model()


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, model):
    root = tmp_path_factory.mktemp("eagle3")
    d = {"target": ckpt.write_target(root / "target", model)}
    target = load_target(d["target"])
    plain = run_to_summary(
        generate_plain(target, ckpt.PROMPT, GenerationConfig(policy="fixed", max_tokens=N, stop_at_eos=False))
    )
    table, frequent = model.model.embed_tokens.weight, list(plain.tokens)
    for name, kw in VARIANTS.items():
        d[name] = e3.write_eagle3(root / name, table, frequent, num_target_layers=6, aux_ids=AUX, **kw)
    # mlx-vlm's convention: llama layers, SiLU, full attention (its port has no sliding window)
    d["peer"] = e3.write_eagle3(root / "peer", table, frequent, num_target_layers=6, aux_ids=AUX)
    # a draft vocabulary of 16 ids, most of them from the first 40 tokens: the target soon leaves it
    d["small_vocab"] = e3.write_eagle3(
        root / "small_vocab", table, frequent[:40], num_target_layers=6, aux_ids=AUX, draft_vocab=16
    )
    # the whole vocabulary (no d2t): mlx-vlm verifies with its fallback verifier
    d["whole_vocab"] = e3.write_eagle3(
        root / "whole_vocab", table, [], num_target_layers=6, aux_ids=AUX, draft_vocab=ckpt.VOCAB, block=4
    )
    return d


@pytest.fixture(scope="module")
def target(dirs):
    return load_target(dirs["target"])


@pytest.fixture(scope="module")
def plain(target):
    return run_to_summary(
        generate_plain(target, ckpt.PROMPT, GenerationConfig(policy="fixed", max_tokens=N, stop_at_eos=False))
    )


def run(target, drafter, prompt, n=N, **kw):
    return run_to_summary(
        generate(
            target, drafter, prompt, GenerationConfig(max_tokens=n, stop_at_eos=False, **{"policy": "fixed", **kw})
        )
    )


def test_the_format_is_recognised_and_described(dirs):
    config = json.loads((dirs["llama"] / "config.json").read_text())
    assert drafter_format(config) == "eagle3"
    info = describe_drafter(dirs["llama"])
    assert info["format"] == "eagle3" and info["variant"] == "EAGLE-3"
    assert info["tap_layers"] == [1, 3, 5] and info["block_size"] == 5 and info["draft_vocab"] == 48


@pytest.mark.parametrize("name", list(VARIANTS))
def test_greedy_is_lossless_past_several_windows(dirs, target, plain, name):
    drafter = load_drafter(dirs[name], target)
    assert drafter.format == "eagle3" and drafter.tap_layers == (1, 3, 5)
    s = run(target, drafter, ckpt.PROMPT)
    assert s.tokens == plain.tokens
    assert len(set(s.accepted_lengths)) >= 3 and sum(s.accepted_lengths) > N // 4  # drafts are accepted, unevenly


def test_a_round_s_steps_are_dropped_and_a_draft_repeats(dirs, target):
    """What a draft step appends does not outlive the round: drafting again at the same position
    (cost timing, auto's shadow drafts) drafts the same, and the cache keeps only committed pairs."""
    drafter = load_drafter(dirs["qwen3-two-sliding-layers"], target)
    session = drafter.start(target)
    prompt = ckpt.PROMPT
    _, rows = target.forward(mx.array([prompt[:-1]]), target.make_cache(), session.tap_layers, logits=False)
    P = len(prompt) - 1

    def propose(new_rows, key=0, sampling=None):
        return session.propose(
            prompt[-1],
            P,
            new_rows=new_rows,
            history=prompt,
            block_size=6,
            sampling=sampling or SamplingParams(),
            key=mx.random.key(key),
        )

    first = propose(rows)
    again = propose(None)
    assert first.tokens.tolist() == again.tokens.tolist()
    assert np.allclose(np.array(first.logits), np.array(again.logits), atol=1e-6)
    assert session.committed == P and all(k.shape[2] == P for k, _ in session.kv)
    hot = SamplingParams(temperature=1.0)
    a, b = propose(None, 3, hot), propose(None, 3, hot)
    assert a.tokens.tolist() == b.tokens.tolist() and a.q.shape == (1, 6, target.dims.vocab_size)
    assert np.allclose(np.array(a.q.sum(-1)), 1.0, atol=1e-5)


def test_a_one_token_prompt_drafts_and_stays_lossless(dirs, target):
    drafter = load_drafter(dirs["llama"], target)
    plain = run_to_summary(
        generate_plain(target, [ckpt.PROMPT[0]], GenerationConfig(policy="fixed", max_tokens=40, stop_at_eos=False))
    )
    assert run(target, drafter, [ckpt.PROMPT[0]], n=40).tokens == plain.tokens


def test_another_layout_kv_shared_per_layer_inputs(tmp_path):
    """The E2B-like miniature (KV-shared layers, per-layer inputs, 10 layers, bf16, sharded HF
    layout), with the taps left to speculators' default: hidden states [2, 5, 7]."""
    import miniatures

    target = load_target(miniatures.write_hf(tmp_path / "e2b", "e2b"))
    n = 4 * 16
    prompt = [2, 17, 40, 33, 91, 120, 7, 45, 45, 200, 13, 66]
    plain = run_to_summary(
        generate_plain(target, prompt, GenerationConfig(policy="fixed", max_tokens=n, stop_at_eos=False))
    )
    table = target.lm.model.embed_tokens.weight
    head = e3.write_eagle3(
        tmp_path / "head", table, list(plain.tokens), num_target_layers=10, aux_ids=None, dtype=mx.bfloat16
    )
    drafter = load_drafter(head, target)
    assert drafter.tap_layers == (1, 4, 6)
    s = run(target, drafter, prompt, n=n)
    assert s.tokens == plain.tokens and sum(s.accepted_lengths) > 0


def _reference(head: Path, rows, ids, drafted, embedding, tmp_path: Path) -> dict:
    if os.environ.get("DSPARK_SKIP_PEERS"):
        pytest.skip("DSPARK_SKIP_PEERS is set")
    if not REFERENCE.exists():
        pytest.skip("the reference environment is missing: run `make reference` (make test does)")
    np.savez(tmp_path / "in.npz", rows=rows, ids=ids, drafted=drafted, embedding=embedding)
    cmd = [str(REFERENCE), str(ROOT / "tests" / "reference" / "eagle3_ref.py"), str(head), str(tmp_path / "in.npz")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_draft_logits_equal_speculators_own_model(dirs, target, model, name, tmp_path):
    """The first round's logits, every step, against ``Eagle3DraftModel.forward`` on the same
    head and the same target taps (the prompt's, as the engine's prefill records them)."""
    drafter = load_drafter(dirs[name], target)
    session = drafter.start(target)
    prompt = ckpt.PROMPT
    _, rows = target.forward(mx.array([prompt[:-1]]), target.make_cache(), session.tap_layers, logits=False)
    G = 5
    ours = session.propose(
        prompt[-1],
        len(prompt) - 1,
        new_rows=rows,
        history=prompt,
        block_size=G,
        sampling=SamplingParams(),
        key=mx.random.key(0),
    )
    tokens = ours.tokens[0].tolist()
    ref = _reference(
        dirs[name],
        np.array(rows[0]),
        np.array(prompt[1:]),
        np.array(tokens[:-1]),
        np.array(model.model.embed_tokens.weight),
        tmp_path,
    )
    assert ref["missing"] == ([] if "borrowed" not in name else ["embed_tokens.weight"])
    logits = np.array(ours.logits[0])
    assert np.abs(logits - np.array(ref["logits"])).max() < 1e-4
    assert [int(i) for i in logits.argmax(-1)] == ref["argmax"]  # speculators drafts the same ids


def peer(dirs, name: str, block: int, how: str = "", prompt: list[int] = ckpt.PROMPT) -> dict:
    if os.environ.get("DSPARK_SKIP_PEERS"):
        pytest.skip("DSPARK_SKIP_PEERS is set")
    assert PEERS.exists(), "the peer environment is missing: run `make peers` (make test does)"
    cmd = [
        str(PEERS),
        str(ROOT / "tests" / "peers" / "run_peer.py"),
        f"mlx-vlm-eagle3:{block}{how}",
        str(dirs["target"]),
        str(dirs[name]),
        str(N),
        *map(str, prompt),
    ]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def ours_as_the_peer_runs(target, drafter, plain, rows: list):
    """Our run aligned with mlx-vlm's: it takes the first token from the target's prefill and
    drafts from there, so the prompt here includes it. (tokens, committed per round)."""
    start = drafter.start

    def recording(t, *, cache=None):
        session = start(t, cache=cache)
        propose = session.propose

        def recorded(*args, **kwargs):
            rows.append(propose(*args, **kwargs))
            return rows[-1]

        session.propose = recorded
        return session

    drafter.start = recording
    s = run(target, drafter, ckpt.PROMPT + [plain.tokens[0]], n=N - 1)
    return [plain.tokens[0], *s.tokens], [a + 1 for a in s.accepted_lengths]


def test_round_for_round_with_mlx_vlm(dirs, target, plain):
    drafter = load_drafter(dirs["peer"], target)
    rows: list = []
    tokens, tau = ours_as_the_peer_runs(target, drafter, plain, rows)
    assert tokens == list(plain.tokens)
    ref = peer(dirs, "peer", drafter.block_size)
    assert ref["tokens"] == tokens
    # mlx-vlm clips its last block to the token budget: compare every round before it
    assert tau[: len(ref["tau"]) - 1] == ref["tau"][:-1] and len(set(tau)) >= 4
    assert np.abs(np.array(rows[0].logits[0]) - np.array(ref["round1_logits"])).max() < 1e-4


def test_mlx_vlm_s_verifier_is_not_lossless_and_ours_is(dirs, target, plain):
    """mlx-vlm checks a draft against the target's best token among the draft vocabulary (and
    EOS), not the whole vocabulary: where the target's choice lies outside it, a draft of the
    runner-up inside it is accepted. With 16 draft ids its output leaves plain decoding; ours
    does not, with the same head."""
    drafter = load_drafter(dirs["small_vocab"], target)
    assert run(target, drafter, ckpt.PROMPT).tokens == plain.tokens
    ref = peer(dirs, "small_vocab", drafter.block_size)
    differs = [i for i, (a, b) in enumerate(zip(ref["tokens"], plain.tokens)) if a != b]
    assert differs, "mlx-vlm's verifier kept plain decoding's output here: the test no longer shows the departure"
    at = differs[0]
    vocab = set(drafter.draft_to_target.tolist())
    assert ref["tokens"][at] in vocab and plain.tokens[at] not in vocab


def test_mlx_vlm_s_rollback_of_a_wrapped_sliding_cache_is_not_lossless(dirs, target):
    """With the whole vocabulary (no ``d2t``) mlx-vlm verifies with its fallback verifier, which
    on a Gemma-4 target runs the bonus token alone (an in-place step of the ring buffer) and then
    the drafts; after a rejection it rolls the target's ``RotatingKVCache`` back by moving its
    offset and write index. Once the window has wrapped, that leaves the buffer longer than the
    window with the rejected rows past the write index, and the next one-token step cuts the
    buffer from the front: rows still inside the window go and the rejected rows are attended.
    So: the target's verify logits are plain decoding's in every round up to the first such
    rollback and not in the round after it, where its output leaves plain decoding's at the first
    token whose argmax that changes; with mlx-vlm's own ``BufferedRotatingKVCache`` (its MTP
    loop's) in place of the ring buffers, the same loop is lossless."""
    from mlx_lm.generate import generate_step

    prompt = ckpt.PROMPT[:5]  # shorter than the window: rounds run before it wraps
    steps = generate_step(mx.array(prompt), target.lm, max_tokens=N, sampler=lambda x: mx.argmax(x, axis=-1))
    plain_lp, greedy = [], []
    for tok, lp in steps:  # plain decoding: token i and its log-probabilities
        greedy.append(int(tok))
        plain_lp.append(np.array(lp))
    drafter = load_drafter(dirs["whole_vocab"], target)
    assert drafter.draft_to_target is None and list(run(target, drafter, prompt).tokens) == greedy  # ours
    ref = peer(dirs, "whole_vocab", 4, prompt=prompt)
    at = next((i for i, (a, b) in enumerate(zip(ref["tokens"], greedy)) if a != b), None)
    assert at is not None, "mlx-vlm's EAGLE-3 loop kept plain decoding's output: the test no longer shows the departure"
    assert peer(dirs, "whole_vocab", 4, ":buffered", prompt=prompt)["tokens"] == greedy
    lost = ref["stale"].index(True)  # the first round whose rollback leaves rejected rows in an overlong ring
    done, departed = 1, []  # tokens committed before a round (the first from the prompt pass)
    for r, (tau, rows) in enumerate(zip(ref["tau"], ref["verify_logits"])):
        # the rows whose inputs are committed tokens still plain decoding's
        valid = [j for j in range(tau) if done + j <= at]
        lp = np.array(rows)[valid]
        lp = lp - np.log(np.exp(lp - lp.max(-1, keepdims=True)).sum(-1, keepdims=True)) - lp.max(-1, keepdims=True)
        gap = max((float(np.abs(lp[i] - plain_lp[done + j]).max()) for i, j in enumerate(valid)), default=0.0)
        departed.append(gap > 1e-3)
        if r <= lost:
            assert gap < 1e-4, (r, gap)
        if r == lost + 1:
            assert gap > 1e-3 and at >= done, (r, gap, at, done)
            break
        done += tau
    assert departed == [False] * (lost + 1) + [True]
    print(
        f"mlx-vlm: the first rollback leaving rejected rows in an overlong ring: round {lost + 1} "
        f"(tokens up to {done - 1}); the target's logits depart in round {lost + 2}; first token off "
        f"plain decoding's: {at}"
    )


def test_sampling_keeps_the_target_distribution(tmp_path):
    """The statistical test of ``test_sampling``, through an EAGLE-3 head with 8 of 12 ids:
    its q is widened to the target vocabulary with zeros, so the residual keeps the rest."""
    from test_sampling import PROMPT, VOCAB, exact_marginals, tv_bound
    from tiny import tiny_target

    small = tiny_target(seed=5, scale=1.0, vocab=VOCAB, window=4)
    table = small.lm.model.embed_tokens.weight
    path = e3.write_eagle3(
        tmp_path / "head", table, [3, 5, 7, 8, 2, 9, 0, 11], num_target_layers=6, aux_ids=AUX, draft_vocab=8, block=3
    )
    drafter = load_drafter(path, small)
    cfg = GenerationConfig(policy="fixed", max_tokens=3, stop_at_eos=False, temperature=1.0)
    exact = exact_marginals(small, cfg.sampling)
    n, counts, accepted = 1000, np.zeros((3, VOCAB)), 0
    for seed in range(n):
        s = run_to_summary(generate(small, drafter, PROMPT, GenerationConfig(**{**cfg.__dict__, "seed": seed})))
        for i, tok in enumerate(s.tokens):
            counts[i, tok] += 1
        accepted += sum(s.accepted_lengths)
    assert accepted > n // 10, "the test needs accepted drafts to exercise the ratio test"
    for i in range(3):
        tv = 0.5 * np.abs(counts[i] / n - exact[i]).sum()
        assert tv <= tv_bound(exact[i], n), f"token {i}: TV {tv:.4f}"


def test_refusals_are_one_sentence(dirs, target, model, tmp_path):
    table, frequent = model.model.embed_tokens.weight, list(range(60))

    def head(name, **kw):
        return e3.write_eagle3(tmp_path / name, table, frequent, num_target_layers=6, **{"aux_ids": AUX, **kw})

    def d2t(name, values):
        p = head(name)
        w = dict(mx.load(str(p / "model.safetensors")))
        w["d2t"] = values
        mx.save_safetensors(str(p / "model.safetensors"), w, metadata={"format": "pt"})
        return p

    layer = json.loads((dirs["llama"] / "config.json").read_text())["transformer_layer_config"]
    cases = {
        head("outside", aux_ids=[2, 4, 7]): "an EAGLE-3 head whose taps are outside the target",
        head("embedding", aux_ids=[0, 2, 4]): "id 0 is the embedding",
        d2t("short", mx.zeros((40,), mx.int64)): "d2t has shape [40]",
        d2t("beyond", mx.full((48,), 250, mx.int64)): "outside the target vocabulary (0 to 255)",
        e3.edit_config(head("wide"), target_hidden_size=32): "hidden size 32, this target's is 64",
        e3.edit_config(
            head("vocab"), transformer_layer_config={**layer, "vocab_size": 300}
        ): "vocabulary 300, this target's is 256",
        e3.edit_config(
            head("gemma"), transformer_layer_config={**layer, "model_type": "gemma"}
        ): "expected llama or qwen3",
        e3.edit_config(head("both"), norm_before_fc=True, fc_norm=True): "fc_norm is True",
    }
    no_d2t = head("no_d2t")
    w = dict(mx.load(str(no_d2t / "model.safetensors")))
    w.pop("d2t")
    mx.save_safetensors(str(no_d2t / "model.safetensors"), w, metadata={"format": "pt"})
    cases[no_d2t] = "the weights have no d2t table"
    for path, message in cases.items():
        with pytest.raises((DsparkError, DrafterMismatchError), match=re.escape(message)) as e:
            load_drafter(path, target)
        assert "\n" not in str(e.value)


def test_an_eagle3_heads_costs_price_each_drafted_token(dirs, tmp_path, monkeypatch):
    """An autoregressive drafter pays a step per token: its costs say what one more token adds
    (``draft_steps_ms``), and ``auto`` drafts only what pays for it, staying lossless."""
    monkeypatch.setenv("DSPARK_COSTS_DIR", str(tmp_path))
    target = load_target(dirs["target"])
    drafter = load_drafter(dirs["llama"], target)
    c = costs_mod.measure(target, drafter, drafter.block_size, contexts=(64,), repeats=3)
    # the first token, then each further one: priced from whole rounds less the verify's growth,
    # which for a head this small can be all of a further token's cost (test_costs checks the rule)
    assert c.draft_ms > 0 and len(c.draft_steps_ms) == drafter.block_size - 1 and min(c.draft_steps_ms) >= 0
    assert costs_mod.Costs.from_dict(json.loads(json.dumps(c.to_dict()))) == c  # kept in the cache as measured
    plain = run_to_summary(
        generate_plain(target, ckpt.PROMPT, GenerationConfig(policy="fixed", max_tokens=48, stop_at_eos=False))
    )
    cfg = GenerationConfig(max_tokens=48, stop_at_eos=False, policy="auto")
    s = run_to_summary(generate(target, drafter, ckpt.PROMPT, cfg, costs=c))
    assert s.tokens == plain.tokens
