"""The EAGLE-3 head's network (``dspark.formats.eagle3`` reads its config and runs it), under the
checkpoint's tensor names: ``fc`` (the taps, concatenated, to the drafter's width; after
``input_norm`` or one ``fc_norm`` per tap when the config asks), ``layers`` (the first reads
``[embedding ; hidden]``, 2H wide, through ``input_layernorm`` and ``hidden_norm``; the rest are
plain llama / qwen3 layers), ``norm``, ``lm_head`` over the draft vocabulary and, when the
checkpoint ships one, ``embed_tokens``. Each layer keeps its K/V in the session, not here.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.rope_utils import initialize_rope

from ..backbone import attention


class Attention(nn.Module):
    def __init__(self, spec, in_dim: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = spec.heads, spec.kv_heads, spec.head_dim
        bias = spec.attention_bias
        self.q_proj = nn.Linear(in_dim, spec.heads * spec.head_dim, bias=bias)
        self.k_proj = nn.Linear(in_dim, spec.kv_heads * spec.head_dim, bias=bias)
        self.v_proj = nn.Linear(in_dim, spec.kv_heads * spec.head_dim, bias=bias)
        self.o_proj = nn.Linear(spec.heads * spec.head_dim, spec.hidden, bias=bias)
        if spec.arch == "qwen3":  # Qwen3 layers norm each head's queries and keys before RoPE
            self.q_norm = nn.RMSNorm(spec.head_dim, eps=spec.eps)
            self.k_norm = nn.RMSNorm(spec.head_dim, eps=spec.eps)
        self.rope = initialize_rope(
            spec.head_dim,
            base=spec.rope_theta,
            traditional=False,  # HF's rotate_half
            scaling_config=spec.rope_scaling,
            max_position_embeddings=spec.max_positions,
        )
        self.scale = spec.head_dim**-0.5

    def _heads(self, t: mx.array, n: int, norm) -> mx.array:
        B, L, _ = t.shape
        t = t.reshape(B, L, n, self.head_dim)
        return (norm(t) if norm is not None else t).transpose(0, 2, 1, 3)

    def __call__(self, x, kv, *, offset: int, start: int, mask):
        """Queries of ``x`` at positions ``offset``..; keys and values appended to ``kv`` (None:
        none yet) and returned whole; attention over them from entry ``start`` on, under ``mask``."""
        q = self.rope(self._heads(self.q_proj(x), self.heads, getattr(self, "q_norm", None)), offset=offset)
        k = self.rope(self._heads(self.k_proj(x), self.kv_heads, getattr(self, "k_norm", None)), offset=offset)
        v = self._heads(self.v_proj(x), self.kv_heads, None)
        if kv is not None:
            k, v = mx.concatenate([kv[0], k], axis=2), mx.concatenate([kv[1], v], axis=2)
        out = attention(q, k[..., start:, :], v[..., start:, :], scale=self.scale, mask=mask)
        B, _, L, _ = out.shape
        return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, L, -1)), (k, v)


class MLP(nn.Module):
    def __init__(self, spec, act):
        super().__init__()
        self.gate_proj = nn.Linear(spec.hidden, spec.ffn, bias=spec.mlp_bias)
        self.up_proj = nn.Linear(spec.hidden, spec.ffn, bias=spec.mlp_bias)
        self.down_proj = nn.Linear(spec.ffn, spec.hidden, bias=spec.mlp_bias)
        self.act = act

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    """A llama / qwen3 decoder layer; the first of an EAGLE-3 head attends over ``[embedding ;
    hidden]`` (``Eagle3FirstLayerMixin``: both halves normed, the residual the hidden half)."""

    def __init__(self, spec, act, *, first: bool):
        super().__init__()
        self.first, self.norm_before_residual = first, spec.norm_before_residual
        self.input_layernorm = nn.RMSNorm(spec.hidden, eps=spec.eps)
        if first:
            self.hidden_norm = nn.RMSNorm(spec.hidden, eps=spec.eps)
        self.self_attn = Attention(spec, 2 * spec.hidden if first else spec.hidden)
        self.post_attention_layernorm = nn.RMSNorm(spec.hidden, eps=spec.eps)
        self.mlp = MLP(spec, act)

    def __call__(self, h, kv, *, embeds=None, offset: int, start: int, mask):
        if self.first:
            hidden = self.hidden_norm(h)
            residual = hidden if self.norm_before_residual else h
            x = mx.concatenate([self.input_layernorm(embeds), hidden], axis=-1)
        else:
            residual, x = h, self.input_layernorm(h)
        a, kv = self.self_attn(x, kv, offset=offset, start=start, mask=mask)
        h = residual + a
        return h + self.mlp(self.post_attention_layernorm(h)), kv


class Eagle3Net(nn.Module):
    def __init__(self, spec, act):
        super().__init__()
        self.windows = spec.windows
        n = spec.num_aux
        if spec.own_embedding:
            self.embed_tokens = nn.Embedding(spec.vocab, spec.hidden)
        if spec.norm_before_fc:
            self.input_norm = nn.RMSNorm(n * spec.target_hidden, eps=spec.eps)
        if spec.fc_norm:
            self.fc_norm = [nn.RMSNorm(spec.target_hidden, eps=spec.eps) for _ in range(n)]
        self.fc = nn.Linear(n * spec.target_hidden, spec.hidden, bias=False)
        self.layers = [Layer(spec, act, first=i == 0) for i in range(spec.layers)]
        self.norm = nn.RMSNorm(spec.hidden, eps=spec.eps)
        self.lm_head = nn.Linear(spec.hidden, spec.draft_vocab, bias=False)

    def fuse(self, rows: mx.array) -> mx.array:
        """Tap rows [1, n, m*H_target] -> the hidden half of the first layer's input [1, n, H]."""
        if "input_norm" in self:
            rows = self.input_norm(rows)
        if "fc_norm" in self:
            parts = mx.split(rows, len(self.fc_norm), axis=-1)
            rows = mx.concatenate([norm(p) for norm, p in zip(self.fc_norm, parts)], axis=-1)
        return self.fc(rows)

    def run(self, embeds, h, kv: list, *, first: int, committed: int, anchor: int | None = None):
        """The layers over ``len`` queries at positions ``first``.. (embeddings ``embeds``, hidden
        ``h``), each layer's K/V appended to ``kv`` (per layer; entries ``0..committed - 1`` are
        the committed pairs, at positions 1..committed, any after them this round's steps).
        ``anchor`` None: committed pairs, each seeing the pairs up to its own position (within a
        window of its own); else one draft step of the round anchored there: it sees the window
        before the anchor and every step of its round. Returns (output [1, L, H], the new K/V)."""
        L = h.shape[1]
        out = []
        for layer, entry, W in zip(self.layers, kv, self.windows):
            start, mask = 0, None
            if anchor is not None:
                start = min(max(0, anchor - W), committed) if W else 0
            elif W is not None or L > 1:
                start = max(0, first - W) if W else 0
                q = mx.arange(first, first + L)[:, None]
                k = mx.arange(start + 1, first + L)[None, :]  # entry e is at position e + 1
                mask = k <= q
                if W:
                    mask = mask & (k > q - W)
            h, entry = layer(h, entry, embeds=embeds, offset=first, start=start, mask=mask)
            out.append(entry)
        return h, out


__all__ = ["Eagle3Net"]
