"""Drafting a block, for every drafter format: the math shared by the native ``DflashDrafter``
and the published checkpoints (``dspark.formats``).

A drafter's network has ``fc`` and ``hidden_norm`` (the tapped target rows -> context rows),
``layers`` (each with ``kv(rows, offset)`` and ``__call__(x, ctx_k, ctx_v, offset, mask)``), a
final ``norm``, and optionally ``markov_head`` (previous target id -> bias over the draft
vocabulary, and W1's row) and ``confidence_head``. What differs between formats is declared,
not coded: which block slot predicts first (``BlockLayout.anchor_predicts``), sliding windows,
causal blocks, the embedding and the head (the target's, or the drafter's own), and a reduced
draft vocabulary mapped to target ids (``draft_to_target``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import mlx.core as mx

from . import markov
from .backbone import ContextKV
from .config import SamplingParams
from .errors import DrafterMismatchError
from .sampling import distribution, token_probs
from .target import DraftProjection, Target


@dataclass(frozen=True)
class BlockLayout:
    """How a drafter's block is read.

    ``anchor_predicts``: DSpark's convention, block slot k predicts the token after anchor + k;
    False is z-lab DFlash's, slot 0 (the anchor) is only an input and slot k predicts anchor + k.
    ``windows``: per layer, a sliding window in positions (None: the whole context); ``causal``:
    per layer, whether block slots see only earlier slots; ``window_from_anchor``: one window
    ``[anchor - W, anchor)`` for every slot (vLLM speculators' training) instead of each slot's
    own ``(slot - W, slot]``. ``context_window``: every layer sees at most the last this many
    committed rows before the anchor (None: all of them; DFlash 2's ``draft_window_size``)."""

    anchor_predicts: bool = True
    windows: tuple[int | None, ...] = ()
    causal: tuple[bool, ...] = ()
    window_from_anchor: bool = False
    context_window: int | None = None

    def reach(self, layers: int) -> int | None:
        """The most committed rows before the anchor any of ``layers`` layers reads (None: all of
        them). Rows older than that are never read again, so they need no K/V."""
        windows = self.windows or (None,) * layers
        far = [None if W is None else (W if self.window_from_anchor else W - 1) for W in windows]
        if self.context_window is not None:
            far = [self.context_window if f is None else min(f, self.context_window) for f in far]
        return None if None in far else max(far)


@dataclass(kw_only=True)
class DraftRows:
    """What one ``forward_rows`` call drafted, per anchor row."""

    tokens: mx.array  # [A, G] int32 target ids
    q: mx.array | None  # [A, G, V] the exact distributions sampled from, over the target vocabulary (None: greedy)
    draft_probs: mx.array  # [A, G] q(token) (temperature-1 softmax when greedy)
    confidences: mx.array | None  # [A, G] calibrated c_k
    hidden: mx.array  # [A, G, H]
    conf_logits: mx.array | None = None  # [A, G] raw confidence logits z_k (what calibration fits)
    logits: mx.array | None = None  # [A, G, V_draft] the logits drafted from, Markov bias included


@dataclass
class TrainOut:
    """A teacher-forced training forward's outputs, per anchor and block position."""

    logits: mx.array  # [A, G, V] with the Markov bias (teacher-forced)
    base_logits: mx.array  # [A, G, V] the backbone's alone
    conf_logits: mx.array | None  # [A, G]
    hidden: mx.array  # [A, G, H]


@dataclass
class DraftOpts:
    sampling: SamplingParams = field(default_factory=SamplingParams)
    key: mx.array | None = None


class BlockDrafter:
    """The drafting half of every drafter. Subclasses set ``net``, ``layout``, ``tap_layers``,
    ``block_size``, ``mask_token_id``, ``calibration`` and may override ``embed`` / ``head`` /
    ``check_target``; ``draft_to_target`` maps a reduced draft vocabulary to target ids."""

    net = None
    layout = BlockLayout()
    draft_to_target: mx.array | None = None
    calibration: list[float] | None = None
    confidence_with_markov = True  # the confidence head reads [h_k ; W1[x_{k-1}]], else h_k alone
    format = "dspark-drafter"

    # --- what a format may change --------------------------------------------------------
    def embed(self, proj: DraftProjection, ids: mx.array) -> mx.array:
        return proj.embed(ids)

    def head_raw(self, proj: DraftProjection, h: mx.array) -> mx.array:
        """The head's output before its soft-cap (the target's head, unless a format has its own)."""
        return proj.head(h)

    def cap(self, proj: DraftProjection, x: mx.array) -> mx.array:
        """The soft-cap that finishes ``head_raw``'s output (monotone, so it keeps the order)."""
        return proj.cap(x)

    def head(self, proj: DraftProjection, h: mx.array) -> mx.array:
        return self.cap(proj, self.head_raw(proj, h))

    @property
    def has_markov(self) -> bool:
        return "markov_head" in self.net

    @property
    def has_confidence(self) -> bool:
        return "confidence_head" in self.net

    # --- the forward ---------------------------------------------------------------------
    def project_context_rows(self, hidden: mx.array, offset: int = 0) -> list[tuple[mx.array, mx.array]]:
        """Per-layer (k, v) of context rows ``hidden`` [A, L, m*H] placed at ``offset``."""
        c = self.net.hidden_norm(self.net.fc(hidden))
        return [layer.kv(c, offset) for layer in self.net.layers]

    def _backbone(self, x: mx.array, ctx: list, offset, masks) -> mx.array:
        masks = masks if isinstance(masks, list) else [masks] * len(self.net.layers)
        for layer, (k, v), mask in zip(self.net.layers, ctx, masks):
            x = layer(x, k, v, offset, mask=mask)
        return self.net.norm(x)

    def _block(self, proj: DraftProjection, anchors: mx.array, length: int) -> mx.array:
        """Embeddings of ``[anchor, mask, .., mask]`` (``length`` slots) per anchor."""
        ids = mx.concatenate(
            [anchors[:, None], mx.full((anchors.shape[0], length - 1), self.mask_token_id, mx.int32)], axis=1
        )
        return self.embed(proj, ids)

    def _attention(self, context: ContextKV, length: int) -> tuple[list, list]:
        """Per layer, the context K/V a block at ``context.offset`` attends to and its mask
        ([length, context rows + length] booleans, or None for all of it)."""
        P, n = context.offset, len(self.net.layers)
        windows = self.layout.windows or (None,) * n
        causal = self.layout.causal or (False,) * n
        ctx, masks = [], []
        for i in range(n):
            k, v = context.layer(i)
            W = windows[i]
            first = 0 if W is None else max(0, P - (W if self.layout.window_from_anchor else W - 1))
            if self.layout.context_window is not None:
                first = max(first, P - self.layout.context_window)
            if k is not None and first:
                k, v = k[..., first:, :], v[..., first:, :]
            ctx.append((k, v))
            if W is None and not causal[i]:
                masks.append(None)
                continue
            q_pos = mx.arange(P, P + length)[:, None]
            k_pos = mx.concatenate([mx.arange(first, P), mx.arange(P, P + length)])[None, :]
            ok = mx.ones((length, k_pos.shape[1]), mx.bool_)
            if W is not None and not self.layout.window_from_anchor:
                ok = ok & (k_pos > q_pos - W)
            if causal[i]:
                ok = ok & ((k_pos < P) | (k_pos <= q_pos))
            masks.append(ok)
        return ctx, masks

    # --- training (teacher-forced, every block position at once) ----------------------------
    def forward_train_packed(
        self,
        proj: DraftProjection,
        h_seq: mx.array,
        *,
        owner: mx.array,
        positions: mx.array,
        prev_toks: mx.array,
        ctx_len: int = 0,
    ) -> TrainOut:
        """The training forward of anchors that share sequences: each sequence's tap rows
        ``h_seq`` [N, S, m*H] are projected once, not once per anchor. Anchor ``a`` sits at
        position ``positions[a]`` of sequence ``owner[a]`` and its block sees that sequence's
        rows as drafting at that position would (:meth:`_attention`: strictly before the anchor,
        this layout's windows and causal layers; also only the last ``ctx_len`` rows when > 0).
        ``prev_toks`` [A, G] are the true previous tokens (anchor, x1, .., x_{G-1}): the Markov
        head is teacher-forced with them. Rows keep their absolute positions and the block
        starts at the anchor's, as in generation."""
        S, G = h_seq.shape[1], prev_toks.shape[1]
        start = 0 if self.layout.anchor_predicts else 1
        ctx = [(k[owner], v[owner]) for k, v in self.project_context_rows(h_seq, 0)]
        masks = self._train_masks(positions, S, G + start, ctx_len)
        h = self._backbone(self._block(proj, prev_toks[:, 0], G + start), ctx, positions, masks)[:, start:]
        return self.train_heads(proj, h, prev_toks)

    def train_heads(self, proj: DraftProjection, h: mx.array, prev_toks: mx.array) -> TrainOut:
        base = self.head(proj, h)
        logits, e = base, None
        if self.has_markov:
            bias, e = self.net.markov_head(prev_toks)  # teacher-forced with the true previous tokens
            logits = base + bias
        z = None
        if self.has_confidence:
            z = self.net.confidence_head(
                h if e is None or not self.confidence_with_markov else mx.concatenate([h, e], -1)
            )
        return TrainOut(logits, base, z, h)

    def _train_masks(self, positions: mx.array, S: int, length: int, ctx_len: int) -> list:
        """Per layer, [A, 1, length, S + length] booleans: what slot i of an anchor at ``p`` (at
        position p + i) sees of its sequence's rows and of its block, the same rule as
        :meth:`_attention` applies to one anchor while drafting."""
        n = len(self.net.layers)
        windows = self.layout.windows or (None,) * n
        causal = self.layout.causal or (False,) * n
        p = positions[:, None, None]  # [A, 1, 1]
        q_pos = p + mx.arange(length)[None, :, None]  # [A, length, 1]
        row = mx.arange(S)[None, None, :]
        slot = mx.arange(length)
        masks = []
        for i in range(n):
            W = windows[i]
            seen = row < p
            if ctx_len > 0:
                seen = seen & (row >= p - ctx_len)
            if self.layout.context_window is not None:
                seen = seen & (row >= p - self.layout.context_window)
            block = mx.ones((1, length, length), mx.bool_)
            if W is not None and self.layout.window_from_anchor:
                seen = seen & (row >= p - W)
            elif W is not None:
                seen = seen & (row > q_pos - W)
                block = block & (slot[None, None, :] > slot[None, :, None] - W)
            if causal[i]:
                block = block & (slot[None, None, :] <= slot[None, :, None])
            seen = mx.broadcast_to(seen, (positions.shape[0], length, S))
            block = mx.broadcast_to(block, (positions.shape[0], length, length))
            masks.append(mx.concatenate([seen, block], axis=-1)[:, None])
        return masks

    def forward_rows(
        self,
        proj: DraftProjection,
        h_ctx: mx.array | None,
        anchors: mx.array | Sequence[int],
        gamma: int,
        *,
        opts: DraftOpts | None = None,
        context: ContextKV | None = None,
    ) -> DraftRows:
        """Draft ``gamma`` tokens (the block size, under the seed API's name) after each anchor, as
        ``opts`` says (None: greedy). New committed tap rows ``h_ctx`` [A, n, m*H] (or None) are
        projected and appended to ``context`` first (None: a fresh context)."""
        opts = opts or DraftOpts()
        h, prev = self.block_hidden(proj, h_ctx, anchors, gamma=gamma, context=context)
        # The soft-cap is monotone: a greedy choice reads the head before it, and the cap (a tanh
        # per id, the dearest op of a round on MLX's CPU backend) runs only where values are read.
        raw = self.head_raw(proj, h)  # [A, G, V_draft]
        base = self.cap(proj, raw)  # lazy
        sp = opts.sampling
        # one key per position, only when drawing (greedy drafting reads none)
        keys = (
            [None] * max(gamma, 1)
            if sp.greedy
            else mx.random.split(opts.key if opts.key is not None else mx.random.key(0), max(gamma, 1))
        )
        e = None
        table = markov.bias_table(self) if self.has_markov else None
        if self.has_markov and table is None and markov.scores_candidates(self.net.markov_head):
            choice, q, draft_probs, e = markov.draft_on_candidates(self, proj, raw, prev, sampling=sp, keys=keys)
            logits = None
        elif self.has_markov:
            # Sequential: each position's bias depends on the token just drafted. Only the
            # choice itself is in the loop; probabilities and confidences are batched after.
            head = self.net.markov_head
            steps, embs, toks, qs = [], [], [], []
            for k in range(gamma):
                # W1 is indexed by target ids; a small head's biases are rows of its table
                bias, e_k = (table[prev], head.markov_w1(prev)) if table is not None else head(prev)
                step = base[:, k] + bias
                choice, q_k = _choose(step, sp, keys[k])
                prev = self.to_target(choice)
                steps.append(step), embs.append(e_k), toks.append(choice), qs.append(q_k)
            logits, e = mx.stack(steps, axis=1), mx.stack(embs, axis=1)
            choice, q = mx.stack(toks, axis=1), None if sp.greedy else mx.stack(qs, axis=1)
        else:  # positions are independent: draft them all at once
            logits = base
            choice, q = _choose(raw if sp.greedy else logits, sp, keys[0])
        if logits is None:
            pass  # the candidate loop gave its own probabilities
        elif sp.greedy:
            draft_probs = token_probs(logits.reshape(-1, logits.shape[-1]), choice.reshape(-1)).reshape(choice.shape)
        else:
            draft_probs = mx.take_along_axis(q, choice[..., None], axis=-1)[..., 0]
        z = None
        if self.has_confidence:
            z = self.net.confidence_head(
                h if e is None or not self.confidence_with_markov else mx.concatenate([h, e], -1)
            )
        return DraftRows(
            tokens=self.to_target(choice),
            q=self.widen(q, proj.vocab_size),
            draft_probs=draft_probs,
            confidences=self._calibrated(z) if z is not None else None,
            hidden=h,
            conf_logits=z,
            logits=logits,
        )

    def block_hidden(
        self, proj: DraftProjection, h_ctx: mx.array | None, anchors, *, gamma: int, context: ContextKV | None
    ) -> tuple[mx.array, mx.array]:
        """The final hidden states [A, gamma, H] of the block slots that draft, and the anchors as
        int32: new committed tap rows ``h_ctx`` (or None) are projected and appended to ``context``
        first (None: a fresh context)."""
        context = context if context is not None else ContextKV(len(self.net.layers))
        if h_ctx is not None and h_ctx.shape[1] > 0:
            # a long prompt's rows before every window are never read: not projected (at 3,000
            # prompt tokens the demo DFlash-style drafter's first round took 49 -> 30 ms)
            n, reach = h_ctx.shape[1], self.layout.reach(len(self.net.layers))
            skip = n - reach if reach is not None and n > reach else 0
            context.append(self.project_context_rows(h_ctx[:, skip:], context.offset + skip), skip=skip)
        prev = mx.array(anchors, mx.int32) if not isinstance(anchors, mx.array) else anchors.astype(mx.int32)
        start = 0 if self.layout.anchor_predicts else 1
        ctx, masks = self._attention(context, gamma + start)
        return self._backbone(self._block(proj, prev, gamma + start), ctx, context.offset, masks)[:, start:], prev

    def to_target(self, draft_ids: mx.array) -> mx.array:
        return draft_ids if self.draft_to_target is None else self.draft_to_target[draft_ids]

    def widen(self, q: mx.array | None, vocab: int) -> mx.array | None:
        """Draft-vocabulary distributions [.., V_d] as target-vocabulary ones [.., V] (zero
        outside the draft vocabulary), so the ratio test and its residual stay exact."""
        if q is None or self.draft_to_target is None:
            return q
        idx = mx.broadcast_to(self.draft_to_target, q.shape)
        return mx.put_along_axis(mx.zeros((*q.shape[:-1], vocab), q.dtype), idx, q, axis=-1)

    def _calibrated(self, z: mx.array) -> mx.array:
        """Confidence logits [A, G] to survival estimates, through the calibration temperatures."""
        G = z.shape[-1]
        temps = (self.calibration or [])[:G]
        temps = temps + [1.0] * (G - len(temps))
        return mx.sigmoid(z / mx.array(temps, z.dtype))

    # --- the engine's proposer protocol -------------------------------------------------
    def start(self, target: Target, *, cache: list | None = None) -> BlockDraftSession:
        """A generation's drafting state (``cache``, the target's, is not read: a block drafter's
        context is its own K/V of the tap rows)."""
        self.check_target(target)
        return BlockDraftSession(self, target.projection)

    def check_target(self, target: Target) -> None:
        """Refuse a target this drafter cannot draft for, naming the value that does not fit."""
        d = target.dims
        bad = [t for t in self.tap_layers if not 0 <= t < d.num_layers]
        if bad:
            raise DrafterMismatchError(
                f"the drafter taps target layer {bad[0]}, but the target has {d.num_layers} layers"
            )
        if self.net.fc.weight.shape[-1] * _packing(self.net.fc) != len(self.tap_layers) * d.hidden_size:
            raise DrafterMismatchError(
                f"the drafter reads {len(self.tap_layers)} target layers of width "
                f"{self.net.fc.weight.shape[0]}, but the target's hidden size is {d.hidden_size}"
            )
        if not 0 <= self.mask_token_id < d.vocab_size:
            raise DrafterMismatchError(
                f"the drafter's mask token {self.mask_token_id} is outside the target's vocabulary ({d.vocab_size})"
            )

    def weights_note(self, target: Target) -> str | None:
        return None

    def num_params(self) -> int:
        """Weights, counted unpacked for quantized layers (their scales and biases left out)."""
        total = 0
        for _, m in self.net.named_modules():
            own = {k: v for k, v in m.items() if isinstance(v, mx.array)}
            if getattr(m, "bits", None):
                total += own["weight"].size * _packing(m)
            else:
                total += sum(v.size for v in own.values())
        return total

    def dispose(self) -> None:
        self.net = self._table = None
        mx.clear_cache()


class BlockDraftSession:
    """One generation's drafter state: the projected context K/V of committed rows."""

    def __init__(self, drafter: BlockDrafter, proj: DraftProjection):
        self.drafter, self.proj = drafter, proj
        self.context = ContextKV(len(drafter.net.layers))
        self.tap_layers = drafter.tap_layers
        self.block_size = drafter.block_size

    def propose(
        self,
        anchor: int,
        position: int,
        *,
        new_rows: mx.array | None,
        history: Sequence[int] = (),
        block_size: int,
        sampling: SamplingParams,
        key: mx.array,
    ) -> DraftRows:
        """``block_size`` drafts after ``anchor`` at ``position`` (the context's length once
        ``new_rows`` are appended), drawn as ``sampling`` says with ``key``
        (:meth:`dspark.rounds.DraftSession.propose`)."""
        rows = self.drafter.forward_rows(
            self.proj, new_rows, [anchor], block_size, opts=DraftOpts(sampling, key), context=self.context
        )
        assert self.context.offset == position, "drafter context out of step with the target"
        return rows

    def state(self) -> list:
        return self.context.state()


def draw_token(logits: mx.array, sp: SamplingParams, key: mx.array | None):
    """One drafted token from ``logits`` [1, V], as an autoregressive drafter's step draws it:
    (its id [1], the distribution it was drawn from [1, V] or None when greedy, and q(token) [1],
    the temperature-1 softmax's when greedy: what a screen shows)."""
    choice, q = _choose(logits, sp, key)
    prob = token_probs(logits, choice) if q is None else mx.take_along_axis(q, choice[:, None], axis=-1)[:, 0]
    return choice, q, prob


def _choose(logits: mx.array, sp: SamplingParams, key: mx.array):
    """Tokens from ``logits`` [..., V]: the argmax, or a draw from ``distribution`` (returned too)."""
    if sp.greedy:
        return mx.argmax(logits, axis=-1).astype(mx.int32), None
    q = distribution(logits, sp)
    return mx.random.categorical(mx.log(q), key=key).astype(mx.int32), q


def _packing(module) -> int:
    """How many weights one stored element of ``module.weight`` holds (8 for 4-bit uint32)."""
    bits = getattr(module, "bits", None)
    return 32 // bits if bits else 1


__all__ = ["BlockDraftSession", "BlockDrafter", "BlockLayout", "DraftOpts", "DraftRows", "TrainOut", "draw_token"]
