"""DeepSeek DeepSpec ``Gemma4DSparkModel`` checkpoints (``deepseek-ai/dspark_gemma4_12b_block7``,
and the same class with the heads off: the DFlash baseline ``deepseek-ai/dflash_gemma4_12b_block7``).

config.json: a copy of the target's ``gemma4_text`` config with the drafter's
``num_hidden_layers``, ``block_size``, ``mask_token_id``, ``target_layer_ids``, ``markov_rank``
(0: no Markov head), ``enable_confidence_head``, ``confidence_head_with_markov``. Layers are
stock Gemma-4 global-attention layers (``global_head_dim``, ``num_global_key_value_heads`` and
K = V when ``attention_k_eq_v``, scale 1, the full-attention proportional RoPE), the drafter
has its own ``embed_tokens`` (scaled by sqrt(hidden)) and untied ``lm_head`` (soft-capped),
and the anchor slot predicts: a block of 7 drafts 7 tokens.
"""

from __future__ import annotations

from pathlib import Path

from ..drafting import BlockLayout
from ..validate import Fields
from .base import DraftShape, Spec
from .layers import Gemma4Layer


def read_spec(directory: Path, config: dict) -> Spec:
    f = Fields(config, directory / "config.json")
    if config.get("enable_moe_block") or config.get("hidden_size_per_layer_input"):
        raise Fields(config, directory / "config.json")._fail(
            "enable_moe_block / hidden_size_per_layer_input",
            "set",
            "dense layers (DeepSpec's Gemma-4 drafter has no others)",
        )
    kind = config.get("markov_head_type", "vanilla")
    if kind not in ("vanilla", None):
        raise Fields(config, directory / "config.json")._fail(
            "markov_head_type", kind, '"vanilla" (gated and rnn heads are not supported)'
        )
    H, L = f.int("hidden_size"), f.int("num_hidden_layers", "draft_layers")
    heads = f.int("num_attention_heads")
    k_eq_v = f.bool("attention_k_eq_v", default=False)
    kv = (
        f.int("num_global_key_value_heads", "num_key_value_heads")
        if k_eq_v and f.has("num_global_key_value_heads")
        else f.int("num_key_value_heads")
    )
    hd = f.int("global_head_dim", "head_dim", default=config.get("head_dim"))
    ffn, eps = f.int("intermediate_size"), f.float("rms_norm_eps", "rms_norm_eps", default=1e-6)
    rope = Fields(f.dict("rope_parameters"), directory / "config.json").dict("full_attention") or {
        "rope_theta": 1e6,
        "rope_type": "proportional",
        "partial_rotary_factor": 0.25,
    }
    Fields(rope, directory / "config.json").float("rope_theta", "rope_theta", default=1e6)
    rank = f.int("markov_rank", default=0)
    confidence = f.bool("enable_confidence_head", default=False)
    vocab, block = f.int("vocab_size"), f.int("block_size")
    softcap = f.float("final_logit_softcapping", "softcap", default=30.0)
    max_pos = f.int("max_position_embeddings", default=262144)

    def layers():
        return [
            Gemma4Layer(
                H,
                heads=heads,
                kv_heads=kv,
                head_dim=hd,
                ffn=ffn,
                eps=eps,
                rope=rope,
                k_eq_v=k_eq_v,
                max_positions=max_pos,
            )
            for _ in range(L)
        ]

    return Spec(
        format="deepspec",
        variant="DSpark" if rank or confidence else "DFlash baseline",
        hidden=H,
        vocab=vocab,
        draft_vocab=vocab,
        taps=f.ints("target_layer_ids", "tap_layer"),
        block_size=block,
        mask_token_id=f.int("mask_token_id"),
        layout=BlockLayout(),
        make_layers=layers,
        eps=eps,
        own_embedding=True,
        embed_scale=H**0.5,
        own_head=True,
        softcap=softcap or None,
        markov_rank=rank,
        confidence=confidence,
        confidence_with_markov=f.bool("confidence_head_with_markov", default=True) and rank > 0,
        num_target_layers=f.int("num_target_layers", "num_hidden_layers") if f.has("num_target_layers") else None,
        quantization=config.get("quantization"),
    )


def new_config(shape: DraftShape) -> dict:
    """A DeepSpec ``Gemma4DSparkModel`` config.json for ``shape``: Gemma-4 global layers (its own
    embedding and head, proportional partial RoPE), the anchor slot predicting. DeepSpec has no
    context window (``dspark.convert`` refuses one before this)."""
    return {
        "architectures": ["Gemma4DSparkModel"],
        "model_type": "gemma4_text",
        "target_model_type": "gemma4",
        "target_text_model_type": "gemma4_text",
        "hidden_size": shape.hidden,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "global_head_dim": shape.head_dim,
        "intermediate_size": shape.intermediate,
        "vocab_size": shape.vocab,
        "rms_norm_eps": shape.eps,
        "attention_k_eq_v": False,
        "layer_types": ["full_attention"] * shape.layers,
        "rope_parameters": {
            "full_attention": {"rope_theta": 1e6, "rope_type": "proportional", "partial_rotary_factor": 0.25}
        },
        "max_position_embeddings": shape.max_positions,
        "final_logit_softcapping": shape.softcap or 0.0,
        "tie_word_embeddings": False,
        "num_target_layers": shape.num_target_layers,
        "block_size": shape.block_size,
        "mask_token_id": shape.mask_token_id,
        "target_layer_ids": list(shape.taps),
        "num_anchors": 512,
        "markov_rank": shape.markov_rank,
        "markov_head_type": "vanilla",
        "enable_confidence_head": shape.confidence,
        "confidence_head_with_markov": shape.markov_rank > 0,
        "torch_dtype": "float32",
    }
