"""Draft layers of the published checkpoint formats, with the interface ``dspark.drafting`` uses:
``kv(rows, offset)`` gives a context row's keys/values (queries never come from context rows),
``__call__(x, ctx_k, ctx_v, offset, mask=mask)`` runs the block's slots over ``[context ; block]``.

- ``Qwen3Layer``: z-lab DFlash and vLLM speculators heads (RMSNorm pre-norms, QK-norm GQA
  attention with scale head_dim^-0.5, SiLU MLP, standard RoPE);
- ``Gemma4Layer``: DeepSpec's ``Gemma4DSparkModel`` layers, stock Gemma-4 global attention
  (K = V with a weightless V norm when ``attention_k_eq_v``, scale 1, proportional partial RoPE,
  sandwich norms, GeGLU MLP, ``layer_scalar``).

Weight names follow the checkpoints: ``self_attn.{q,k,v,o}_proj``, ``self_attn.{q,k}_norm``,
``mlp.{gate,up,down}_proj`` and the layer norms.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.rope_utils import initialize_rope

from ..backbone import attention


class _Attention(nn.Module):
    def __init__(self, hidden: int, *, heads: int, kv_heads: int, head_dim: int, eps: float, k_eq_v: bool):
        """Projections of width ``hidden`` for ``heads`` query heads over ``kv_heads`` key/value
        heads of ``head_dim`` each, QK norms of epsilon ``eps``; no V projection when ``k_eq_v``
        (the values are the keys)."""
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        if not k_eq_v:
            self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        self.q_norm = nn.RMSNorm(head_dim, eps=eps)
        self.k_norm = nn.RMSNorm(head_dim, eps=eps)

    def split(self, t: mx.array, heads: int) -> mx.array:
        A, S, _ = t.shape
        return t.reshape(A, S, heads, self.head_dim)


class _Layer(nn.Module):
    """What both layer kinds share: keys/values of rows, and attention of the block over them."""

    scale = 1.0

    def kv(self, x: mx.array, offset) -> tuple[mx.array, mx.array]:
        a = self.self_attn
        raw = a.split(a.k_proj(x), a.kv_heads)
        k = self.rope(a.k_norm(raw).transpose(0, 2, 1, 3), offset=offset)
        return k, self.values(x, raw).transpose(0, 2, 1, 3)

    def attend(self, h: mx.array, ctx_k, ctx_v, offset, *, mask) -> mx.array:
        a = self.self_attn
        A, G, _ = h.shape
        q = self.rope(a.q_norm(a.split(a.q_proj(h), a.heads)).transpose(0, 2, 1, 3), offset=offset)
        k, v = self.kv(h, offset)
        if ctx_k is not None:
            k = mx.concatenate([ctx_k, k], axis=2)
            v = mx.concatenate([ctx_v, v], axis=2)
        return a.o_proj(attention(q, k, v, scale=self.scale, mask=mask).transpose(0, 2, 1, 3).reshape(A, G, -1))


class Qwen3Layer(_Layer):
    def __init__(
        self,
        hidden: int,
        *,
        heads: int,
        kv_heads: int,
        head_dim: int,
        ffn: int,
        eps: float,
        rope_theta: float,
        rope_scaling: dict | None = None,
        max_positions: int = 131072,
    ):
        """A layer of width ``hidden``: ``heads`` query heads over ``kv_heads`` key/value heads of
        ``head_dim`` each, an MLP of width ``ffn``, norms of epsilon ``eps``, and mlx-lm's RoPE of
        base ``rope_theta`` scaled by ``rope_scaling`` (None: plain) up to ``max_positions``."""
        super().__init__()
        self.self_attn = _Attention(hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim, eps=eps, k_eq_v=False)
        self.mlp = _MLP(hidden, ffn, nn.silu)
        self.input_layernorm = nn.RMSNorm(hidden, eps=eps)
        self.post_attention_layernorm = nn.RMSNorm(hidden, eps=eps)
        self.scale = head_dim**-0.5
        self.rope = initialize_rope(
            head_dim,
            base=rope_theta,
            traditional=False,
            scaling_config=rope_scaling,
            max_position_embeddings=max_positions,
        )

    def values(self, x: mx.array, raw: mx.array) -> mx.array:
        return self.self_attn.split(self.self_attn.v_proj(x), self.self_attn.kv_heads)

    def __call__(self, x, ctx_k, ctx_v, offset, *, mask=None):
        x = x + self.attend(self.input_layernorm(x), ctx_k, ctx_v, offset, mask=mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Gemma4Layer(_Layer):
    def __init__(
        self,
        hidden: int,
        *,
        heads: int,
        kv_heads: int,
        head_dim: int,
        ffn: int,
        eps: float,
        rope: dict,
        k_eq_v: bool,
        max_positions: int = 262144,
    ):
        """A layer of width ``hidden``: ``heads`` query heads over ``kv_heads`` key/value heads of
        ``head_dim`` each (the values are the keys when ``k_eq_v``), an MLP of width ``ffn``, norms
        of epsilon ``eps``, and mlx-lm's RoPE as the checkpoint's ``rope`` parameters say, up to
        ``max_positions``."""
        super().__init__()
        self.self_attn = _Attention(hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim, eps=eps, k_eq_v=k_eq_v)
        self.k_eq_v, self.eps = k_eq_v, eps
        self.mlp = _MLP(hidden, ffn, nn.gelu_approx)
        self.input_layernorm = nn.RMSNorm(hidden, eps=eps)
        self.post_attention_layernorm = nn.RMSNorm(hidden, eps=eps)
        self.pre_feedforward_layernorm = nn.RMSNorm(hidden, eps=eps)
        self.post_feedforward_layernorm = nn.RMSNorm(hidden, eps=eps)
        self.layer_scalar = mx.ones((1,))
        self.rope = initialize_rope(
            head_dim,
            base=rope.get("rope_theta", 1e6),
            traditional=False,
            scaling_config=rope,
            max_position_embeddings=max_positions,
        )

    def values(self, x: mx.array, raw: mx.array) -> mx.array:
        v = raw if self.k_eq_v else self.self_attn.split(self.self_attn.v_proj(x), self.self_attn.kv_heads)
        return mx.fast.rms_norm(v, None, self.eps)  # Gemma-4's V norm has no weight

    def __call__(self, x, ctx_k, ctx_v, offset, *, mask=None):
        x = x + self.post_attention_layernorm(self.attend(self.input_layernorm(x), ctx_k, ctx_v, offset, mask=mask))
        x = x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))
        return x * self.layer_scalar


class _MLP(nn.Module):
    def __init__(self, hidden: int, ffn: int, act):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)
        self.act = act

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DraftBody(nn.Module):
    """A published drafter's network: ``fc`` / ``hidden_norm`` / ``layers`` / ``norm`` and,
    when the checkpoint has them, its own ``embed_tokens`` / ``lm_head`` and the DSpark heads."""

    def __init__(self, layers: list, hidden: int, taps: int, eps: float):
        super().__init__()
        self.fc = nn.Linear(taps * hidden, hidden, bias=False)
        self.hidden_norm = nn.RMSNorm(hidden, eps=eps)
        self.layers = layers
        self.norm = nn.RMSNorm(hidden, eps=eps)
