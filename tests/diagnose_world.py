"""A tiny target whose behaviour is known exactly, and drafters trained on it in seconds, for
planting the causes ``dspark diagnose`` names (tests/test_diagnose.py).

The target (a gemma4_text of 6 layers, width 64, vocabulary 300, float32) is built by hand:

- *a bigram*: every layer but one adds nothing (its post-norms are zero), and the untied head
  maps token x's embedding to a fixed successor f(x) (a random permutation of the ids >= 5), so
  greedy text is x, f(x), f(f(x)), .. and a drafter learns it in a few hundred steps;
- *a sink past long contexts*: layer 2 (full attention) attends uniformly (its queries are zero)
  to values that are one direction for every token and another, 1000 times stronger, for BOS.
  Its output after the post-norm is the BOS direction while BOS weighs more than the others, and
  the first direction once the context is much longer than 1000 / (sink strength) tokens: that
  direction raises one token (id 7) above every successor. So after BOS and up to a few hundred
  tokens the text is the bigram, past some 600 tokens, or without BOS at all, it is 7, 7, 7 ..
  (a drafter trained on short sequences never saw that);
- a chat template (Gemma-4's text form, thinking switch included) whose rendering starts with
  BOS: a prompt in the template is bigram text, one outside it has no BOS and sinks at once.

Norms carry the seed, so two targets of different seeds differ in ``weights_fingerprint``.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
from miniatures import chat_template
from mlx.utils import tree_flatten
from tiny import tiny_model, write_tokenizer

VOCAB, H, BOS, SINK = 300, 64, 2, 7


def _bigram_head(rng, E: np.ndarray) -> np.ndarray:
    f = rng.permutation(np.arange(5, VOCAB))  # the successor of token i is f[i - 5]
    unit = E[:, :60] / np.linalg.norm(E[:, :60], axis=1, keepdims=True).clip(1e-6)
    W = np.zeros((VOCAB, H), np.float32)
    for i in range(5, VOCAB):
        W[f[i - 5], :60] = unit[i]
    W[SINK, 62] = 3.0  # the sink direction raises token 7 above any successor
    return W


def _sink_layer(layer) -> None:
    """Uniform attention; values: dimension 0 for every token, dimension 1 for BOS; the output
    puts them on residual dimensions 62 (sink, read by the head) and 63 (BOS, read by nothing)."""
    a = layer.self_attn
    a.q_proj.weight = mx.zeros(a.q_proj.weight.shape)
    v = np.zeros(a.v_proj.weight.shape, np.float32)
    v[0, 61], v[1, 60] = 1.0, 1.0
    a.v_proj.weight = mx.array(v)
    o = np.zeros(a.o_proj.weight.shape, np.float32)
    o[62, 0], o[63, 1] = 1.0, 1000.0
    a.o_proj.weight = mx.array(o)
    w = np.zeros(H, np.float32)
    w[62] = w[63] = 6.0 / 8
    layer.post_attention_layernorm.weight = mx.array(w)


def write_target(path: Path, seed: int = 0, template: bool = True) -> Path:
    rng = np.random.default_rng(seed)
    model = tiny_model(seed, vocab=VOCAB, tie_word_embeddings=False)
    E = np.zeros((VOCAB, H), np.float32)
    E[5:, :60] = rng.standard_normal((VOCAB - 5, 60))
    E[5:, 61] = 1.0  # every token's value direction
    E[BOS, 60], E[BOS, 61] = 10.0, 1.0  # BOS: its own value direction
    model.model.embed_tokens.weight = mx.array(E / 8.0)  # Gemma scales the embedding by sqrt(64)
    model.lm_head.weight = mx.array(_bigram_head(rng, E))
    for i, layer in enumerate(model.model.layers):
        layer.post_feedforward_layernorm.weight = mx.zeros((H,))
        layer.input_layernorm.weight = mx.array(1 + 0.05 * rng.standard_normal(H).astype(np.float32))
        if i == 2:
            _sink_layer(layer)
        else:
            layer.post_attention_layernorm.weight = mx.zeros((H,))
    model.model.norm.weight = mx.array(1 + 0.05 * rng.standard_normal(H).astype(np.float32))
    mx.eval(model.parameters())
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({**vars(model.args), "eos_token_id": 1}))
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(model.parameters())))
    write_tokenizer(path, vocab=VOCAB)
    if template:
        (path / "chat_template.jinja").write_text(chat_template(large=False))
    return path


def bos_prompt(rng: np.random.Generator, n: int) -> list[int]:
    """``n`` token ids after BOS (what the template's rendering starts with)."""
    return [BOS] + [int(x) for x in rng.integers(5, VOCAB, size=n - 1)]


PROMPTS = ["def add(a, b):", "class Point:", "for i in range(10):", "return a + b"]
