"""A test drafter that knows the true continuation and corrupts some of it on purpose."""

from __future__ import annotations

import random
from dataclasses import dataclass

import mlx.core as mx


@dataclass
class Proposal:
    tokens: mx.array
    draft_probs: mx.array
    q: mx.array | None
    confidences: mx.array | None = None
    conf_logits: mx.array | None = None


class OracleDrafter:
    """Proposes ``sequence[position + 1 : position + 1 + g]`` with a share of tokens replaced,
    and a random length g in 0..block_size (so some rounds verify the anchor alone).

    Its drafts are deterministic, so under sampling q is one-hot on the proposed token."""

    def __init__(self, sequence, vocab, block_size=6, corrupt=0.3, seed=0, tap_layers=(1, 2)):
        self.sequence, self.vocab, self.block_size = list(sequence), vocab, block_size
        self.corrupt, self.seed, self.tap_layers = corrupt, seed, tap_layers

    def start(self, target, *, cache=None):
        self.rng = random.Random(self.seed)
        return self

    def propose(self, anchor, position, *, new_rows, history, block_size, sampling, key):
        g = self.rng.choice([0, 1] + [block_size] * 4)
        toks = []
        for k in range(g):
            i = position + 1 + k
            true = self.sequence[i] if i < len(self.sequence) else 0
            toks.append(self.rng.randrange(self.vocab) if self.rng.random() < self.corrupt else true)
        tokens = mx.array([toks], mx.int32).reshape(1, g)
        q = None if sampling.greedy else mx.eye(self.vocab)[tokens[0]][None]
        return Proposal(tokens, mx.ones((1, g)), q)

    def state(self):
        return []
