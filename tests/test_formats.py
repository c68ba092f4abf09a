"""The drafter formats people have (z-lab DFlash, DeepSpec DSpark and its DFlash baseline, vLLM
speculators with a reduced vocabulary), written synthetically in their exact on-disk layouts
(``drafter_checkpoints.py``): each loads, generates losslessly, quantized too, and computes
what its reference implementation computes, round for round, checked against the peer packages
themselves (run in the test-only environment ``.venv-peers``, ``make peers``)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path

import drafter_checkpoints as ckpt
import mlx.core as mx
import numpy as np
import pytest

from dspark import GenerationConfig, generate, generate_plain, load_target, run_to_summary
from dspark.cli import main as dspark
from dspark.drafting import BlockLayout
from dspark.errors import DrafterMismatchError, DsparkError
from dspark.loading import describe_drafter as describe
from dspark.loading import load_drafter

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / ".venv-peers" / "bin" / "python"
N = 120  # tokens: several sliding windows (16) of the target


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("formats")
    model = ckpt.target_model()
    d = {"target": ckpt.write_target(root / "target", model)}
    target = load_target(d["target"])
    plain = run_to_summary(
        generate_plain(target, ckpt.PROMPT, GenerationConfig(policy="fixed", max_tokens=N, stop_at_eos=False))
    )
    d.update(
        zlab=ckpt.write_zlab(root / "zlab"),
        zlab_full=ckpt.write_zlab(root / "zlab_full", sliding=False),
        deepspec=ckpt.write_deepspec(root / "deepspec", model),
        deepspec_dflash=ckpt.write_deepspec(root / "deepspec_dflash", model, heads=False),
        speculators=ckpt.write_speculators(root / "speculators", model, list(plain.tokens[:90])),
    )
    frequent = list(plain.tokens[:90])
    d.update(
        speculators_borrowed=ckpt.write_speculators(root / "sp_borrowed", model, frequent, with_embedding=False),
        speculators_sliding=ckpt.write_speculators(root / "sp_sliding", model, frequent, sliding=True),
        speculators_anchor=ckpt.write_speculators(root / "sp_anchor", model, frequent, from_anchor=True),
        speculators_dflash=ckpt.write_speculators(root / "sp_dflash", model, frequent, algorithm="dflash"),
    )
    for name in ("speculators", "speculators_borrowed", "speculators_sliding", "speculators_anchor"):
        d[name + "_peer"] = ckpt.for_mlx_dspark(d[name], root / f"{name}_for_mlx_dspark")
    d["speculators_dflash_peer"] = ckpt.as_headless_dspark(d["speculators_dflash"], root / "sp_dflash_as_dspark")
    return d


@pytest.fixture(scope="module")
def target(dirs):
    return load_target(dirs["target"])


@pytest.fixture(scope="module")
def plain(target):
    return run_to_summary(
        generate_plain(target, ckpt.PROMPT, GenerationConfig(policy="fixed", max_tokens=N, stop_at_eos=False))
    )


class Capture:
    """The drafter, recording every round's DraftRows."""

    def __init__(self, drafter):
        self.drafter, self.rows = drafter, []

    def start(self, target, *, cache=None):
        draft_session = self.drafter.start(target, cache=cache)
        propose = draft_session.propose

        def recorded(*args, **kwargs):
            rows = propose(*args, **kwargs)
            self.rows.append(rows)
            return rows

        draft_session.propose = recorded
        return draft_session


def ours(target, drafter, plain, rows: list | None = None):
    """Our run aligned with the peers': they take the first token from the target's prefill and
    draft from there, so the prompt here includes it. (tokens, committed per round, round-1 logits);
    ``rows`` gets every round's DraftRows."""
    cap = Capture(drafter)
    cfg = GenerationConfig(policy="fixed", max_tokens=N - 1, stop_at_eos=False)
    s = run_to_summary(generate(target, cap, ckpt.PROMPT + [plain.tokens[0]], cfg))
    if rows is not None:
        rows.extend(cap.rows)
    return [plain.tokens[0], *s.tokens], [a + 1 for a in s.accepted_lengths], np.array(cap.rows[0].logits[0])


def peer(kind: str, dirs, name: str) -> dict:
    if os.environ.get("DSPARK_SKIP_PEERS"):
        pytest.skip("DSPARK_SKIP_PEERS is set")
    assert PEERS.exists(), "the peer environment is missing: run `make peers` (make test does)"
    cmd = [
        str(PEERS),
        str(ROOT / "tests" / "peers" / "run_peer.py"),
        kind,
        str(dirs["target"]),
        str(dirs[name]),
        str(N),
        *map(str, ckpt.PROMPT),
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


CASES = {  # name -> (peer runner, drafts per round, format)
    "zlab": ("zlab", 7, "zlab-dflash"),
    "zlab_full": ("zlab", 7, "zlab-dflash"),
    "deepspec": ("mlx-dspark", 7, "deepspec"),
    "deepspec_dflash": ("mlx-dspark", 7, "deepspec"),
    "speculators": ("mlx-dspark", 6, "speculators"),
    "speculators_borrowed": ("mlx-dspark", 6, "speculators"),  # the target's embedding, unscaled
    "speculators_sliding": ("mlx-dspark", 6, "speculators"),  # a causal sliding-window layer
    "speculators_anchor": ("mlx-dspark", 7, "speculators"),  # sample_from_anchor: slot 0 predicts
    "speculators_dflash": ("mlx-dspark", 6, "speculators"),  # the DFlash head; the peer reads it relabelled
}
#: mlx-dspark reads speculators' tap ids one off from vLLM (``ckpt.for_mlx_dspark``) and translates
#: only algorithm dspark (``ckpt.as_headless_dspark``): it is given copies that say the same drafter its way.
PEER_DIR = {name: name + "_peer" for name in CASES if name.startswith("speculators")}


#: Where the peer departs from the format's own code, the peer's convention is set for the
#: comparison (and the test checks that dspark's default is the training code's):
#: speculators builds the block from ``self.embed_tokens(mask_token_ids)``, the verifier's
#: embedding copied in by ``load_verifier_weights``, with no sqrt(d) scale (vllm-project/
#: speculators, models/dflash/core.py ``_backbone_forward``); mlx-dspark scales it. And its
#: sliding-window layers see the W context rows before the anchor, every block slot alike
#: (``create_anchor_block_mask_mod``: ``kv_base_pos >= q_anchor - sliding_window``), and its
#: full-attention layers stay bidirectional and unwindowed (the mask per ``layer_types``),
#: where mlx-dspark windows each slot by its own position (``key_pos > query_pos - W``) and
#: applies the window and the causal block to every layer once any layer slides.
PEER_CONVENTION = {
    "speculators_borrowed": (
        lambda d: d.spec.embed_scale == 1.0,
        lambda d: setattr(d.spec, "embed_scale", float(ckpt.H) ** 0.5),
    ),
    "speculators_sliding": (
        lambda d: d.layout.window_from_anchor and d.layout.windows == (8, None) and d.layout.causal == (True, False),
        lambda d: setattr(
            d, "layout", dataclasses.replace(d.layout, window_from_anchor=False, windows=(8, 8), causal=(True, True))
        ),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_format_matches_its_reference_round_for_round(dirs, target, plain, name):
    kind, drafts, fmt = CASES[name]
    drafter = load_drafter(dirs[name], target)
    assert drafter.format == fmt and drafter.block_size == drafts
    if name in PEER_CONVENTION:
        is_default, to_peer = PEER_CONVENTION[name]
        assert is_default(drafter)  # the training code's convention is what dspark does
        to_peer(drafter)
    rows: list = []
    tokens, tau, logits = ours(target, drafter, plain, rows)
    assert tokens == list(plain.tokens)  # lossless, past several windows
    ref = peer(kind, dirs, PEER_DIR.get(name, name))
    if drafter.has_confidence:  # the confidence head reads the same features the same way
        z = np.array(rows[0].conf_logits[0])
        assert np.allclose(z, np.array(ref["round1_confidence_logits"]), atol=1e-4), (
            z,
            ref["round1_confidence_logits"],
        )
    assert ref["tokens"][: len(tokens)] == tokens
    # the peers clip their last block to the token budget: compare every round before it
    assert tau[: len(ref["tau"]) - 1] == ref["tau"][:-1] and len(set(tau)) >= 4
    assert np.allclose(logits, np.array(ref["round1_logits"]), atol=1e-4)


MISTAKES = {  # a deliberate mistake in each reading, which the reference comparison must notice
    "zlab: off-by-one block slot": ("zlab_full", lambda d: setattr(d, "layout", BlockLayout(anchor_predicts=True))),
    "zlab: no embedding scale": ("zlab_full", lambda d: setattr(d.spec, "embed_scale", 1.0)),
    "deepspec: wrong RoPE base": (
        "deepspec",
        lambda d: [setattr(layer.rope, "_freqs", layer.rope._freqs * 0.01) for layer in d.net.layers],
    ),
    "speculators: d2t dropped": ("speculators", lambda d: setattr(d, "draft_to_target", None)),
    "speculators: embedding scaled": ("speculators", lambda d: setattr(d.spec, "embed_scale", 8.0)),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_deliberate_mistake_changes_the_result(dirs, target, plain, mistake):
    name, break_it = MISTAKES[mistake]
    drafter = load_drafter(dirs[name], target)
    break_it(drafter)
    tokens, tau, logits = ours(target, drafter, plain)
    ref = peer(CASES[name][0], dirs, PEER_DIR.get(name, name))
    assert tokens == list(plain.tokens)  # still lossless: verification does not trust the drafter
    same_logits = logits.shape == np.array(ref["round1_logits"]).shape and np.allclose(
        logits, ref["round1_logits"], atol=1e-4
    )
    assert not same_logits or tau[: len(ref["tau"]) - 1] != ref["tau"][:-1]


@pytest.mark.parametrize("name", ["zlab", "deepspec", "speculators"])
@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_drafters_load_and_stay_lossless(dirs, target, plain, tmp_path, name, bits):
    out = tmp_path / f"{name}-q{bits}"
    assert dspark(["quantize", str(dirs[name]), "--bits", str(bits), "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"]["bits"] == bits
    weights = mx.load(str(out / "model.safetensors"))
    assert any(v.dtype == mx.uint32 for v in weights.values()) and any(k.endswith(".scales") for k in weights)
    drafter = load_drafter(out, target)
    s = run_to_summary(
        generate(target, drafter, ckpt.PROMPT, GenerationConfig(policy="fixed", max_tokens=N, stop_at_eos=False))
    )
    assert list(s.tokens) == list(plain.tokens) and max(s.accepted_lengths) >= 3
    assert describe(out)["quantization"]["bits"] == bits
    assert dspark(["quantize", str(out), "--bits", "4", "--out", str(tmp_path / "again")]) == 2  # already quantized


def test_inspect_says_what_a_directory_is(dirs, capsys):
    info = describe(dirs["speculators"])
    assert info["format"] == "speculators" and info["draft_vocab"] == 48 and info["block_size"] == 6
    assert not info["anchor_predicts"] and info["tap_layers"] == ckpt.TAPS and info["markov_head"]
    assert info["target"]["hidden_size"] == ckpt.H and info["target"]["vocab_size"] == ckpt.VOCAB
    assert describe(dirs["deepspec_dflash"])["variant"] == "DFlash baseline"
    z = describe(dirs["zlab"])
    assert z["block_slots"] == 8 and z["block_size"] == 7 and z["sliding_windows"] == [8]
    capsys.readouterr()
    assert dspark(["inspect", str(dirs["deepspec"])]) == 0
    out = capsys.readouterr().out
    assert (
        "deepspec drafter (DSpark)" in out
        and "Markov, confidence" in out
        and "block size 7 (drafted tokens per round" in out
    )


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def _edit(path: Path, **changes) -> Path:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_refusals_are_one_sentence(dirs, target, tmp_path):
    code = _copy(dirs["zlab"], tmp_path / "code")
    (code / "modeling_dflash.py").write_text("raise SystemExit('this must never run')\n")
    auto = _edit(_copy(dirs["zlab"], tmp_path / "auto"), auto_map={"AutoModel": "x.Model"})
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((dirs["zlab"] / "config.json").read_text())
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04not really")
    wide = _edit(_copy(dirs["deepspec"], tmp_path / "wide"), hidden_size=128)
    taps = _edit(
        _copy(dirs["zlab"], tmp_path / "taps"),
        dflash_config={"mask_token_id": 4, "target_layer_ids": [1, 3, 9]},
        num_target_layers=None,
    )
    vocab = _copy(dirs["speculators"], tmp_path / "vocab")
    cfg = json.loads((vocab / "config.json").read_text())
    cfg["transformer_layer_config"]["vocab_size"] = 300
    (vocab / "config.json").write_text(json.dumps(cfg))
    unknown = _copy(dirs["zlab"], tmp_path / "unknown")
    (unknown / "config.json").write_text(json.dumps({"architectures": ["MedusaModel"], "medusa_num_heads": 4}))
    v2 = _edit(_copy(dirs["zlab"], tmp_path / "v2"), architectures=["DFlash2DraftModel"])
    # a Gemma-4 assistant's config names a Gemma-4 model type and width: it must not read as a target
    assistant = _copy(dirs["zlab"], tmp_path / "assistant")
    (assistant / "config.json").write_text(
        json.dumps({"model_type": "gemma4_assistant", "hidden_size": 256, "backbone_hidden_size": 64})
    )
    cases = {
        code: "asks to run Python files (modeling_dflash.py)",
        auto: "asks to run custom code (auto_map",
        pickled: "pickled weights",
        wide: "hidden size 128, this target's is 64",
        taps: "taps target layer 9, but the target has 6 layers",
        vocab: "vocabulary 300, this target's is 256",
        unknown: "not a drafter this version knows",
        v2: "DFlash 2",
        assistant: "text_config is None, expected a JSON object",  # read as an assistant, not as a target
        dirs["target"]: "holds a model",
    }
    for path, message in cases.items():
        with pytest.raises((DsparkError, DrafterMismatchError), match=re.escape(message)):
            load_drafter(path, target)


def test_speculative_sampling_through_a_reduced_vocabulary_keeps_the_target_distribution(tmp_path):
    """The statistical test of ``test_sampling``, on a speculators drafter with 8 of 12 ids:
    its q is widened to the target vocabulary with zeros, so the residual keeps the rest."""
    from test_sampling import PROMPT, VOCAB, exact_marginals, tv_bound
    from tiny import tiny_target

    small = tiny_target(seed=5, scale=1.0, vocab=VOCAB, window=4)
    path = ckpt.write_speculators(tmp_path / "spec", small.model, [3, 5, 7, 8, 2, 9, 0, 11], draft_vocab=8, vocab=VOCAB)
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


def _edit_nested(path: Path, key: str, **changes) -> Path:
    config = json.loads((path / "config.json").read_text())
    config[key] = {**(config.get(key) or {}), **changes}
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_absurd_values_in_every_format_are_refused_before_anything_is_allocated(dirs, target, tmp_path):
    """A crafted config must not crash the process or fill memory: each field is checked
    against the limits (dspark.validate.LIMITS) and against the weights before loading."""
    z, d, s = dirs["zlab"], dirs["deepspec"], dirs["speculators"]
    cases = [
        (_edit_nested(_copy(z, tmp_path / "c1"), "dflash_config", mask_token_id=10**6), "mask"),
        (_edit_nested(_copy(z, tmp_path / "c2"), "dflash_config", mask_token_id=256), "mask"),
        (_edit(_copy(z, tmp_path / "c3"), block_size=10**6), "block"),
        (_edit(_copy(z, tmp_path / "c4"), block_size=0), "block"),
        (_edit(_copy(z, tmp_path / "c5"), num_hidden_layers=10**6), "num hidden layers"),
        (_edit(_copy(z, tmp_path / "c6"), num_attention_heads="four"), "num attention heads"),
        (_edit_nested(_copy(z, tmp_path / "c7"), "dflash_config", target_layer_ids=[-1, 3]), "target layer ids"),
        (_edit(_copy(d, tmp_path / "c8"), block_size=-3), "block"),
        (_edit(_copy(d, tmp_path / "c9"), markov_rank=10**9), "markov"),
        (_edit(_copy(d, tmp_path / "c10"), rms_norm_eps="nan"), "rms norm eps"),
        (_edit(_copy(s, tmp_path / "c11"), block_size=10**6), "block"),
        (_edit(_copy(s, tmp_path / "c12"), draft_vocab_size=10**9), "vocab"),
    ]
    for path, fragment in cases:
        with pytest.raises((DsparkError, DrafterMismatchError)) as e:
            load_drafter(path, target)
        message = str(e.value).replace(str(path), "")
        assert fragment in message.replace("_", " "), (path.name, message)
        assert "\n" not in message, message
