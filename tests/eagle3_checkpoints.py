"""Synthetic EAGLE-3 heads in the speculators layout (``Eagle3SpeculatorConfig`` as it serializes:
``speculators_model_type``, ``speculators_config`` with its greedy proposal method and verifier,
the decoder under ``transformer_layer_config``, ``draft_vocab_size``, ``norm_before_residual``,
``norm_before_fc``, ``fc_norm``, ``norm_output``, ``eagle_aux_hidden_state_layer_ids``,
``target_hidden_size``; weights named as ``Eagle3DraftModel``'s state dict: ``d2t`` int64,
``t2d`` bool, ``fc``, ``layers.0.*`` with its ``hidden_norm`` and 2H-wide q/k/v, ``norm``,
``lm_head``, ``embed_tokens``), for the tiny target of ``drafter_checkpoints`` and the miniature
Gemma-4 layouts of ``miniatures``.

A random head accepts almost nothing, so the weights carry a planted preference: the first
layer's queries and keys read the token's embedding (so a step attends mostly to its own
token) and its values carry that embedding out through ``o_proj``, and ``lm_head``'s rows are
the target's embeddings of the draft vocabulary: a step drafts, mostly, the token it was fed.
The targets repeat their current token in runs, so acceptance varies from round to round.

No tests here; ``test_eagle3.py`` uses these writers.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
from drafter_checkpoints import draft_vocabulary


def _r(*shape, std=0.05):
    return (mx.random.normal(shape) * std).astype(mx.float32)


def write_eagle3(
    path: Path,
    embedding: mx.array,
    frequent: list[int],
    *,
    num_target_layers: int,
    aux_ids: list[int] | None,
    draft_vocab: int = 48,
    seed: int = 7,
    arch: str = "llama",
    layers: int = 1,
    block: int = 5,
    with_embedding: bool = True,
    norm_before_residual: bool = True,
    norm_before_fc: bool = False,
    fc_norm: bool = False,
    norm_output: bool = False,
    sliding_window: int | None = None,
    hidden_act: str = "silu",
    focus: float = 1.5,
    dtype=mx.float32,
) -> Path:
    """An EAGLE-3 head for a target whose embedding table is ``embedding`` [V, H] (unscaled, as
    speculators' ``embed_tokens`` holds it), reading ``aux_ids`` (None: the key left out, for
    speculators' default of the target's ``num_target_layers``), drafting ``block`` tokens a
    round over the ``draft_vocab`` ids most frequent in ``frequent`` (the whole vocabulary when
    ``draft_vocab`` is the vocabulary's size: no d2t table). ``sliding_window``: every layer
    slides with that window (speculators' default makes every draft layer sliding)."""
    mx.random.seed(seed)
    V, H = embedding.shape
    heads, hd = 4, H // 4
    n_aux = len(aux_ids) if aux_ids is not None else 3
    emb = embedding.astype(mx.float32)
    chosen = draft_vocabulary(frequent, draft_vocab, V) if draft_vocab < V else list(range(V))
    eye, zero = mx.eye(H), mx.zeros((H, H))
    w = {
        "fc.weight": _r(H, n_aux * H, std=0.05),
        "norm.weight": mx.ones((H,)),
        "lm_head.weight": emb[mx.array(chosen)],
    }
    if draft_vocab < V:
        t2d = np.zeros(V, np.bool_)
        t2d[chosen] = True
        w["d2t"] = mx.array(np.array(chosen, np.int64) - np.arange(draft_vocab, dtype=np.int64))
        w["t2d"] = mx.array(t2d)
    if with_embedding:
        w["embed_tokens.weight"] = emb
    if norm_before_fc:
        w["input_norm.weight"] = 1.0 + _r(n_aux * H, std=0.1)
    if fc_norm:
        for i in range(n_aux):
            w[f"fc_norm.{i}.weight"] = 1.0 + _r(H, std=0.1)
    for i in range(layers):
        p = f"layers.{i}."
        first = i == 0
        read_embedding = mx.concatenate([eye, zero], axis=1) if first else eye  # [H, 2H]: the embedding half
        w[p + "input_layernorm.weight"] = mx.ones((H,))
        w[p + "post_attention_layernorm.weight"] = mx.ones((H,))
        if first:
            w[p + "hidden_norm.weight"] = mx.ones((H,))
        w[p + "self_attn.q_proj.weight"] = focus * read_embedding + _r(H, read_embedding.shape[1], std=0.1)
        w[p + "self_attn.k_proj.weight"] = focus * read_embedding + _r(H, read_embedding.shape[1], std=0.1)
        w[p + "self_attn.v_proj.weight"] = read_embedding + _r(H, read_embedding.shape[1])
        w[p + "self_attn.o_proj.weight"] = 3.0 * eye + _r(H, H)
        if arch == "qwen3":
            w[p + "self_attn.q_norm.weight"] = mx.ones((hd,))
            w[p + "self_attn.k_norm.weight"] = mx.ones((hd,))
        w[p + "mlp.gate_proj.weight"] = _r(128, H)
        w[p + "mlp.up_proj.weight"] = _r(128, H)
        w[p + "mlp.down_proj.weight"] = _r(H, 128)
    layer_config = {
        "model_type": arch,
        "architectures": ["LlamaForCausalLM" if arch == "llama" else "Qwen3ForCausalLM"],
        "hidden_size": H,
        "intermediate_size": 128,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_dim": hd,
        "hidden_act": hidden_act,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "vocab_size": V,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "layer_types": ["sliding_attention" if sliding_window else "full_attention"] * layers,
        "sliding_window": sliding_window,
        "use_sliding_window": bool(sliding_window),
    }
    config = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {
                    "proposal_type": "greedy",
                    "speculative_tokens": block,
                    "verifier_accept_k": 1,
                    "accept_tolerance": 0.0,
                }
            ],
            "verifier": {"name_or_path": None, "architectures": ["Gemma4ForConditionalGeneration"]},
        },
        "transformer_layer_config": layer_config,
        "draft_vocab_size": draft_vocab,
        "norm_before_residual": norm_before_residual,
        "target_hidden_size": None,
        "eagle_aux_hidden_state_layer_ids": aux_ids,
        "norm_before_fc": norm_before_fc,
        "fc_norm": fc_norm,
        "norm_output": norm_output,
        "embed_requires_grad": False,
        "dtype": "float32" if dtype == mx.float32 else "bfloat16",
    }
    if aux_ids is None:
        config.pop("eagle_aux_hidden_state_layer_ids")
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=1))
    weights = {k: (v.astype(dtype) if mx.issubdtype(v.dtype, mx.floating) else v) for k, v in w.items()}
    mx.save_safetensors(str(path / "model.safetensors"), weights, metadata={"format": "pt"})
    return path


def edit_config(path: Path, **changes) -> Path:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config, indent=1))
    return path
