"""Tiny random Gemma-4 targets built in code (no downloads), float32."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models import gemma4_text

from dspark import Target


def tiny_args(window: int = 16, shared: int = 0, per_layer: int = 0, layers: int = 6, vocab: int = 64, **kw):
    base = dict(
        model_type="gemma4_text",
        hidden_size=64,
        num_hidden_layers=layers,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        global_head_dim=32,
        vocab_size=vocab,
        vocab_size_per_layer_input=vocab,
        num_kv_shared_layers=shared,
        hidden_size_per_layer_input=per_layer,
        sliding_window=window,
        sliding_window_pattern=3,
        max_position_embeddings=4096,
        final_logit_softcapping=30.0,
        tie_word_embeddings=True,
    )
    base.update(kw)
    return gemma4_text.ModelArgs.from_dict(base)


def tiny_model(seed: int = 0, scale: float = 1.0, **kw):
    mx.random.seed(seed)
    model = gemma4_text.Model(tiny_args(**kw))
    if scale != 1.0:
        # Sharper random logits make greedy continuations less flat (more like a trained model).
        model.model.embed_tokens.weight = model.model.embed_tokens.weight * scale
    mx.eval(model.parameters())
    return model


def tiny_target(seed: int = 0, **kw) -> Target:
    return Target(tiny_model(seed, **kw))
