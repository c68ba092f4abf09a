"""Miniature Gemma-4 assistant (MTP) drafters in the published layout of
``google/gemma-4-*-it-assistant`` (config keys, the nested Gemma-4 text config of 4 all-KV-shared
layers, weight names as transformers' ``Gemma4AssistantForCausalLM`` saves them: ``model.*``,
``pre_projection``, ``post_projection``, ``masked_embedding.centroids`` and an int64
``masked_embedding.token_ordering``, the head tied to ``model.embed_tokens`` and not saved), for
the miniature targets of ``tests/miniatures.py``. Only sizes shrink.

Random weights accept almost nothing, so the weights carry a planted preference: the
assistant's embedding is the target's (its head is tied to it) and ``pre_projection`` passes the
token's embedding through, so the assistant tends to propose its input token again, which the
miniature targets' greedy runs often repeat; small random layers and a random part of the
projection make rounds differ.

No tests here; ``test_assistant.py`` uses these writers and ``reference/assistant_ref.py`` loads
them with transformers' own classes.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import mlx.core as mx
import numpy as np

#: Where the miniature target families keep their text config (``miniatures.FAMILIES``).
UNIFIED = {"12b"}


def text_config(target_text: dict, *, layers: int = 4, heads: int = 4, unified: bool = False) -> dict:
    """The assistant's nested Gemma-4 text config: the target's head widths, window and RoPE (its
    layers read the target's K/V), its own width and layer count, every layer KV-shared."""
    t = target_text
    kinds = ["sliding_attention"] * (layers - 1) + ["full_attention"]
    return {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attention_k_eq_v": t.get("attention_k_eq_v", False),
        "enable_moe_block": False,
        "final_logit_softcapping": None,
        "global_head_dim": t["global_head_dim"],
        "head_dim": t["head_dim"],
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": t["hidden_size"],
        "hidden_size_per_layer_input": 0,
        "intermediate_size": 2 * t["hidden_size"],
        "layer_types": kinds,
        "max_position_embeddings": t["max_position_embeddings"],
        "model_type": "gemma4_unified_text" if unified else "gemma4_text",
        "num_attention_heads": heads,
        "num_global_key_value_heads": t.get("num_global_key_value_heads"),
        "num_hidden_layers": layers,
        "num_key_value_heads": t["num_key_value_heads"],
        "num_kv_shared_layers": layers,
        "pad_token_id": 0,
        "rms_norm_eps": t["rms_norm_eps"],
        "rope_parameters": copy.deepcopy(t["rope_parameters"]),
        "sliding_window": t["sliding_window"],
        "tie_word_embeddings": True,
        "use_double_wide_mlp": False,
        "vocab_size": t["vocab_size"],
        "vocab_size_per_layer_input": 0,
    }


def weights(
    text: dict, backbone: int, embed: np.ndarray, *, ordered: dict | None, seed: int, noise: float = 0.08
) -> dict[str, np.ndarray]:
    """transformers' names -> float32 values (see the module docstring for the planted preference)."""
    rng = np.random.default_rng(seed)
    H, V = text["hidden_size"], text["vocab_size"]

    def r(*shape, std=0.02):
        return (std * rng.standard_normal(shape)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": embed[:, :H].astype(np.float32), "model.norm.weight": norm(H)}
    pre = r(H, 2 * backbone, std=noise / np.sqrt(2 * backbone))
    pre[:, :H] += np.eye(H, backbone, dtype=np.float32)[:, :H] / np.sqrt(backbone)
    w["pre_projection.weight"] = pre
    w["post_projection.weight"] = r(backbone, H, std=1.0 / np.sqrt(H))
    for i, kind in enumerate(text["layer_types"]):
        hd = text["global_head_dim"] if kind == "full_attention" else text["head_dim"]
        heads = text["num_attention_heads"]
        p = f"model.layers.{i}."
        w.update(
            {
                p + "input_layernorm.weight": norm(H),
                # the sublayers' outputs are normed to unit size: a small norm weight keeps them a
                # perturbation of the planted input, not its replacement
                p + "post_attention_layernorm.weight": 0.05 * norm(H),
                p + "pre_feedforward_layernorm.weight": norm(H),
                p + "post_feedforward_layernorm.weight": 0.05 * norm(H),
                p + "layer_scalar": np.full((1,), 0.5, np.float32),
                p + "self_attn.q_proj.weight": r(heads * hd, H, std=0.2),
                p + "self_attn.q_norm.weight": norm(hd),
                p + "self_attn.o_proj.weight": r(H, heads * hd),
                p + "mlp.gate_proj.weight": r(text["intermediate_size"], H),
                p + "mlp.up_proj.weight": r(text["intermediate_size"], H),
                p + "mlp.down_proj.weight": r(H, text["intermediate_size"]),
            }
        )
    if ordered:
        C = ordered["num_centroids"]
        w["masked_embedding.centroids.weight"] = r(C, H, std=0.5)
        w["masked_embedding.token_ordering"] = rng.permutation(V).astype(np.int64)
    return w


def write(
    path: Path,
    target_dir: Path,
    *,
    ordered: bool = False,
    seed: int = 7,
    block: int | None = 4,
    backbone: int | None = None,
    vocab: int | None = None,
    noise: float = 0.08,
    dtype: str = "bfloat16",
) -> Path:
    """An assistant for the miniature target in ``target_dir`` (its config.json and embedding read
    from there), as ``google/gemma-4-*-it-assistant`` publishes one: config.json,
    model.safetensors, generation_config.json with num_assistant_tokens (None: no such file).
    ``backbone`` / ``vocab`` override what the assistant was made for (the refusal cases)."""
    top = json.loads((target_dir / "config.json").read_text())
    t = top.get("text_config", top)
    unified = top.get("model_type") == "gemma4_unified"
    text = text_config(t, unified=unified)
    if vocab:
        text["vocab_size"] = vocab
    embed = _target_embedding(target_dir, text["vocab_size"])
    backbone = backbone or t["hidden_size"]
    centroids = {"num_centroids": 16, "centroid_intermediate_top_k": 4}
    config = {
        "architectures": ["Gemma4UnifiedAssistantForCausalLM" if unified else "Gemma4AssistantForCausalLM"],
        "backbone_hidden_size": backbone,
        **centroids,
        "dtype": dtype,
        "model_type": "gemma4_unified_assistant" if unified else "gemma4_assistant",
        "text_config": text,
        "tie_word_embeddings": True,
        "transformers_version": "5.25.0",
        "use_ordered_embeddings": ordered,
    }
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    arrays = weights(text, backbone, embed, ordered=centroids if ordered else None, seed=seed, noise=noise)
    store = {
        k: mx.array(v) if v.dtype == np.int64 else mx.array(v).astype(getattr(mx, dtype)) for k, v in arrays.items()
    }
    mx.save_safetensors(str(path / "model.safetensors"), store, metadata={"format": "pt"})
    if block is not None:
        gen = {"bos_token_id": 2, "eos_token_id": 1, "num_assistant_tokens": block, "pad_token_id": 0}
        (path / "generation_config.json").write_text(json.dumps(gen, indent=2))
    return path


def _target_embedding(target_dir: Path, vocab: int) -> np.ndarray:
    """The miniature target's embedding table (float32), dequantised if it is stored quantised;
    rows repeated up to ``vocab`` when the assistant is made for another vocabulary."""
    tensors = {}
    for f in sorted(target_dir.glob("*.safetensors")):
        tensors.update(mx.load(str(f)))
    name = next(k for k in tensors if k.endswith("embed_tokens.weight") and "per_layer" not in k)
    e = tensors[name]
    base = name.removesuffix(".weight")
    if e.dtype == mx.uint32:
        top = json.loads((target_dir / "config.json").read_text())["quantization"]
        e = mx.dequantize(e, tensors[base + ".scales"], tensors[base + ".biases"], top["group_size"], top["bits"])
    e = np.array(e.astype(mx.float32))
    return np.resize(e, (vocab, e.shape[1]))


def text_only(src: Path, dst: Path) -> Path:
    """A miniature target (``miniatures.write_hf``) as a text-only ``Gemma4ForCausalLM`` in float32:
    the text config at the top, ``model.language_model.*`` renamed ``model.*``, towers left out,
    the tokenizer kept. Both transformers and mlx-lm (``gemma4_text``) load it, so transformers'
    assisted generation and dspark run the very same weights."""
    top = json.loads((src / "config.json").read_text())
    config = {**top["text_config"], "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text"}
    config.update(eos_token_id=1, dtype="float32")
    dst.mkdir(parents=True)
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    tensors = {}
    for f in sorted(src.glob("*.safetensors")):
        tensors.update(mx.load(str(f)))
    prefix = "model.language_model."
    text = {"model." + k[len(prefix) :]: v.astype(mx.float32) for k, v in tensors.items() if k.startswith(prefix)}
    mx.save_safetensors(str(dst / "model.safetensors"), text, metadata={"format": "pt"})
    for f in src.iterdir():
        if f.name.startswith("tokenizer") or f.name in ("special_tokens_map.json", "chat_template.jinja"):
            shutil.copy(f, dst / f.name)
    return dst


def as_float32(src: Path, dst: Path) -> Path:
    """A copy of a miniature target with every floating-point tensor in float32 (the values
    unchanged; quantised weights stay packed, their scales widened): on it the verify forward and
    plain decoding round alike, so greedy speculative output must equal plain decoding token for
    token, which on bf16 and quantised targets holds up to numerical ties (``dspark.lossless``)."""
    shutil.copytree(src, dst)
    for f in sorted(dst.glob("*.safetensors")):
        tensors = mx.load(str(f))
        wide = {k: v.astype(mx.float32) if mx.issubdtype(v.dtype, mx.floating) else v for k, v in tensors.items()}
        mx.save_safetensors(str(f), wide, metadata={"format": "pt"})
    return dst
