"""DFlash 2 heads (``dspark.formats.dflash2``), written synthetically in the published layout
(``dflash2_checkpoints.py``): each loads, generates losslessly past several sliding windows of
the target, keeps the target's distribution when sampling, and drafts what its owner's code
drafts, round for round: z-lab's ``dflash`` 0.1.0 and mlx-vlm 0.7.10 (run in ``.venv-peers``),
and round 1 against vLLM speculators' torch model (run in ``.venv-ref``)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path

import dflash2_checkpoints as d2
import drafter_checkpoints as ckpt
import mlx.core as mx
import numpy as np
import pytest
from test_formats import Capture, _copy

from dspark import GenerationConfig, generate, generate_plain, load_target, run_to_summary
from dspark.drafting import DraftOpts
from dspark.errors import DrafterMismatchError, DsparkError
from dspark.loading import describe_drafter, load_drafter
from dspark.modeldir import drafter_format

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / ".venv-peers" / "bin" / "python"
REF = ROOT / ".venv-ref" / "bin" / "python"
N = 120  # tokens: 7 sliding windows (16) of the target

KINDS = {  # name -> write_dflash2's options
    "full": {},
    "sliding": {"sliding": True},  # a causal sliding-window layer (z-lab's default for sliding layers)
    "runtime": {"runtime": 6},  # runtime_block_size: 6 slots of the 8 trained
    "window": {"window": 12},  # draft_window_size: the last 12 committed rows
}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("dflash2")
    d = {"target": ckpt.write_target(root / "target", ckpt.target_model())}
    d.update({name: d2.write_dflash2(root / name, **kw) for name, kw in KINDS.items()})
    return d


@pytest.fixture(scope="module")
def target(dirs):
    return load_target(dirs["target"])


@pytest.fixture(scope="module")
def plain(target):
    return run_to_summary(
        generate_plain(target, ckpt.PROMPT, GenerationConfig(policy="fixed", max_tokens=N, stop_at_eos=False))
    )


def ours(target, drafter, plain, *, block_size: int | None = None, rows: list | None = None):
    """As ``test_formats.ours``: aligned with the peers, which take the first token from the
    prefill. (tokens, committed per round, round-1 logits)."""
    cap = Capture(drafter)
    cfg = GenerationConfig(policy="fixed", max_tokens=N - 1, stop_at_eos=False, block_size=block_size)
    s = run_to_summary(generate(target, cap, ckpt.PROMPT + [plain.tokens[0]], cfg))
    if rows is not None:
        rows.extend(cap.rows)
    return [plain.tokens[0], *s.tokens], [a + 1 for a in s.accepted_lengths], np.array(cap.rows[0].logits[0])


def peer(kind: str, dirs, name: str) -> dict:
    if os.environ.get("DSPARK_SKIP_PEERS"):
        pytest.skip("DSPARK_SKIP_PEERS is set")
    if not PEERS.exists():
        pytest.skip("the peer environment .venv-peers is missing (make peers)")
    cmd = [str(PEERS), str(ROOT / "tests" / "peers" / "run_peer.py"), kind, str(dirs["target"]), str(dirs[name])]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([*cmd, str(N), *map(str, ckpt.PROMPT)], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def same_rounds(tau: list, ref: dict) -> bool:
    """Every round before the peer's last (which it clips to the token budget) committed as many."""
    return tau[: len(ref["tau"]) - 1] == ref["tau"][:-1]


@pytest.mark.parametrize("name", ["full", "sliding", "runtime"])
def test_lossless_and_round_for_round_with_zlab(dirs, target, plain, name):
    drafter = load_drafter(dirs[name], target)
    assert drafter.format == "dflash2" and drafter.block_size == (5 if name == "runtime" else 7)
    tokens, tau, logits = ours(target, drafter, plain)
    assert tokens == list(plain.tokens)  # lossless, past several windows of the target
    ref = peer("zlab-dflash2", dirs, name)
    assert ref["tokens"][: len(tokens)] == tokens
    assert same_rounds(tau, ref) and len(set(tau)) >= 4, (tau, ref["tau"])
    assert np.allclose(logits, np.array(ref["round1_logits"]), atol=1e-4)


def test_round_for_round_with_mlx_vlm(dirs, target, plain):
    """mlx-vlm runs a checkpoint's runtime_block_size as dspark does."""
    drafter = load_drafter(dirs["runtime"], target)
    tokens, tau, logits = ours(target, drafter, plain)
    ref = peer("mlx-vlm-dflash2", dirs, "runtime")
    assert ref["block"] == 6 and ref["tokens"][: len(tokens)] == tokens
    assert same_rounds(tau, ref) and len(set(tau)) >= 4, (tau, ref["tau"])
    assert np.allclose(logits, np.array(ref["round1_logits"]), atol=1e-4)


def test_mlx_vlm_runs_five_slots_without_a_runtime_block(dirs, target, plain):
    """Without runtime_block_size mlx-vlm runs min(5, block_size) slots where z-lab runs the
    whole block (docs/formats.md names it): under that convention (4 drafts a round) the two
    agree round for round, and dspark's default stays z-lab's 7."""
    drafter = load_drafter(dirs["full"], target)
    assert drafter.block_size == 7
    tokens, tau, logits = ours(target, drafter, plain, block_size=4)
    ref = peer("mlx-vlm-dflash2", dirs, "full")
    assert ref["block"] == 5 and ref["tokens"][: len(tokens)] == tokens == list(plain.tokens)
    assert same_rounds(tau, ref) and len(set(tau)) >= 3, (tau, ref["tau"])
    assert np.allclose(logits, np.array(ref["round1_logits"]), atol=1e-4)


def _argmax_drafts(drafter):
    """The selector skipped: each slot's best logit, as a DFlash 1 head drafts."""
    forward = drafter.forward_rows

    def rows(*args, **kwargs):
        out = forward(*args, **kwargs)
        out.tokens = mx.argmax(out.logits, axis=-1).astype(mx.int32)
        return out

    drafter.forward_rows = rows


def _no_dynamic_kernels(drafter):
    for layer in drafter.net.layers:
        for conv in (layer.attention_conv, layer.mlp_conv):
            conv.kernel_projection.weight = mx.zeros_like(conv.kernel_projection.weight)


@pytest.mark.parametrize("mistake", [_argmax_drafts, _no_dynamic_kernels])
def test_a_deliberate_mistake_changes_the_result(dirs, target, plain, mistake):
    drafter = load_drafter(dirs["full"], target)
    mistake(drafter)
    tokens, tau, logits = ours(target, drafter, plain)
    assert tokens == list(plain.tokens)  # still lossless: verification does not trust the drafter
    ref = peer("zlab-dflash2", dirs, "full")
    assert not np.allclose(logits, ref["round1_logits"], atol=1e-4) or not same_rounds(tau, ref)


def test_draft_window_size_caps_the_rows_a_block_sees(dirs, target, plain):
    """Rows older than draft_window_size change nothing; without the cap they do. Lossless."""
    drafter = load_drafter(dirs["window"], target)
    tokens, _, _ = ours(target, drafter, plain)
    assert tokens == list(plain.tokens)
    proj, rows = target.projection, mx.random.normal((1, 30, len(ckpt.TAPS) * ckpt.H), key=mx.random.key(7))
    changed = mx.concatenate([rows[:, :18] * -2.0, rows[:, 18:]], axis=1)  # all but the last 12
    full = load_drafter(dirs["full"], target)
    for d, same in ((drafter, True), (full, False)):
        a, b = (d.forward_rows(proj, r, [17], 7, opts=DraftOpts()).logits for r in (rows, changed))
        assert np.allclose(np.array(a), np.array(b), atol=1e-6) == same


def test_speculative_sampling_keeps_the_target_distribution(tmp_path):
    """``test_sampling``'s statistical test on a DFlash 2 head: its drafts come from the
    selector's candidates only, so q is zero elsewhere and the residual keeps the rest."""
    from test_sampling import PROMPT, VOCAB, exact_marginals, tv_bound
    from tiny import tiny_target

    small = tiny_target(seed=5, scale=1.0, vocab=VOCAB, window=4)
    drafter = load_drafter(d2.write_dflash2(tmp_path / "d2", vocab=VOCAB, block=4), small)
    cfg = GenerationConfig(policy="fixed", max_tokens=3, stop_at_eos=False, temperature=1.0)
    exact = exact_marginals(small, cfg.sampling)
    n, counts, accepted = 1000, np.zeros((3, VOCAB)), 0
    for seed in range(n):
        s = run_to_summary(generate(small, drafter, PROMPT, dataclasses.replace(cfg, seed=seed)))
        for i, tok in enumerate(s.tokens):
            counts[i, tok] += 1
        accepted += sum(s.accepted_lengths)
    assert accepted > n // 10, "the test needs accepted drafts to exercise the ratio test"
    for i in range(3):
        tv = 0.5 * np.abs(counts[i] / n - exact[i]).sum()
        assert tv <= tv_bound(exact[i], n), f"token {i}: TV {tv:.4f}"


def test_sampled_drafts_are_among_the_candidates_and_repeat_at_one_position(dirs, target):
    drafter = load_drafter(dirs["full"], target)
    session = drafter.start(target)
    rows = mx.random.normal((1, 20, len(ckpt.TAPS) * ckpt.H), key=mx.random.key(3))
    cfg = GenerationConfig(policy="fixed", temperature=0.8)
    a = session.propose(17, 20, new_rows=rows, history=[], block_size=7, sampling=cfg.sampling, key=mx.random.key(1))
    b = session.propose(17, 20, new_rows=None, history=[], block_size=7, sampling=cfg.sampling, key=mx.random.key(1))
    assert a.tokens.tolist() == b.tokens.tolist() and np.allclose(np.array(a.q), np.array(b.q))
    q = np.array(a.q[0])
    assert np.allclose(q.sum(-1), 1.0, atol=1e-5) and ((q > 0).sum(-1) <= d2.TOP_K).all()
    picked = q[np.arange(7), np.array(a.tokens[0])]
    assert np.allclose(picked, np.array(a.draft_probs[0]), atol=1e-6) and (picked > 0).all()


class Rows(Capture):
    """``Capture``, keeping each round's new tap rows too."""

    def __init__(self, drafter):
        super().__init__(drafter)
        self.new_rows = []

    def start(self, target, *, cache=None):
        draft_session = super().start(target, cache=cache)
        propose = draft_session.propose

        def recorded(*args, **kwargs):
            self.new_rows.append(kwargs["new_rows"])
            return propose(*args, **kwargs)

        draft_session.propose = recorded
        return draft_session


def test_round_one_against_speculators_torch_model(dirs, target, plain, tmp_path):
    """speculators' DFlash2DraftModel holds the same tensors under the same names; run under
    its conventions (the verifier's embedding unscaled, its head without soft-cap), round 1's
    logits and greedy path agree."""
    if not REF.exists():
        pytest.skip("the reference environment .venv-ref is missing (make reference)")
    drafter = load_drafter(dirs["full"], target)
    drafter.spec.embed_scale, drafter.spec.softcap = 1.0, None
    cap = Rows(drafter)
    run_to_summary(
        generate(target, cap, ckpt.PROMPT + [plain.tokens[0]], GenerationConfig(policy="fixed", max_tokens=3))
    )
    embed = mx.load(str(dirs["target"] / "model.safetensors"))["model.embed_tokens.weight"]
    inputs = tmp_path / "inputs.safetensors"
    anchor = mx.array([plain.tokens[0]], mx.int64)
    mx.save_safetensors(str(inputs), {"context": cap.new_rows[0][0], "embed": embed, "anchor": anchor})
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = ROOT / "tests" / "reference" / "dflash2_speculators.py"
    cmd = [str(REF), str(script), str(dirs["full"]), str(inputs)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    ref = json.loads(r.stdout)
    assert np.allclose(np.array(cap.rows[0].logits[0]), np.array(ref["logits"]), atol=1e-4)
    assert cap.rows[0].tokens[0].tolist() == ref["tokens"]


def test_describe_names_the_kind(dirs):
    info = describe_drafter(dirs["runtime"])
    assert info["format"] == "dflash2" and info["variant"] == "DFlash 2"
    assert info["block_size"] == 5 and info["block_slots"] == 6 and info["trained_block_slots"] == 8
    assert info["selector_top_k"] == d2.TOP_K and info["conv_kernel_size"] == d2.KERNEL
    assert describe_drafter(dirs["window"])["draft_window"] == 12
    assert drafter_format({"architectures": ["DFlash2DraftModel"], "dflash_config": {}}) == "dflash2"


def _edit_dflash(path: Path, **changes) -> Path:
    config = json.loads((path / "config.json").read_text())
    config["dflash_config"].update(changes)
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_refusals_are_one_sentence(dirs, target, tmp_path):
    src = dirs["full"]
    cases = {
        _edit_dflash(_copy(src, tmp_path / "group"), conv_group_size=24): "conv_group_size is 24, expected a divisor",
        _edit_dflash(_copy(src, tmp_path / "topk"), selector_top_k=300): "selector_top_k is 300, expected at most",
        _edit_dflash(_copy(src, tmp_path / "rt_big"), runtime_block_size=9): "runtime_block_size is 9, expected",
        _edit_dflash(_copy(src, tmp_path / "rt_one"), runtime_block_size=1): "runtime_block_size is 1, expected",
        _edit_dflash(_copy(src, tmp_path / "win"), draft_window_size=0): "draft_window_size is 0",
        _edit_dflash(
            _copy(src, tmp_path / "nokernel"), conv_kernel_size=None
        ): "a DFlash 2 head needs conv_kernel_size",
        _edit_dflash(_copy(src, tmp_path / "rank"), selector_rank=8): "candidate_selector.",
        d2.write_dflash2(tmp_path / "vocab", vocab=300): "vocabulary 300, this target's is 256",
    }
    for path, message in cases.items():
        with pytest.raises((DsparkError, DrafterMismatchError)) as e:
            load_drafter(path, target)
        text = str(e.value).replace(str(path), "")
        assert re.search(re.escape(message), text) and "\n" not in text, (path.name, text)


@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_heads_load_and_stay_lossless(dirs, target, plain, tmp_path, bits):
    """``dspark quantize`` keeps the format: the linear layers in mlx's layout, the selector's
    codebooks (tables, not layers) as they were."""
    from dspark.cli import main as dspark

    out = tmp_path / f"q{bits}"
    assert dspark(["quantize", str(dirs["sliding"]), "--bits", str(bits), "--out", str(out)]) == 0
    weights = mx.load(str(out / "model.safetensors"))
    assert weights["layers.0.self_attn.q_proj.weight"].dtype == mx.uint32
    assert weights["candidate_selector.predecessor_codebook"].dtype == mx.float32
    drafter = load_drafter(out, target)
    s = run_to_summary(
        generate(target, drafter, ckpt.PROMPT, GenerationConfig(policy="fixed", max_tokens=N, stop_at_eos=False))
    )
    assert drafter.format == "dflash2" and list(s.tokens) == list(plain.tokens) and max(s.accepted_lengths) >= 3
