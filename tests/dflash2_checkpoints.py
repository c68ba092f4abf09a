"""Synthetic DFlash 2 checkpoints in the published layout, for the tiny target of
``drafter_checkpoints``: config.json as z-lab's ``dflash.model_mlx.load_draft`` and mlx-vlm's
``DFlash2Config.from_dict`` read it (architectures ``DFlash2DraftModel``, Qwen3 sizes at the
top level, the DFlash 2 runtime under ``dflash_config``), weights under the names they load:
z-lab DFlash's, per layer ``attention_conv`` / ``mlp_conv`` (``base_kernel``,
``kernel_projection.weight``), and ``candidate_selector.predecessor_codebook`` /
``successor_codebook`` stored without ``.weight`` (both loaders rename them) and
``candidate_selector.hidden_projection.weight``.

As in ``drafter_checkpoints``, the layers carry the anchor's embedding into the mask slots (the
tiny target repeats tokens in runs), so acceptance varies from round to round; the convolutions
start near the identity (speculators' initialisation) with a random part, and the selector's
codebooks are random enough to reorder close candidates.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
from drafter_checkpoints import TAPS, VOCAB, H, _qwen3_layers, _r, _save

KERNEL, GROUP, RANK, TOP_K = 2, 16, 16, 8


def _conv(prefix: str) -> dict:
    base = _r(2, KERNEL, H, std=0.1)
    base[:, 0] = base[:, 0] + 1.0  # near the identity, as speculators initialises it
    return {
        prefix + "base_kernel": base,
        prefix + "kernel_projection.weight": _r(2 * KERNEL * (H // GROUP), H, std=0.05),
    }


def write_dflash2(
    path: Path,
    *,
    sliding: bool = False,
    causal: bool | None = None,
    block: int = 8,
    runtime: int | None = None,
    window: int | None = None,
    seed: int = 3,
    vocab: int = VOCAB,
) -> Path:
    """A 2-layer DFlash 2 head (the first layer sliding, window 8, when ``sliding``; ``causal``:
    the top-level ``is_causal``, None to leave it out), ``block`` slots, ``runtime`` and
    ``window`` as ``runtime_block_size`` and ``draft_window_size`` when given."""
    mx.random.seed(seed)
    dflash = {
        "block_size": block,
        "mask_token_id": 4,
        "target_layer_ids": TAPS,
        "conv_kernel_size": KERNEL,
        "conv_group_size": GROUP,
        "selector_rank": RANK,
        "selector_top_k": TOP_K,
        "input_embedding_scale": 1.0,
        "output_multiplier": 1.0,
        "final_logit_softcapping": 30.0,
    }
    if runtime is not None:
        dflash["runtime_block_size"] = runtime
    if window is not None:
        dflash["draft_window_size"] = window
    config = {
        "architectures": ["DFlash2DraftModel"],
        "model_type": "qwen3",
        "hidden_size": H,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 16,
        "intermediate_size": 128,
        "hidden_act": "silu",
        "vocab_size": vocab,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 4096,
        "num_target_layers": 6,
        "layer_types": ["sliding_attention" if sliding else "full_attention", "full_attention"],
        "sliding_window": 8,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "dflash_config": dflash,
    }
    if causal is not None:
        config["is_causal"] = causal
    w = {
        "fc.weight": _r(H, len(TAPS) * H),
        "hidden_norm.weight": mx.full((H,), 0.02),
        "norm.weight": mx.ones((H,)),
        **_qwen3_layers(2),
        "candidate_selector.predecessor_codebook": _r(vocab, RANK, std=0.2),
        "candidate_selector.successor_codebook": _r(vocab, RANK, std=0.2),
        "candidate_selector.hidden_projection.weight": _r(RANK, H, std=0.3),
    }
    for i in range(2):
        w.update(_conv(f"layers.{i}.attention_conv."))
        w.update(_conv(f"layers.{i}.mlp_conv."))
    return _save(path, config, w)
