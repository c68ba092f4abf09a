"""The Gemma-4 target: an mlx-lm model with hidden-state taps and the frozen projection
(``dspark.loading.load_target`` makes one from a directory).

``Target`` wraps an mlx-lm Gemma-4 model without copying its forward loop. Taps are recorded
by putting a small proxy in place of each tapped decoder layer that stores the layer's output
(the residual stream after ``layer_scalar``, before the final norm), only for the duration of
one of our calls; plain mlx-lm decoding on the same model never sees it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from . import chat_template
from .errors import DsparkError, NotGemma4Error
from .gemma4 import cpu_safe_experts
from .rust_calls import rust_call
from .sampling import soft_cap


@dataclass(frozen=True, kw_only=True)
class TargetDims:
    """The target shapes a drafter depends on."""

    hidden_size: int
    num_layers: int
    vocab_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    final_logit_softcapping: float | None

    def to_dict(self) -> dict:
        return asdict(self)


class DraftProjection:
    """The target's frozen token embedding (times sqrt(d)) and output head (with soft-cap).

    The drafter has no embedding or head of its own: it borrows these, so its logits live in
    the target's vocabulary and its inputs are scaled exactly as the target's are.
    """

    def __init__(self, lm: nn.Module):
        self._lm = lm
        self.embed_scale = lm.model.embed_scale
        self.softcap = getattr(lm, "final_logit_softcapping", None)
        self.vocab_size = lm.model.embed_tokens.weight.shape[0]

    def table(self, ids: mx.array) -> mx.array:
        """Rows of the embedding table, unscaled."""
        return self._lm.model.embed_tokens(ids)

    def embed(self, ids: mx.array) -> mx.array:
        return self.table(ids) * self.embed_scale

    def head(self, h: mx.array) -> mx.array:
        """The output head's logits, before the soft-cap."""
        lm = self._lm
        return lm.model.embed_tokens.as_linear(h) if lm.tie_word_embeddings else lm.lm_head(h)

    def cap(self, x: mx.array) -> mx.array:
        """The target's soft-cap of head outputs (identity without one)."""
        return soft_cap(x, self.softcap)

    def logits(self, h: mx.array) -> mx.array:
        return self.cap(self.head(h))


def language_model(model: nn.Module) -> nn.Module:
    """The text model inside ``model``: itself, or the multimodal wrapper's language model."""
    lm = getattr(model, "language_model", model)
    inner = getattr(lm, "model", None)
    layers = getattr(inner, "layers", None)
    ok = (
        inner is not None
        and isinstance(layers, list)
        and len(layers) > 0
        and hasattr(inner, "embed_tokens")
        and hasattr(inner, "embed_scale")
        and hasattr(inner, "norm")
        and hasattr(inner, "previous_kvs")
        and all(hasattr(layer, "layer_scalar") and hasattr(layer, "self_attn") for layer in layers)
        and hasattr(lm, "final_logit_softcapping")
        and hasattr(model, "make_cache")
    )
    if not ok:
        kind = getattr(model, "model_type", type(model).__name__)
        raise NotGemma4Error(f"not a Gemma-4 model (model type {kind!r}): dspark needs a Gemma-4 target")
    return lm


class Target:
    """A Gemma-4 target model ready for speculative decoding."""

    def __init__(self, model: nn.Module, tokenizer=None, path: str | None = None, config: dict | None = None):
        self.model = model  # what mlx-lm's own generate_step is given
        self.lm = language_model(model)
        cpu_safe_experts(model)  # bf16 MoE experts cannot run on MLX's CPU backend otherwise
        self.tokenizer = tokenizer
        self.path = path
        args = self.lm.args
        self.config = config if config is not None else dict(vars(args))
        self.dims = TargetDims(
            hidden_size=args.hidden_size,
            num_layers=args.num_hidden_layers,
            vocab_size=args.vocab_size,
            num_heads=args.num_attention_heads,
            num_kv_heads=args.num_key_value_heads,
            head_dim=args.head_dim,
            intermediate_size=args.intermediate_size,
            rms_norm_eps=args.rms_norm_eps,
            final_logit_softcapping=args.final_logit_softcapping,
        )
        self.projection = DraftProjection(self.lm)
        self.target_id = _target_id(self.dims, args, tokenizer)
        self.weights_fingerprint = _weights_fingerprint(self.lm)
        self._weights_digest: str | None = None
        self.eos_token_ids = set(getattr(tokenizer, "eos_token_ids", None) or [])

    @property
    def weights_digest(self) -> str:
        """A finer fingerprint of the weights than :attr:`weights_fingerprint`: a sample of every
        parameter as stored (a quantized one's packed values, scales and biases), so a fine-tune
        that left the norms alone, or another quantization of the same release, is told apart.
        What a drafter profile records of the target it was measured on (``target_digest``)."""
        if self._weights_digest is None:
            self._weights_digest = _weights_digest(self.lm)
        return self._weights_digest

    @property
    def layers(self) -> list:
        return self.lm.model.layers

    def make_cache(self) -> list:
        return self.model.make_cache()

    @contextmanager
    def _recording(self, tap_layers: Sequence[int]):
        """Put a recording proxy in place of each tapped layer for the duration of one call."""
        sink: dict[int, mx.array] = {}
        layers = self.layers
        originals = {i: layers[i] for i in tap_layers}
        try:
            for i, layer in originals.items():
                layers[i] = _Tap(layer, i, sink)
            yield sink
        finally:
            for i, layer in originals.items():
                layers[i] = layer

    def forward(
        self, tokens: mx.array, cache: list | None, tap_layers: Sequence[int], logits: bool = True, capped: bool = True
    ):
        """Run ``tokens`` ([B, S] ids) through the target, appending to ``cache``.

        Returns ``(logits [B, S, V] or None, taps [B, S, m*H])``: taps are the tapped layers'
        outputs concatenated in the order of ``tap_layers``. Logits come from the model's own
        head, so they round exactly as in plain mlx-lm decoding; ``capped=False`` stops before
        the soft-cap (``projection.cap`` finishes them, in mlx-lm's ops) for readers that need
        the cap on a few values only.
        """
        with self._recording(tap_layers) as sink:
            if not logits:
                out = self.lm.model(tokens, cache=cache)
            elif capped:
                out = self.lm(tokens, cache=cache)
            else:  # mlx-lm's Model.__call__ up to its soft-cap
                out = self.projection.head(self.lm.model(tokens, cache=cache))
        taps = mx.concatenate([sink[i] for i in tap_layers], axis=-1)
        return (out if logits else None), taps

    def final_norm(self, h: mx.array) -> mx.array:
        """The target's final norm: the last layer's output [.., H] to what its head reads."""
        return self.lm.model.norm(h)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "has_chat_template", False))

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise DsparkError("this target has no tokenizer: pass token ids instead of text")
        return _tokenizer_call("encode this prompt", self.tokenizer.encode, text)

    def encode_chat(self, text: str, system: str = "", options: dict | None = None) -> list[int]:
        """``text`` as one user turn (after an optional system turn) in the tokenizer's chat
        template, with the generation prompt, tokenized as mlx-lm does it. The template (a
        program from the model directory) renders within a time and size budget
        (``dspark.chat_template``)."""
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]

        def apply() -> str:
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, **(options or {})
            )

        # jinja raises many kinds, and a Python template may call into the tokenizer's Rust code
        rendered = rust_call(
            "the target's chat template failed on this prompt", chat_template.render, apply, len(text) + len(system)
        )
        return _tokenizer_call("encode this prompt", self.tokenizer.encode, rendered, add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        if self.tokenizer is None:
            return ""
        return _tokenizer_call("decode these tokens", self.tokenizer.decode, list(ids))


def _tokenizer_call(what: str, fn, *args, **kwargs):
    """A call into the tokenizer (Rust code configured by the model directory): whatever it raises,
    a Rust panic included, is one sentence (``dspark.rust_calls``)."""
    out = rust_call(f"the target's tokenizer could not {what}", fn, *args, **kwargs)
    return list(out) if not isinstance(out, str) else out


class _Tap:
    """Stands in for a decoder layer during one call and keeps its output (the residual
    stream after ``layer_scalar``, before the final norm) in ``sink``. mlx-lm's loop reads
    layer attributes (``layer_type``), so they are passed through."""

    def __init__(self, layer: nn.Module, index: int, sink: dict):
        self._layer, self._index, self._sink = layer, index, sink

    def __call__(self, *args, **kwargs):
        out = self._layer(*args, **kwargs)
        self._sink[self._index] = out[0] if isinstance(out, tuple) else out
        return out

    def __getattr__(self, name):
        return getattr(self._layer, name)


def _target_id(dims: TargetDims, args, tokenizer) -> str:
    """A name for the target a drafter was made for: architecture plus tokenizer, not weights
    precision, so the same model quantized differently keeps its id."""
    arch = {k: v for k, v in sorted(vars(args).items()) if k not in ("quantization", "quantization_config")}
    h = hashlib.sha256(json.dumps(arch, sort_keys=True, default=str).encode())
    if tokenizer is not None:
        vocab = getattr(tokenizer, "get_vocab", lambda: {})()
        h.update(json.dumps(sorted(vocab.items()), default=str).encode())
    return f"gemma4-{dims.num_layers}L-{dims.hidden_size}d-{dims.vocab_size}v-{h.hexdigest()[:10]}"


def _weights_digest(lm: nn.Module, samples: int = 64) -> str:
    """``samples`` evenly spaced values of each parameter (names in order), as stored, floats
    rounded to 4 decimals in float32 (a float32 copy of bf16 weights is the same weights)."""
    from mlx.utils import tree_flatten  # noqa: PLC0415 (one use)

    h = hashlib.sha256()
    for name, a in sorted(tree_flatten(lm.parameters()), key=lambda kv: kv[0]):
        flat = a.reshape(-1)
        picked = flat[:: max(1, flat.size // samples)][:samples]
        if mx.issubdtype(picked.dtype, mx.floating):
            picked = np.round(np.array(picked.astype(mx.float32)), 4)
        else:
            picked = np.array(picked)
        h.update(name.encode() + b"|" + picked.tobytes())
    return h.hexdigest()[:16]


def _weights_fingerprint(lm: nn.Module) -> str:
    """Tells checkpoints of one architecture apart, whatever their quantization: norm weights
    stay in floating point when mlx-lm quantizes a model, so they are hashed (rounded)."""
    h = hashlib.sha256()
    for norm in [lm.model.norm] + [layer.input_layernorm for layer in lm.model.layers]:
        h.update(np.round(np.array(norm.weight.astype(mx.float32)), 3).tobytes())
    return h.hexdigest()[:16]
