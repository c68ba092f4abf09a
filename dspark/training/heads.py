"""New autoregressive drafter heads for ``dspark train --kind eagle3|assistant``, made in the
published layouts their formats read (``dspark.formats.eagle3``, ``dspark.formats.assistant``),
and written back in them after training.

- ``eagle3``: the speculators EAGLE-3 layout, inside what mlx-vlm's EAGLE-3 port runs: llama
  layers, SiLU, full attention, no ``fc_norm``, no ``input_norm``, the draft vocabulary the
  target's (no ``d2t``), and the target's embedding table (unscaled) shipped as its own
  ``embed_tokens``, frozen (``embed_requires_grad`` false: speculators copies the verifier's
  table so, and mlx-vlm's port reads it from the head). Its taps are ``--taps`` (written as
  vLLM's ids: layer + 1).
- ``assistant``: Google's ``gemma4_assistant`` layout: config.json with the nested Gemma-4
  ``text_config`` (the target's head widths, window and RoPE, since its layers read the target's
  K/V; ``layers - 1`` sliding layers and a full one, as Google's), ``backbone_hidden_size``, a
  head tied to its own embedding (started as the target's), generation_config.json's
  ``num_assistant_tokens``.

Each config.json carries ``"dspark": {"trained_as": ...}`` (the head's settings, what
``--resume`` checks) and the target's weights fingerprint; readers of the format ignore it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from ..config import default_taps
from ..errors import DsparkError
from ..files import save_safetensors, write_text
from ..formats import assistant, eagle3
from ..formats.base import EXTENSION
from ..target import Target

KINDS = ("block", "eagle3", "assistant")
AR_KINDS = ("eagle3", "assistant")
HEAD_DIM = 64  # the EAGLE-3 head's attention heads (its width / 64 of them)


@dataclass(frozen=True, kw_only=True)
class HeadConfig:
    """An autoregressive head's shape: ``kind`` (eagle3 or assistant), the drafts a round it is
    trained and shipped for (``block_size``), its ``num_layers``, its MLP width
    (``intermediate_size``, 0: twice its width) and, for EAGLE-3, the target layers it taps
    (empty: speculators' default of the target's depth, as dspark's default taps)."""

    kind: str
    block_size: int = 5
    num_layers: int = 1
    intermediate_size: int = 0
    tap_layers: tuple[int, ...] = ()

    @classmethod
    def from_dict(cls, d: dict) -> HeadConfig:
        fields = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        fields["tap_layers"] = tuple(fields.get("tap_layers") or ())
        return cls(**fields)


def new_head(target: Target, cfg: HeadConfig, *, seed: int):
    """A new ``cfg`` head for ``target`` (its first weights from ``seed``), loaded as its format
    loads one: an ``Eagle3Drafter`` or an ``AssistantDrafter``."""
    mx.random.seed(seed)
    config = (eagle3_config if cfg.kind == "eagle3" else assistant_config)(target, cfg)
    if cfg.kind == "eagle3":
        # the target's table shipped as the head's own (mlx-vlm's port reads it from the head)
        spec = eagle3.read_spec(Path("<new head>"), config, names={"embed_tokens.weight"})
        net = spec.net()
        _init(net)
        table = target.projection.table(mx.arange(spec.vocab)).astype(mx.float32)
        net.lm_head.weight = table
        net.embed_tokens.weight = table
        drafter = eagle3.Eagle3Drafter(spec, net, config, draft_to_target=None)
    else:
        spec = assistant.read_spec(Path("<new head>"), config)
        spec = _with_block(spec, cfg.block_size)
        net = assistant.AssistantNet(spec)
        _init(net)
        layers = net.model.layers
        for layer in layers:  # sublayers start as small perturbations of the projected input
            layer.layer_scalar = mx.ones_like(layer.layer_scalar)
        table = target.projection.table(mx.arange(spec.vocab)).astype(mx.float32)
        net.model.embed_tokens.weight = table[:, : spec.text.hidden_size]
        drafter = assistant.AssistantDrafter(spec, net, config)
    drafter.check_target(target)
    mx.eval(drafter.net.parameters())
    return drafter


def _with_block(spec, block: int):
    return replace(spec, block_size=block)


def _init(net: nn.Module) -> None:
    """Small normal weights (std 0.02, as transformers initialises), norms at one."""

    def init(path: str, v: mx.array) -> mx.array:
        if "norm" in path or path.endswith("layer_scalar"):
            return mx.ones_like(v)
        return (0.02 * mx.random.normal(v.shape)).astype(mx.float32)

    net.update(tree_unflatten([(k, init(k, v)) for k, v in tree_flatten(net.parameters())]))


def _ext(target: Target, cfg: HeadConfig) -> dict:
    return {
        "trained_as": {**asdict(cfg), "tap_layers": list(cfg.tap_layers)},
        "target_weights": target.weights_fingerprint,
    }


def eagle3_config(target: Target, cfg: HeadConfig) -> dict:
    """speculators' ``Eagle3SpeculatorConfig`` as it serializes, for a head of ``cfg``'s shape."""
    d, args = target.dims, target.lm.args
    taps = cfg.tap_layers or default_taps(d.num_layers)
    H = d.hidden_size
    if H % HEAD_DIM:
        raise DsparkError(f"an EAGLE-3 head is made {HEAD_DIM}-wide per attention head; the target's width {H} is not")
    layer_config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": H,
        "intermediate_size": cfg.intermediate_size or 2 * H,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": H // HEAD_DIM,
        "num_key_value_heads": H // HEAD_DIM,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": args.max_position_embeddings,
        "rms_norm_eps": 1e-6,
        "vocab_size": d.vocab_size,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "layer_types": ["full_attention"] * cfg.num_layers,
        "sliding_window": None,
        "use_sliding_window": False,
    }
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "speculators_config": {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {
                    "proposal_type": "greedy",
                    "speculative_tokens": cfg.block_size,
                    "verifier_accept_k": 1,
                    "accept_tolerance": 0.0,
                }
            ],
            "verifier": {"name_or_path": None, "architectures": ["Gemma4ForCausalLM"]},
        },
        "transformer_layer_config": layer_config,
        "draft_vocab_size": d.vocab_size,
        "norm_before_residual": True,
        "target_hidden_size": H,
        "eagle_aux_hidden_state_layer_ids": [t + 1 for t in taps],
        "norm_before_fc": False,
        "fc_norm": False,
        "norm_output": False,
        "embed_requires_grad": False,
        "dtype": "float32",
        EXTENSION: _ext(target, cfg),
    }


def assistant_config(target: Target, cfg: HeadConfig) -> dict:
    """Google's ``Gemma4AssistantConfig`` as it serializes, for an assistant of ``cfg``'s shape
    whose layers read ``target``'s K/V."""
    args = target.lm.args
    if cfg.tap_layers:
        raise DsparkError("an assistant reads the target's last hidden state and K/V, not taps: leave out --taps")
    L, H = cfg.num_layers, args.hidden_size
    kinds = ["sliding_attention"] * (L - 1) + ["full_attention"]
    text = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attention_k_eq_v": bool(getattr(args, "attention_k_eq_v", False)),
        "enable_moe_block": False,
        "final_logit_softcapping": None,
        "global_head_dim": args.global_head_dim,
        "head_dim": args.head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": H,
        "hidden_size_per_layer_input": 0,
        "intermediate_size": cfg.intermediate_size or 2 * H,
        "layer_types": kinds,
        "max_position_embeddings": args.max_position_embeddings,
        "model_type": "gemma4_text",
        "num_attention_heads": args.num_attention_heads,
        "num_global_key_value_heads": args.num_global_key_value_heads,
        "num_hidden_layers": L,
        "num_key_value_heads": args.num_key_value_heads,
        "num_kv_shared_layers": L,
        "pad_token_id": 0,
        "rms_norm_eps": args.rms_norm_eps,
        "rope_parameters": json.loads(json.dumps(args.rope_parameters)),
        "sliding_window": args.sliding_window,
        "tie_word_embeddings": True,
        "use_double_wide_mlp": False,
        "vocab_size": args.vocab_size,
        "vocab_size_per_layer_input": 0,
    }
    return {
        "architectures": ["Gemma4AssistantForCausalLM"],
        "backbone_hidden_size": H,
        "num_centroids": 2048,
        "centroid_intermediate_top_k": 32,
        "dtype": "float32",
        "model_type": "gemma4_assistant",
        "text_config": text,
        "tie_word_embeddings": True,
        "transformers_version": "5.25.0",
        "use_ordered_embeddings": False,
        EXTENSION: _ext(target, cfg),
    }


def save_head(drafter, out: Path) -> None:
    """The head's files in its published layout: config.json, model.safetensors and, for an
    assistant, generation_config.json (its drafts a round)."""
    config = dict(drafter.config)
    write_text(out / "config.json", json.dumps(config, indent=2) + "\n")
    weights = dict(tree_flatten(drafter.net.parameters()))
    save_safetensors(out / "model.safetensors", weights, {"format": "pt"})
    if drafter.format == assistant.FORMAT:
        gen = {"bos_token_id": 2, "eos_token_id": 1, "num_assistant_tokens": drafter.block_size, "pad_token_id": 0}
        write_text(out / "generation_config.json", json.dumps(gen, indent=2) + "\n")


def head_config(drafter) -> HeadConfig:
    """The ``HeadConfig`` a head made here was made with (its config.json's ``trained_as``)."""
    made = (drafter.config.get(EXTENSION) or {}).get("trained_as")
    if not isinstance(made, dict) or made.get("kind") not in AR_KINDS:
        raise DsparkError(f"this {drafter.format} drafter was not made by dspark train: it cannot be trained further")
    return HeadConfig.from_dict(made)


__all__ = ["AR_KINDS", "KINDS", "HeadConfig", "head_config", "new_head", "save_head"]
