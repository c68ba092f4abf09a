"""z-lab DFlash heads (``DFlashDraftModel``, e.g. ``z-lab/gemma-4-31B-it-DFlash``), as z-lab's own
MLX loader (``dflash.model_mlx.load_draft``) reads them.

config.json: Qwen3-style sizes at the top level; ``dflash_config{target_layer_ids,
mask_token_id}`` (also accepted at the top level); ``block_size`` and
``final_logit_softcapping`` in ``dflash_config`` or at the top level; RoPE from ``rope_theta``,
else ``rope_parameters`` / ``rope_scaling``; ``layer_types`` with ``sliding_window`` and
``is_causal``. Weights: ``fc``, ``hidden_norm``, ``layers.*``, ``norm``: no embedding or head;
the target's are used.

A block of B slots is ``[anchor, mask x (B-1)]``; slot 0's output is discarded and slot k
predicts anchor + k, so a round drafts B - 1 tokens. The block embedding is the target's,
times its sqrt(hidden) scale and ``input_embedding_scale``; logits are the target's head times
``output_multiplier``, soft-capped with the drafter's own ``final_logit_softcapping``.
Sliding-window draft layers see each slot's last ``sliding_window - 1`` positions and are
causal inside the block unless ``is_causal`` says otherwise; full layers are bidirectional.
Windows are taken by position, as z-lab's reference (Transformers) code does: z-lab's MLX code
takes them by buffer index, which differs after a round that accepted nothing.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..drafting import BlockLayout
from ..validate import Fields
from .base import DraftShape, Spec
from .layers import Qwen3Layer


def read_spec(directory: Path, config: dict) -> Spec:
    f = Fields(config, directory / "config.json")
    dc = f.dict("dflash_config")
    inner = dc if "target_layer_ids" in dc else config
    taps = f.ints("target_layer_ids", "tap_layer", config=inner)
    mask = f.int("mask_token_id", config=dc if "mask_token_id" in dc else config)
    block = f.int("block_size", config=dc if "block_size" in dc else config, default=16)
    if block < 2:
        raise Fields(config, directory / "config.json")._fail(
            "block_size", block, "at least 2 (the anchor and a draft)"
        )
    H, L = f.int("hidden_size"), f.int("num_hidden_layers", "draft_layers")
    args = qwen3_layer_args(f)
    eps = args["eps"]
    kinds = config.get("layer_types") or ["full_attention"] * L
    if not isinstance(kinds, list) or len(kinds) != L or set(kinds) - {"full_attention", "sliding_attention"}:
        raise Fields(config, directory / "config.json")._fail(
            "layer_types", kinds, f"{L} entries of full_attention / sliding_attention"
        )
    sliding = [k == "sliding_attention" for k in kinds]
    window = f.int("sliding_window") if any(sliding) else None
    forced = config.get("is_causal")
    causal = tuple(bool(forced) if isinstance(forced, bool) else s for s in sliding)
    softcap = f.float("final_logit_softcapping", "softcap", default=dc.get("final_logit_softcapping", 0.0))
    out_mult = f.float("output_multiplier", "scale", default=1.0, config=dc)
    ies = f.float("input_embedding_scale", "scale", default=1.0, config=dc)
    notes, scale = [], None
    if ies != 1.0:
        # z-lab's MLX code multiplies the target's sqrt(H)-scaled embedding by this; its
        # Transformers code multiplies the raw table. When the value is sqrt(H) itself, the two
        # agree only if sqrt(H) is applied once.
        if abs(ies - math.sqrt(H)) / math.sqrt(H) < 0.05:
            scale = ies
            notes.append("input_embedding_scale is sqrt(hidden): applied once")
        else:
            scale = math.sqrt(H) * ies
    vocab = f.int("vocab_size")
    num_target = f.int("num_target_layers", "num_hidden_layers") if f.has("num_target_layers") else None

    def layers():
        return [Qwen3Layer(H, **args) for _ in range(L)]

    layout = BlockLayout(anchor_predicts=False, windows=tuple(window if s else None for s in sliding), causal=causal)
    return Spec(
        format="zlab-dflash",
        variant="DFlash",
        hidden=H,
        vocab=vocab,
        draft_vocab=vocab,
        taps=taps,
        block_size=block - 1,
        mask_token_id=mask,
        layout=layout,
        make_layers=layers,
        eps=eps,
        own_embedding=False,
        embed_scale=scale,
        own_head=False,
        softcap=softcap or None,
        output_multiplier=out_mult,
        num_target_layers=num_target,
        quantization=config.get("quantization"),
        notes=notes,
    )


def qwen3_layer_args(f: Fields) -> dict:
    """The keyword arguments of a z-lab head's ``Qwen3Layer`` (its width aside), read from config.json."""
    H, heads = f.int("hidden_size"), f.int("num_attention_heads")
    rope = f.dict("rope_parameters") or f.dict("rope_scaling")
    return dict(
        heads=heads,
        kv_heads=f.int("num_key_value_heads"),
        head_dim=f.int("head_dim", default=H // heads),
        ffn=f.int("intermediate_size"),
        eps=f.float("rms_norm_eps", "rms_norm_eps", default=1e-6),
        rope_theta=f.float("rope_theta", "rope_theta", default=rope.get("rope_theta", 10000.0)),
        rope_scaling=rope or None,
        max_positions=f.int("max_position_embeddings", default=131072),
    )


def new_config(shape: DraftShape) -> dict:
    """A z-lab DFlash config.json for ``shape``: a block of ``block_size + 1`` slots (slot 0 is the
    anchor only); a context window becomes sliding-window layers, each slot seeing its last
    ``window + 1`` positions (z-lab windows by position), bidirectional inside the block. z-lab
    heads have no Markov or confidence head (``dspark.convert`` refuses those before this)."""
    kinds = ["sliding_attention" if shape.window else "full_attention"] * shape.layers
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": shape.hidden,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "intermediate_size": shape.intermediate,
        "vocab_size": shape.vocab,
        "rms_norm_eps": shape.eps,
        "rope_theta": shape.rope_theta,
        "max_position_embeddings": shape.max_positions,
        "num_target_layers": shape.num_target_layers,
        "layer_types": kinds,
        "sliding_window": shape.window + 1 if shape.window else None,
        "is_causal": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "dflash_config": {
            "block_size": shape.block_size + 1,
            "mask_token_id": shape.mask_token_id,
            "target_layer_ids": list(shape.taps),
            **({"final_logit_softcapping": shape.softcap} if shape.softcap else {}),
        },
    }
