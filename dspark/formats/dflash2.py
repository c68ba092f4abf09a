"""DFlash 2 heads (``DFlash2DraftModel``), as z-lab's ``dflash`` 0.1.0 reads and runs them
(``dflash.model_mlx.load_draft`` and ``stream_generate``; its Transformers ``dflash.model`` is
the same network).

config.json: a z-lab DFlash config (``zlab.read_spec`` reads what is shared: sizes, taps, mask,
block, layer types and windows, ``input_embedding_scale``, ``output_multiplier``, soft-cap) with
the DFlash 2 runtime under ``dflash_config``: ``conv_kernel_size``, ``conv_group_size``,
``selector_rank``, ``selector_top_k``, and optionally ``runtime_block_size`` and
``draft_window_size``. Weights: z-lab's DFlash ones, and per layer ``attention_conv`` /
``mlp_conv`` (``base_kernel`` [2, K, H], ``kernel_projection.weight`` [2 K H/g, H]), and
``candidate_selector.{predecessor_codebook, successor_codebook}`` (stored without ``.weight``:
speculators trains them as bare parameters) and ``candidate_selector.hidden_projection.weight``.

What DFlash 2 adds to a DFlash layer: around attention and around the MLP, a grouped causal
convolution over the block's slots whose taps are a learned base kernel plus a kernel computed
from each slot's own input (``kernel_projection``: one half convolves the sublayer's input, the
other its output). The context rows are not convolved. After the head, a candidate selector
drafts each slot among its ``selector_top_k`` best logits, adding a bilinear score of the
previous token (the anchor, then each draft), the slot's hidden state and the candidate:
sequential, like a Markov head. Sampling draws among the candidates from
``softmax(score / temperature)`` (z-lab's rule: no top-p or top-k on the draft side), which the
engine's ratio test sees widened to the whole vocabulary with zeros.

``runtime_block_size`` is the block a round runs (z-lab's loop ignores it and runs
``block_size``; mlx-vlm runs it); ``draft_window_size`` caps the committed rows every layer
sees before the anchor (z-lab ignores it; mlx-vlm keeps at least that many in a buffered cache).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn

from ..drafting import DraftOpts, DraftRows
from ..errors import DsparkError
from ..validate import Fields
from . import zlab
from .base import CheckpointDrafter, Spec
from .layers import Qwen3Layer

FORMAT = "dflash2"


class GroupedDynamicConv(nn.Module):
    """A causal convolution over a block's slots, ``kernel`` taps, one coefficient per
    ``group`` channels and tap: ``base_kernel[i]`` plus what ``kernel_projection`` reads off the
    slot's input (``i`` = 0 for the sublayer's input, 1 for its output)."""

    def __init__(self, hidden: int, *, kernel: int, group: int):
        super().__init__()
        self.kernel, self.group = kernel, group
        self.base_kernel = mx.zeros((2, kernel, hidden))
        self.kernel_projection = nn.Linear(hidden, 2 * kernel * (hidden // group), bias=False)

    def prepare(self, x: mx.array) -> tuple[mx.array, mx.array]:
        """``x`` [A, S, H] convolved, and the output side's per-slot kernels [A, S, K, H/g]."""
        dynamic = self.kernel_projection(x).reshape(*x.shape[:-1], 2, self.kernel, x.shape[-1] // self.group)
        return self._convolve(x, dynamic[..., 0, :, :], 0), dynamic[..., 1, :, :]

    def finish(self, x: mx.array, dynamic: mx.array) -> mx.array:
        return self._convolve(x, dynamic, 1)

    def _convolve(self, x: mx.array, dynamic: mx.array, side: int) -> mx.array:
        A, S, H = x.shape
        groups = H // self.group
        rows = x.reshape(A, S, groups, self.group)
        out = mx.zeros_like(rows)
        for tap in range(self.kernel):
            # slot s reads slot s - tap; slots before the block's first read zeros
            shifted = rows if tap == 0 else mx.concatenate([mx.zeros_like(rows[:, :tap]), rows[:, : S - tap]], axis=1)
            base = self.base_kernel[side, tap].reshape(1, 1, groups, self.group).astype(x.dtype)
            out = out + (base + dynamic[:, :, tap, :, None]) * shifted[:, :S]
        return out.reshape(A, S, H)


class Dflash2Layer(Qwen3Layer):
    """A z-lab DFlash (Qwen3) layer with DFlash 2's convolutions around attention and the MLP."""

    def __init__(self, hidden: int, *, conv_kernel: int, conv_group: int, **qwen3):
        super().__init__(hidden, **qwen3)
        self.attention_conv = GroupedDynamicConv(hidden, kernel=conv_kernel, group=conv_group)
        self.mlp_conv = GroupedDynamicConv(hidden, kernel=conv_kernel, group=conv_group)

    def __call__(self, x, ctx_k, ctx_v, offset, *, mask=None):
        h, kernel = self.attention_conv.prepare(self.input_layernorm(x))
        x = x + self.attention_conv.finish(self.attend(h, ctx_k, ctx_v, offset, mask=mask), kernel)
        h, kernel = self.mlp_conv.prepare(self.post_attention_layernorm(x))
        return x + self.mlp_conv.finish(self.mlp(h), kernel)


class CandidateSelector(nn.Module):
    """Scores ``top_k`` candidates of a slot: their logit plus
    ``sum(predecessor_codebook[prev] * hidden_projection(h) * successor_codebook[candidate])``."""

    def __init__(self, vocab: int, hidden: int, *, rank: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.predecessor_codebook = mx.zeros((vocab, rank))
        self.successor_codebook = mx.zeros((vocab, rank))
        self.hidden_projection = nn.Linear(hidden, rank, bias=False)

    def candidates(self, logits: mx.array) -> tuple[mx.array, mx.array]:
        """Each slot's ``top_k`` best ids [A, G, k] (in mlx's partition order) and their logits."""
        ids = mx.argpartition(logits, -self.top_k, axis=-1)[..., -self.top_k :]
        return ids, mx.take_along_axis(logits, ids, axis=-1)

    def scores(self, unary: mx.array, projected: mx.array, prev: mx.array, ids: mx.array) -> mx.array:
        """Slot scores [A, k] from its candidates' logits ``unary``, its projected hidden state
        [A, rank] and the previous token ``prev`` [A]."""
        context = self.predecessor_codebook[prev] * projected
        return unary + (context[:, None, :] * self.successor_codebook[ids]).sum(axis=-1)


@dataclasses.dataclass(kw_only=True)
class Dflash2Spec(Spec):
    """A DFlash 2 head: a z-lab Spec with the convolutions and the selector."""

    conv_kernel: int
    conv_group: int
    selector_rank: int
    selector_top_k: int
    trained_block: int  # block slots the head was trained with (dflash_config.block_size)

    def net(self) -> nn.Module:
        net = super().net()
        net.candidate_selector = CandidateSelector(
            self.vocab, self.hidden, rank=self.selector_rank, top_k=self.selector_top_k
        )
        return net

    def make_drafter(self, net: nn.Module, config: dict | None) -> CheckpointDrafter:
        return Dflash2Drafter(self, net, config)

    def describe(self) -> dict:
        return {
            **super().describe(),
            "trained_block_slots": self.trained_block,
            "draft_window": self.layout.context_window,
            "conv_kernel_size": self.conv_kernel,
            "conv_group_size": self.conv_group,
            "selector_rank": self.selector_rank,
            "selector_top_k": self.selector_top_k,
        }


class Dflash2Drafter(CheckpointDrafter):
    """A DFlash 2 head drafting through its candidate selector."""

    def forward_rows(self, proj, h_ctx, anchors, gamma, *, opts=None, context=None) -> DraftRows:
        """``gamma`` drafts after each anchor (``BlockDrafter.forward_rows``), each chosen among
        its slot's candidates given the token before it."""
        opts = opts or DraftOpts()
        h, prev = self.block_hidden(proj, h_ctx, anchors, gamma=gamma, context=context)
        selector = self.net.candidate_selector
        logits = self.head(proj, h)  # z-lab selects on the finished (capped) logits
        ids, unary = selector.candidates(logits)
        projected = selector.hidden_projection(h)
        sp = opts.sampling
        keys = None if sp.greedy else mx.random.split(opts.key if opts.key is not None else mx.random.key(0), gamma)
        toks, probs, qs = [], [], []
        for k in range(gamma):
            score = selector.scores(unary[:, k], projected[:, k], prev, ids[:, k]).astype(mx.float32)
            if sp.greedy:
                pick = mx.argmax(score, axis=-1)
                q = mx.softmax(score, axis=-1)
            else:
                q = mx.softmax(score / sp.temperature, axis=-1)
                pick = mx.random.categorical(mx.log(q), key=keys[k])
            prev = mx.take_along_axis(ids[:, k], pick[:, None], axis=-1)[:, 0].astype(mx.int32)
            toks.append(prev)
            probs.append(mx.take_along_axis(q, pick[:, None], axis=-1)[:, 0])
            if not sp.greedy:  # the candidates' distribution, zero elsewhere in the vocabulary
                qs.append(mx.put_along_axis(mx.zeros((q.shape[0], logits.shape[-1]), q.dtype), ids[:, k], q, axis=-1))
        return DraftRows(
            tokens=mx.stack(toks, axis=1),
            q=None if sp.greedy else mx.stack(qs, axis=1),
            draft_probs=mx.stack(probs, axis=1),
            confidences=None,
            hidden=h,
            logits=logits,
        )


def read_spec(directory: Path, config: dict) -> Dflash2Spec:
    where = directory / "config.json"
    f = Fields(config, where)
    base = zlab.read_spec(directory, config)
    dc = f.dict("dflash_config")
    H, L = base.hidden, f.int("num_hidden_layers", "draft_layers")
    absent = [
        k for k in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k") if dc.get(k) is None
    ]
    if absent:
        raise DsparkError(
            f"{where} names DFlash2DraftModel, but a DFlash 2 head needs {absent[0]} in its dflash_config "
            f"(the sizes of its convolutions and candidate selector)"
        )
    kernel, group = f.int("conv_kernel_size", config=dc), f.int("conv_group_size", config=dc)
    rank, top_k = f.int("selector_rank", config=dc), f.int("selector_top_k", config=dc)
    if H % group:
        raise f._fail("conv_group_size", group, f"a divisor of hidden_size ({H})")
    if top_k > base.vocab:
        raise f._fail("selector_top_k", top_k, f"at most vocab_size ({base.vocab})")
    trained = base.block_size + 1  # z-lab's block: the anchor's slot and the drafts
    runtime = f.int("runtime_block_size", "block_size", default=trained, config=dc)
    if not 2 <= runtime <= trained:
        raise f._fail("runtime_block_size", runtime, f"between 2 and block_size ({trained})")
    window = f.int("draft_window_size", config=dc) if dc.get("draft_window_size") is not None else None
    args = zlab.qwen3_layer_args(f)

    def layers():
        return [Dflash2Layer(H, conv_kernel=kernel, conv_group=group, **args) for _ in range(L)]

    fields = {x.name: getattr(base, x.name) for x in dataclasses.fields(Spec)}
    fields.update(
        format=FORMAT,
        variant="DFlash 2",
        block_size=runtime - 1,
        make_layers=layers,
        layout=dataclasses.replace(base.layout, context_window=window),
    )
    return Dflash2Spec(
        **fields, conv_kernel=kernel, conv_group=group, selector_rank=rank, selector_top_k=top_k, trained_block=trained
    )


__all__ = ["FORMAT", "CandidateSelector", "Dflash2Drafter", "Dflash2Layer", "Dflash2Spec", "read_spec"]
