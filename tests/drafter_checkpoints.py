"""Synthetic drafter checkpoints in the exact on-disk layouts of the published formats (file
names, key names, config keys, dtypes; taken from the peers' own loaders), for a tiny random
Gemma-4 target. Random drafters accept almost nothing, so the weights carry a planted
preference: the target repeats its current token in runs, and each drafter is built to carry
the anchor (or the previous draft, through a Markov head) into the following slots, so
acceptance varies from round to round.

No tests here; ``test_formats.py`` uses these writers, and ``peers/run_peer.py`` runs the
peers' own code on the same directories.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.models import gemma4_text

H, VOCAB, TAPS, R = 64, 256, [1, 3, 4], 32
PROMPT = [2, 17, 40, 33, 91, 120, 7, 45, 45, 200, 13, 66, 81, 19, 150, 22, 9, 31, 77, 140]


def target_model(seed: int = 0, window: int = 16):
    """A random gemma4_text (float32) whose greedy output repeats its current token in runs:
    embeddings scaled by 0.8; rows 1 (EOS, never chosen) and 4 (<mask>, embeds to zero) zeroed."""
    mx.random.seed(seed)
    args = gemma4_text.ModelArgs.from_dict(
        dict(
            model_type="gemma4_text",
            hidden_size=H,
            num_hidden_layers=6,
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=16,
            global_head_dim=32,
            vocab_size=VOCAB,
            vocab_size_per_layer_input=VOCAB,
            num_kv_shared_layers=0,
            hidden_size_per_layer_input=0,
            sliding_window=window,
            sliding_window_pattern=3,
            max_position_embeddings=4096,
            final_logit_softcapping=30.0,
            tie_word_embeddings=True,
        )
    )
    model = gemma4_text.Model(args)
    w = model.model.embed_tokens.weight * 0.8
    w[1] = 0
    w[4] = 0
    model.model.embed_tokens.weight = w
    mx.eval(model.parameters())
    return model


def write_target(path: Path, model) -> Path:
    from tiny import write_tokenizer

    path.mkdir(parents=True, exist_ok=True)
    config = {**vars(model.args), "eos_token_id": 1}
    (path / "config.json").write_text(json.dumps(config))
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(model.parameters())))
    write_tokenizer(path, vocab=VOCAB)
    return path


def _r(*shape, std=0.05):
    return (mx.random.normal(shape) * std).astype(mx.float32)


def _save(path: Path, config: dict, weights: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=1))
    mx.save_safetensors(str(path / "model.safetensors"), weights, metadata={"format": "pt"})
    return path


def _qwen3_layers(n: int, heads: int = 4, kv: int = 4, hd: int = 16, ffn: int = 128) -> dict:
    """Qwen3 blocks whose V = I and O = 3I carry the anchor's embedding into the mask slots."""
    w, eye = {}, mx.eye(H)
    for i in range(n):
        p = f"layers.{i}."
        w[p + "input_layernorm.weight"] = mx.ones((H,))
        w[p + "post_attention_layernorm.weight"] = mx.ones((H,))
        w[p + "self_attn.q_proj.weight"] = _r(heads * hd, H, std=0.1)
        w[p + "self_attn.k_proj.weight"] = _r(kv * hd, H, std=0.1)
        w[p + "self_attn.v_proj.weight"] = eye + _r(kv * hd, H)
        w[p + "self_attn.o_proj.weight"] = 3.0 * eye + _r(H, heads * hd)
        w[p + "self_attn.q_norm.weight"] = mx.ones((hd,))
        w[p + "self_attn.k_norm.weight"] = mx.ones((hd,))
        w[p + "mlp.gate_proj.weight"] = _r(ffn, H)
        w[p + "mlp.up_proj.weight"] = _r(ffn, H)
        w[p + "mlp.down_proj.weight"] = _r(H, ffn)
    return w


def write_zlab(path: Path, sliding: bool = True, seed: int = 1, block: int = 8, vocab: int = VOCAB) -> Path:
    """z-lab DFlash: Qwen3 layers (a sliding one with window 8 when ``sliding``), taps and mask
    under dflash_config, block size and soft-cap at the top level, RoPE only under
    rope_parameters; no embedding or head."""
    mx.random.seed(seed)
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": H,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 16,
        "intermediate_size": 128,
        "vocab_size": vocab,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "max_position_embeddings": 4096,
        "num_target_layers": 6,
        "block_size": block,
        "layer_types": ["sliding_attention" if sliding else "full_attention", "full_attention"],
        "sliding_window": 8,
        "final_logit_softcapping": 30.0,
        "tie_word_embeddings": True,
        "dflash_config": {"mask_token_id": 4, "target_layer_ids": TAPS},
    }
    w = {
        "fc.weight": _r(H, len(TAPS) * H),
        "hidden_norm.weight": mx.full((H,), 0.02),
        "norm.weight": mx.ones((H,)),
        **_qwen3_layers(2),
    }
    return _save(path, config, w)


def _markov(vocab_in: int, out_rows: list[int], scale: float = 0.45) -> dict:
    """A planted "repeat the previous token" Markov head: W1 rows are target ids, W2 rows the
    (draft-vocabulary) output ids."""
    U = mx.random.normal((vocab_in, R))
    return {"markov_head.markov_w1.weight": scale * U, "markov_head.markov_w2.weight": scale * U[mx.array(out_rows)]}


def write_deepspec(path: Path, target, heads: bool = True, seed: int = 2) -> Path:
    """DeepSpec Gemma4DSparkModel: the target's config copied with the drafter's fields; Gemma-4
    global layers (K = V, 2 KV heads of 32); own embed_tokens / lm_head; Markov and confidence
    heads unless ``heads`` is False (the DFlash baseline: markov_rank 0)."""
    mx.random.seed(seed)
    config = copy.deepcopy({**vars(target.args)})
    config.update(
        {
            "architectures": ["Gemma4DSparkModel"],
            "target_model_type": "gemma4",
            "target_text_model_type": "gemma4_text",
            "num_target_layers": config["num_hidden_layers"],
            "num_hidden_layers": 2,
            "block_size": 7,
            "tie_word_embeddings": False,
            "layer_types": ["full_attention"] * 2,
            "mask_token_id": 4,
            "target_layer_ids": TAPS,
            "num_anchors": 512,
            "attention_k_eq_v": True,
            "num_global_key_value_heads": 2,
            "enable_confidence_head": heads,
            "markov_rank": R if heads else 0,
        }
    )
    if heads:
        config.update(confidence_head_with_markov=True, markov_head_type="vanilla")
    emb, gh, o = target.model.embed_tokens.weight, 32, mx.zeros((H, 4 * 32))
    o[0:gh, 0:gh] = 0.2 * mx.eye(gh)  # each KV head routed back, weakly: mask slots see a faint anchor
    o[gh : 2 * gh, 2 * gh : 3 * gh] = 0.2 * mx.eye(gh)
    w = {
        "embed_tokens.weight": emb,
        "lm_head.weight": emb,
        "fc.weight": _r(H, len(TAPS) * H),
        "hidden_norm.weight": mx.full((H,), 1e-6),
        "norm.weight": mx.ones((H,)),
    }
    for i in range(2):
        p = f"layers.{i}."
        w[p + "input_layernorm.weight"] = mx.ones((H,))
        w[p + "pre_feedforward_layernorm.weight"] = mx.ones((H,))
        w[p + "post_attention_layernorm.weight"] = mx.full((H,), 0.5)
        w[p + "post_feedforward_layernorm.weight"] = mx.full((H,), 0.3)
        w[p + "layer_scalar"] = mx.array([1.0 if i == 0 else 0.9])
        w[p + "self_attn.q_proj.weight"] = _r(4 * gh, H, std=0.1)
        w[p + "self_attn.k_proj.weight"] = mx.eye(H) + _r(2 * gh, H, std=0.02)
        w[p + "self_attn.o_proj.weight"] = o + _r(H, 4 * gh, std=0.02)
        w[p + "self_attn.q_norm.weight"] = mx.ones((gh,))
        w[p + "self_attn.k_norm.weight"] = mx.ones((gh,))
        w[p + "mlp.gate_proj.weight"] = _r(128, H)
        w[p + "mlp.up_proj.weight"] = _r(128, H)
        w[p + "mlp.down_proj.weight"] = _r(H, 128)
    if heads:
        w.update(_markov(VOCAB, list(range(VOCAB))))
        w["confidence_head.proj.weight"] = _r(1, H + R, std=0.1)
        w["confidence_head.proj.bias"] = mx.array([0.5])
    return _save(path, config, w)


def draft_vocabulary(tokens: list[int], size: int, vocab: int) -> list[int]:
    """speculators' selection: the most frequent ids (ties by id), padded with the lowest unused
    ids, sorted ascending."""
    freq: dict[int, int] = {}
    for t in tokens:
        freq[t] = freq.get(t, 0) + 1
    chosen = sorted(freq, key=lambda t: (-freq[t], t))[:size]
    fill = [t for t in range(vocab) if t not in set(chosen)]
    return sorted(chosen + fill[: size - len(chosen)])


def write_speculators(
    path: Path,
    target,
    frequent: list[int],
    draft_vocab: int = 48,
    seed: int = 3,
    vocab: int = VOCAB,
    with_embedding: bool = True,
    sliding: bool = False,
    from_anchor: bool = False,
    algorithm: str = "dspark",
) -> Path:
    """vLLM speculators DSpark: Qwen3 backbone under transformer_layer_config, taps as
    aux_hidden_state_layer_ids, block 7 with 6 speculative tokens (slot 0 a pure anchor), a
    reduced draft vocabulary with d2t offsets and t2d, lm_head over the draft vocabulary.
    Variants: no embedding of its own (the target's is borrowed), a first layer with a causal
    sliding window of 8, ``sample_from_anchor`` (7 speculative tokens: the anchor slot
    predicts), and ``algorithm="dflash"``: speculators' DFlash head (no Markov or confidence
    head; DSpark's class is DFlash's with them added)."""
    mx.random.seed(seed)
    chosen = draft_vocabulary(frequent, draft_vocab, vocab)
    d2t = np.array(chosen, np.int64) - np.arange(draft_vocab, dtype=np.int64)
    t2d = np.zeros(vocab, np.bool_)
    t2d[chosen] = True
    emb = target.model.embed_tokens.weight
    w = {
        "lm_head.weight": emb[mx.array(chosen)],
        "fc.weight": _r(H, len(TAPS) * H),
        "hidden_norm.weight": mx.full((H,), 0.002),
        "norm.weight": mx.ones((H,)),
        "d2t": mx.array(d2t),
        "t2d": mx.array(t2d),
        "confidence_head.proj.weight": _r(1, H + R, std=0.1),
        "confidence_head.proj.bias": mx.array([0.5]),
        **_markov(vocab, chosen),
        **_qwen3_layers(2),
    }
    if with_embedding:
        w["embed_tokens.weight"] = emb
    if algorithm == "dflash":
        w = {k: v for k, v in w.items() if not k.startswith(("markov_head.", "confidence_head."))}
    config = {
        "architectures": ["DSparkSpeculator"],
        "speculators_model_type": "dspark",
        "speculators_version": "synthetic",
        "speculators_config": {
            "algorithm": "dspark",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 7 if from_anchor else 6}],
            "verifier": {"name_or_path": "local/tiny-gemma4", "architectures": ["Gemma4ForConditionalGeneration"]},
        },
        "transformer_layer_config": {
            "model_type": "qwen3",
            "hidden_size": H,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "head_dim": 16,
            "intermediate_size": 128,
            "vocab_size": vocab,
            "rms_norm_eps": 1e-6,
            "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
            "max_position_embeddings": 4096,
            "layer_types": ["sliding_attention" if sliding else "full_attention", "full_attention"],
            "sliding_window": 8 if sliding else None,
            "use_sliding_window": sliding,
            "attention_bias": False,
        },
        "aux_hidden_state_layer_ids": [t + 1 for t in TAPS],  # vLLM's numbering: id i is layer i - 1's output
        "draft_vocab_size": draft_vocab,
        "block_size": 7,
        "mask_token_id": 4,
        "sample_from_anchor": from_anchor,
        "sliding_window_non_causal": False,
        "markov_rank": R,
        "markov_head_type": "vanilla",
        "enable_confidence_head": True,
        "confidence_head_with_markov": True,
    }
    if algorithm == "dflash":
        for key in ("markov_rank", "markov_head_type", "enable_confidence_head", "confidence_head_with_markov"):
            config.pop(key)
        config.update(architectures=["DFlashSpeculator"], speculators_model_type="dflash")
        config["speculators_config"]["algorithm"] = "dflash"
    return _save(path, config, w)


def for_mlx_dspark(src: Path, dst: Path) -> Path:
    """A speculators checkpoint as mlx-dspark must be given it to tap the same layers: mlx-dspark
    reads ``aux_hidden_state_layer_ids`` as the tapped layers themselves, one below vLLM's and
    speculators' numbering (id i is the output of layer i - 1), so its copy has every id less one."""
    import shutil

    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config["aux_hidden_state_layer_ids"] = [i - 1 for i in config["aux_hidden_state_layer_ids"]]
    (dst / "config.json").write_text(json.dumps(config, indent=1))
    return dst


def as_headless_dspark(src: Path, dst: Path) -> Path:
    """A speculators DFlash head relabelled as a DSpark one with both heads off: the same
    network (speculators' DSpark model is its DFlash model plus the heads), in the algorithm
    mlx-dspark reads (it translates only ``dspark``), its tap ids as mlx-dspark reads them."""
    for_mlx_dspark(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config.update(
        architectures=["DSparkSpeculator"],
        speculators_model_type="dspark",
        markov_rank=0,
        enable_confidence_head=False,
        confidence_head_with_markov=False,
    )
    config["speculators_config"]["algorithm"] = "dspark"
    (dst / "config.json").write_text(json.dumps(config, indent=1))
    return dst
