"""What every published format reader produces: a ``Spec`` read from config.json (validated,
nothing allocated), which checks a target and builds a ``CheckpointDrafter`` from the weights."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from ..backbone import ConfidenceHead, MarkovHead
from ..drafting import BlockDrafter, BlockLayout
from ..errors import DrafterMismatchError, DsparkError
from ..files import output_dir, save_safetensors, write_text
from ..modeldir import read_header, safetensors_files
from ..sampling import soft_cap
from ..validate import calibration_temps, check_shapes
from .layers import DraftBody
from .quant import apply_quantization


@dataclass(frozen=True, kw_only=True)
class DraftShape:
    """A drafter's architecture in no format's words: what ``dspark train --format`` builds and
    each format's ``new_config`` writes as its own config.json (the reader of that format reads
    it back into the same network)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    taps: tuple[int, ...]
    block_size: int  # drafted tokens per round
    mask_token_id: int
    num_target_layers: int
    eps: float = 1e-6
    rope_theta: float = 10000.0
    markov_rank: int = 0  # 0: no Markov head
    confidence: bool = False
    window: int = 0  # context rows a block attends to before its anchor (0: all of them)
    softcap: float | None = None  # the drafter's logit soft-cap (the target's, usually)
    max_positions: int = 4096
    anchor_predicts: bool = True  # the anchor slot predicts the first draft (False: z-lab's block, slot 0 only reads)
    draft_vocab: int = 0  # the head's output vocabulary when reduced (a d2t table maps it; 0: the whole vocabulary)


@dataclass(kw_only=True)
class Spec:
    """A drafter checkpoint as its config describes it."""

    format: str
    variant: str  # e.g. "DSpark", "DFlash baseline", "DFlash"
    hidden: int
    vocab: int  # the target vocabulary the drafter works in
    draft_vocab: int  # its output vocabulary (smaller with a d2t table)
    taps: tuple[int, ...]
    block_size: int  # drafted tokens per round
    mask_token_id: int
    layout: BlockLayout
    make_layers: Callable[[], list]
    eps: float
    own_embedding: bool  # False: the target's table is used
    embed_scale: float | None  # None: the target's own scale (sqrt(hidden) for Gemma)
    own_head: bool  # False: the target's output head (tied embedding)
    softcap: float | None = None
    output_multiplier: float = 1.0
    markov_rank: int = 0
    confidence: bool = False
    confidence_with_markov: bool = True
    d2t: bool = False  # a draft->target offset table ships with the weights
    num_target_layers: int | None = None
    quantization: dict | None = None
    notes: list[str] = field(default_factory=list)

    # --- the target ----------------------------------------------------------------------
    def check_target(self, target) -> None:
        d = target.dims
        for name, mine, theirs in (
            ("hidden size", self.hidden, d.hidden_size),
            ("vocabulary", self.vocab, d.vocab_size),
        ):
            if mine != theirs:
                raise DrafterMismatchError(
                    f"the drafter was made for a target of {name} {mine}, this target's is {theirs}"
                )
        bad = [t for t in self.taps if t >= d.num_layers]
        if bad:
            raise DrafterMismatchError(
                f"the drafter taps target layer {bad[0]}, but the target has {d.num_layers} layers"
            )
        if self.num_target_layers is not None and self.num_target_layers != d.num_layers:
            raise DrafterMismatchError(
                f"the drafter was made for a target of {self.num_target_layers} layers, this target has {d.num_layers}"
            )

    # --- the weights ---------------------------------------------------------------------
    def net(self) -> nn.Module:
        """The network with lazy (never evaluated) initial weights: its shapes are what the
        checkpoint must hold."""
        net = DraftBody(self.make_layers(), self.hidden, len(self.taps), self.eps)
        if self.own_embedding:
            net.embed_tokens = nn.Embedding(self.vocab, self.hidden)
        if self.own_head:
            net.lm_head = nn.Linear(self.hidden, self.draft_vocab, bias=False)
        if self.markov_rank:
            net.markov_head = MarkovHead(self.vocab, self.markov_rank, self.draft_vocab)
        if self.confidence:
            net.confidence_head = ConfidenceHead(self.hidden + (self.markov_rank if self.confidence_with_markov else 0))
        return net

    def build(self, directory: Path, config: dict | None = None) -> CheckpointDrafter:
        header = {}
        for f in safetensors_files(directory):
            header.update(read_header(f))
        header.pop("__metadata__", None)
        tables = {k: header.pop(k) for k in ("d2t", "t2d") if k in header}
        if self.d2t and "d2t" not in tables:
            raise DsparkError(f"{directory}: draft_vocab_size is {self.draft_vocab} but the weights have no d2t table")
        net = self.net()
        apply_quantization(net, header, self.quantization, directory)
        check_shapes(header, {k: v.shape for k, v in tree_flatten(net.parameters())}, directory / "*.safetensors")
        weights = {}
        for f in safetensors_files(directory):
            try:
                weights.update(mx.load(str(f)))
            except Exception as e:  # mlx raises RuntimeError/ValueError for damaged files
                raise DsparkError(f"{f} is not a readable safetensors file ({e})") from None
        net.load_weights([(k, v) for k, v in weights.items() if k not in tables])
        mx.eval(net.parameters())
        drafter = self.make_drafter(net, config)
        if self.d2t:
            d2t = weights["d2t"].astype(mx.int64)
            if d2t.shape != (self.draft_vocab,):
                raise DsparkError(f"{directory}: d2t has shape {list(d2t.shape)}, expected [{self.draft_vocab}]")
            ids = (mx.arange(self.draft_vocab) + d2t).astype(mx.int32)
            if int(ids.min()) < 0 or int(ids.max()) >= self.vocab:
                raise DsparkError(f"{directory}: d2t maps a draft id outside the target vocabulary ({self.vocab})")
            drafter.draft_to_target = ids
        return drafter

    def make_drafter(self, net: nn.Module, config: dict | None) -> CheckpointDrafter:
        """The drafter of these weights (a format whose drafting differs returns its own kind)."""
        return CheckpointDrafter(self, net, config)

    def describe(self) -> dict:
        return {
            "variant": self.variant,
            "block_size": self.block_size,
            "block_slots": self.block_size + (0 if self.layout.anchor_predicts else 1),
            "anchor_predicts": self.layout.anchor_predicts,
            "tap_layers": list(self.taps),
            "mask_token_id": self.mask_token_id,
            "draft_vocab": self.draft_vocab,
            "layers": len(self.make_layers()),
            "markov_head": bool(self.markov_rank),
            "markov_rank": self.markov_rank,
            "confidence_head": self.confidence,
            "own_embedding": self.own_embedding,
            "own_head": self.own_head,
            "sliding_windows": [w for w in self.layout.windows if w],
            "notes": self.notes,
            "target": {
                "hidden_size": self.hidden,
                "vocab_size": self.vocab,
                "num_layers": self.num_target_layers,
                "min_layers": max(self.taps) + 1,
            },
        }


#: The key of a published format's config.json under which dspark keeps what the format has no
#: field for: the confidence head's calibration, the target a drafter was trained against, the
#: drafter settings it was trained with. The formats' own readers ignore keys they do not know.
EXTENSION = "dspark"


class CheckpointDrafter(BlockDrafter):
    """A published drafter, running through ``dspark.drafting``'s shared math."""

    def __init__(self, spec: Spec, net: nn.Module, config: dict | None = None):
        self.spec, self.net = spec, net
        self.format, self.layout = spec.format, spec.layout
        self.tap_layers, self.block_size, self.mask_token_id = spec.taps, spec.block_size, spec.mask_token_id
        self.confidence_with_markov = spec.confidence_with_markov
        self.config = dict(config or {})
        ext = self.config.get(EXTENSION) if isinstance(self.config.get(EXTENSION), dict) else {}
        self.calibration = calibration_temps(ext.get("calibration"), f"config.json ({EXTENSION})")
        self.target_weights = ext.get("target_weights") if isinstance(ext.get("target_weights"), str) else None

    def save(self, path: str | Path) -> Path:
        """This drafter in its own format: ``model.safetensors`` (the network's parameters under
        the checkpoint's names) and its ``config.json`` with dspark's extension updated, each
        written whole or not at all (weights first)."""
        p = output_dir(path, allow_existing=True)
        ext = {
            **(self.config.get(EXTENSION) or {}),
            "calibration": self.calibration,
            "target_weights": self.target_weights,
        }
        arrays = dict(tree_flatten(self.net.parameters()))
        if self.draft_to_target is not None:  # the vocabulary table travels as the format stores it
            arrays["d2t"] = (self.draft_to_target - mx.arange(self.draft_to_target.shape[0])).astype(mx.int64)
        save_safetensors(p / "model.safetensors", arrays, {"format": "mlx"})
        self.config[EXTENSION] = ext
        write_text(p / "config.json", json.dumps(self.config, indent=1) + "\n")
        return p

    def weights_note(self, target) -> str | None:
        if self.target_weights and self.target_weights != target.weights_fingerprint:
            return "this drafter was trained against different weights of this target (acceptance may be low)"
        return None

    def embed(self, proj, ids: mx.array) -> mx.array:
        rows = self.net.embed_tokens(ids) if self.spec.own_embedding else proj.table(ids)
        return rows * (proj.embed_scale if self.spec.embed_scale is None else self.spec.embed_scale)

    def head_raw(self, proj, h: mx.array) -> mx.array:
        out = self.net.lm_head(h) if self.spec.own_head else proj.head(h)
        if self.spec.output_multiplier != 1.0:
            out = out * self.spec.output_multiplier
        return out

    def cap(self, proj, x: mx.array) -> mx.array:
        return soft_cap(x, self.spec.softcap)

    def check_target(self, target) -> None:
        self.spec.check_target(target)
        super().check_target(target)

    def info(self) -> dict:
        return {
            "format": self.format,
            "variant": self.spec.variant,
            "block_size": self.block_size,
            "confidence": self.has_confidence,
        }
