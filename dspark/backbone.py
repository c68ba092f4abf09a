"""The drafter's network: the DFlash parallel backbone plus DSpark's Markov and confidence heads.

Shapes: ``A`` anchors (batch), ``L`` context rows, ``G`` block positions (the block size; the seed API's
``gamma``), ``H`` the target's hidden size, ``V`` its vocabulary, ``r`` the Markov rank.

Every layer's keys/values are ``[context rows ; block rows]`` through the same K/V weights; the
queries come from the block only and see everything (bidirectional inside the block). Context
rows are projected once per committed token and kept in ``ContextKV``; block K/V are never kept.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn


def attention(q: mx.array, k: mx.array, v: mx.array, *, scale: float, mask=None) -> mx.array:
    """Attention of a block's queries ``q`` [A, Hq, G, D] over ``k``/``v`` [A, Hkv, K, D] (grouped
    heads), ``mask`` True where a query may look (None: everywhere). On the GPU MLX's fused kernel.
    On the CPU the fused kernel runs each query head on its own copy of the shared keys; folding
    a group's queries into the rows of one product over the shared keys gave the same numbers
    (to 1e-6) 1.4-1.5x faster at 1,000-3,000 context rows on a 2-core x86 CPU, which is what a
    draft over a long prompt costs."""
    if mx.default_device().type == mx.gpu:
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
    A, Hq, G, D = q.shape
    Hkv = k.shape[1]
    n = Hq // Hkv
    s = ((q.reshape(A, Hkv, n * G, D) @ k.swapaxes(-1, -2)) * scale).reshape(A, Hkv, n, G, -1)
    if mask is not None:
        s = mx.where(mask[:, :, None] if mask.ndim == 4 else mask, s, -mx.inf)
    p = mx.softmax(s.astype(mx.float32), axis=-1, precise=True).astype(v.dtype)
    return (p.reshape(A, Hkv, n * G, -1) @ v).reshape(A, Hq, G, v.shape[-1])


class DraftLayer(nn.Module):
    """A Gemma-style block: sandwich norms, QK-norm attention with GQA, GeGLU MLP."""

    def __init__(
        self, hidden: int, *, heads: int, kv_heads: int, head_dim: int, ffn: int, eps: float, rope_theta: float
    ):
        """A layer of width ``hidden``: ``heads`` query heads over ``kv_heads`` key/value heads of
        ``head_dim`` each, an MLP of width ``ffn``, norms of epsilon ``eps`` and RoPE of base
        ``rope_theta``."""
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.scale = head_dim**-0.5
        self.input_layernorm = nn.RMSNorm(hidden, eps=eps)
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        self.q_norm = nn.RMSNorm(head_dim, eps=eps)
        self.k_norm = nn.RMSNorm(head_dim, eps=eps)
        self.post_attention_layernorm = nn.RMSNorm(hidden, eps=eps)
        self.pre_feedforward_layernorm = nn.RMSNorm(hidden, eps=eps)
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)
        self.post_feedforward_layernorm = nn.RMSNorm(hidden, eps=eps)
        self.rope = nn.RoPE(head_dim, traditional=False, base=rope_theta)

    def kv(self, x: mx.array, offset: int) -> tuple[mx.array, mx.array]:
        """Keys/values [A, kv_heads, S, head_dim] of rows ``x`` [A, S, H] at ``offset``."""
        A, S, _ = x.shape
        k = self.k_norm(self.k_proj(x).reshape(A, S, self.kv_heads, self.head_dim)).transpose(0, 2, 1, 3)
        v = self.v_proj(x).reshape(A, S, self.kv_heads, self.head_dim).transpose(0, 2, 1, 3)
        return self.rope(k, offset=offset), v

    def __call__(self, x: mx.array, ctx_k: mx.array | None, ctx_v: mx.array | None, offset: int, *, mask=None):
        A, G, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_norm(self.q_proj(h).reshape(A, G, self.heads, self.head_dim)).transpose(0, 2, 1, 3)
        q = self.rope(q, offset=offset)
        k, v = self.kv(h, offset)
        if ctx_k is not None:
            k = mx.concatenate([ctx_k, k], axis=2)
            v = mx.concatenate([ctx_v, v], axis=2)
        o = self.o_proj(attention(q, k, v, scale=self.scale, mask=mask).transpose(0, 2, 1, 3).reshape(A, G, -1))
        x = x + self.post_attention_layernorm(o)
        h = self.pre_feedforward_layernorm(x)
        h = self.down_proj(nn.gelu_approx(self.gate_proj(h)) * self.up_proj(h))
        return x + self.post_feedforward_layernorm(h)


class MarkovHead(nn.Module):
    """Low-rank bias from the previous token: B(x_prev) = W1[x_prev] @ W2. W1's rows are
    target ids; W2 outputs the draft vocabulary (``draft_vocab``: the target's unless a
    published head reduced it, ``dspark.formats``)."""

    def __init__(self, vocab: int, rank: int, draft_vocab: int | None = None):
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab, rank)
        self.markov_w2 = nn.Linear(rank, draft_vocab or vocab, bias=False)
        # Start as a zero bias so an untrained head leaves the backbone's logits unchanged.
        self.markov_w2.weight = mx.zeros_like(self.markov_w2.weight)

    def __call__(self, prev: mx.array) -> tuple[mx.array, mx.array]:
        e = self.markov_w1(prev)
        return self.markov_w2(e), e


class ConfidenceHead(nn.Module):
    """Logit of the chance that draft k survives given drafts 1..k-1 did."""

    def __init__(self, dim: int):
        super().__init__()
        self.proj = nn.Linear(dim, 1)

    def __call__(self, feats: mx.array) -> mx.array:
        return self.proj(feats)[..., 0]


class ContextKV:
    """Per-layer projected context K/V of the committed rows, grown in place (DsparkContextAttention).

    Appending writes into a buffer that grows in steps, so a round costs the new rows only.
    """

    step = 256

    def __init__(self, num_layers: int):
        self.keys: list[mx.array | None] = [None] * num_layers
        self.values: list[mx.array | None] = [None] * num_layers
        self.offset = 0

    def append(self, kvs: list[tuple[mx.array, mx.array]], *, skip: int = 0) -> None:
        """Append each layer's (k, v) of new rows; ``skip`` rows before them that no layer will
        ever read (older than every window) are left zero, never projected."""
        start = self.offset + skip
        end = start + kvs[0][0].shape[2]
        for i, (k, v) in enumerate(kvs):
            buf_k, buf_v = self.keys[i], self.values[i]
            if buf_k is None or end > buf_k.shape[2]:
                # sized from the kept rows, not the old buffer: an append of more than a step's rows
                # into a buffer with room left once overran it
                more = (end // self.step + 1) * self.step - self.offset
                new_k = mx.zeros((k.shape[0], k.shape[1], more, k.shape[3]), k.dtype)
                new_v = mx.zeros((v.shape[0], v.shape[1], more, v.shape[3]), v.dtype)
                buf_k = new_k if buf_k is None else mx.concatenate([buf_k[..., : self.offset, :], new_k], axis=2)
                buf_v = new_v if buf_v is None else mx.concatenate([buf_v[..., : self.offset, :], new_v], axis=2)
            buf_k[..., start:end, :] = k
            buf_v[..., start:end, :] = v
            self.keys[i], self.values[i] = buf_k, buf_v
        self.offset = end

    def layer(self, i: int) -> tuple[mx.array | None, mx.array | None]:
        if self.offset == 0:
            return None, None
        return self.keys[i][..., : self.offset, :], self.values[i][..., : self.offset, :]

    def state(self) -> list[mx.array]:
        return [a for a in self.keys + self.values if a is not None]


class DraftNet(nn.Module):
    """The drafter's network for target dims ``dims`` and drafter config ``cfg``."""

    def __init__(self, dims, cfg):
        super().__init__()
        H, m = dims.hidden_size, len(cfg.tap_layers)
        ffn = cfg.intermediate_size or dims.intermediate_size
        self.fc = nn.Linear(m * H, H, bias=False)
        self.hidden_norm = nn.RMSNorm(H, eps=dims.rms_norm_eps)
        self.layers = [
            DraftLayer(
                H,
                heads=dims.num_heads,
                kv_heads=dims.num_kv_heads,
                head_dim=dims.head_dim,
                ffn=ffn,
                eps=dims.rms_norm_eps,
                rope_theta=cfg.rope_theta,
            )
            for _ in range(cfg.num_layers)
        ]
        self.norm = nn.RMSNorm(H, eps=dims.rms_norm_eps)
        if cfg.markov:
            self.markov_head = MarkovHead(dims.vocab_size, cfg.markov_rank)
        if cfg.confidence:
            self.confidence_head = ConfidenceHead(H + (cfg.markov_rank if cfg.markov else 0))


def init_params(net: nn.Module, key: mx.array) -> None:
    """Draw every weight from ``key`` (MLX's default schemes: uniform +-1/sqrt(fan-in) for
    linear layers, normal with std 1/sqrt(dims) for embeddings), so a seed gives the same
    drafter without touching the global random state. Norms start at one; the Markov head's
    W2 stays zero so an untrained head leaves the backbone's logits unchanged."""
    modules = [(name, m) for name, m in net.named_modules() if isinstance(m, (nn.Linear, nn.Embedding))]
    keys = mx.random.split(key, max(2 * len(modules), 2))
    for i, (name, m) in enumerate(sorted(modules, key=lambda nm: nm[0])):
        if name.endswith("markov_w2"):
            continue
        if isinstance(m, nn.Embedding):
            m.weight = mx.random.normal(m.weight.shape, scale=m.weight.shape[1] ** -0.5, key=keys[2 * i])
            continue
        s = m.weight.shape[1] ** -0.5
        m.weight = mx.random.uniform(-s, s, m.weight.shape, key=keys[2 * i])
        if "bias" in m:
            m.bias = mx.random.uniform(-s, s, m.bias.shape, key=keys[2 * i + 1])
