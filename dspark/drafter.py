"""``DflashDrafter``: the seed's drafter class in Python (its API: docs/seed-api.md).

DSpark = the DFlash parallel backbone over ``m`` tapped target layers, plus a low-rank Markov
head (sequential drafting) and a confidence head. With both heads off it is a DFlash-style
drafter in DSpark's slot convention: block position k (0-based) predicts the token at anchor
position + k + 1, so the anchor slot predicts too and a block of ``G`` positions drafts ``G``
tokens.

``load`` and ``save`` read and write this project's own directory format
(``dspark.formats.native``); ``dspark.loading.load_drafter`` loads any format.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TypeVar

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from .backbone import DraftNet, init_params
from .config import DflashConfig, default_taps
from .drafting import BlockDrafter, BlockLayout, DraftOpts, DraftRows, TrainOut
from .errors import DrafterMismatchError, DsparkError
from .formats import native
from .modeldir import read_config
from .target import DraftProjection, Target, TargetDims

T = TypeVar("T")


class DflashDrafter(BlockDrafter):
    """A drafter for one target. Public attributes (the seed's API, in Python names):

    - ``net``: the network (an ``mlx.nn.Module``: ``fc``, ``hidden_norm``, ``layers``, ``norm``,
      and ``markov_head`` / ``confidence_head`` when enabled). Training loops differentiate and
      update it (``nn.value_and_grad(drafter.net, ...)``); ``flat_params`` / ``install_param`` /
      ``use_params`` are the same parameters by index, in ``names`` order.
    - ``cfg``, ``dims``, ``m`` (tapped target layers), ``names``, ``target_id``;
    - ``calibration``: per-position temperatures of the confidence logits (None: raw);
    - ``target_weights``: fingerprint of the target weights it was trained against.
    """

    def __init__(self, net: DraftNet, dims: TargetDims, cfg: DflashConfig, target_id: str, *, calibration=None):
        self.net, self.dims, self.cfg, self.target_id = net, dims, cfg, target_id
        if cfg.context_window:  # every layer sees [anchor - W, anchor) of the context, as it was trained
            self.layout = BlockLayout(windows=(cfg.context_window,) * cfg.num_layers, window_from_anchor=True)
        self.m = len(cfg.tap_layers)
        self.tap_layers, self.block_size, self.mask_token_id = cfg.tap_layers, cfg.block_size, cfg.mask_token_id
        self.names = [name for name, _ in tree_flatten(net.parameters())]
        # Per-position temperatures of the confidence logits (sequential temperature scaling).
        self.calibration: list[float] | None = list(calibration) if calibration else None
        # Fingerprint of the target weights it was trained against (None: unknown).
        self.target_weights: str | None = None
        self.quantization: dict | None = None  # mlx quantization block when stored quantized

    # --- construction -----------------------------------------------------------------
    @staticmethod
    def dims_of(target: Target) -> TargetDims:
        """The seed's ``dimsOf(model)``: what a drafter needs to know of its target."""
        return target.dims

    @classmethod
    def init(cls, target: Target, cfg: DflashConfig, target_id: str | None = None, seed: int = 0):
        drafter = cls.init_from_dims(cls.dims_of(target), cfg, target_id or target.target_id, seed)
        drafter.target_weights = target.weights_fingerprint
        return drafter

    @classmethod
    def init_from_dims(cls, dims: TargetDims, cfg: DflashConfig, target_id: str, seed: int = 0):
        cfg = cfg if cfg.tap_layers else _with(cfg, tap_layers=default_taps(dims.num_layers))
        native.check_cfg(cfg, dims)
        net = DraftNet(dims, cfg)
        init_params(net, mx.random.key(seed))
        mx.eval(net.parameters())
        return cls(net, dims, cfg, target_id)

    # --- parameters (the hooks a training loop uses with mx.value_and_grad) ---------------
    def get(self, name: str) -> mx.array:
        return dict(tree_flatten(self.net.parameters()))[name]

    def flat_params(self) -> list[mx.array]:
        params = dict(tree_flatten(self.net.parameters()))
        return [params[n] for n in self.names]

    def install_param(self, i: int, p: mx.array) -> None:
        self.net.update(tree_unflatten([(self.names[i], p)]))

    def use_params(self, primals: Sequence[mx.array], fn: Callable[[], T]) -> T:
        """Run ``fn`` with ``primals`` installed as the parameters, then restore the old ones."""
        old = self.flat_params()
        self.net.update(tree_unflatten(list(zip(self.names, primals))))
        try:
            return fn()
        finally:
            self.net.update(tree_unflatten(list(zip(self.names, old))))

    def num_params(self) -> int:
        return sum(p.size for p in self.flat_params())

    # --- forward passes ---------------------------------------------------------------
    def _train_block(self, proj: DraftProjection, anchor_emb: mx.array, block_size: int) -> mx.array:
        masks = proj.embed(mx.full((anchor_emb.shape[0], block_size - 1), self.cfg.mask_token_id, mx.int32))
        return mx.concatenate([anchor_emb[:, None, :], masks], axis=1)

    def forward_train(
        self,
        proj: DraftProjection,
        h_ctx: mx.array,
        ctx_mask: mx.array | None,
        anchor_emb: mx.array,
        prev_toks: mx.array,
    ) -> TrainOut:
        """Teacher-forced parallel forward. ``h_ctx`` [A, L, m*H] are the tap rows strictly
        before each anchor (right-aligned), ``ctx_mask`` [A, L] marks real rows (or None),
        ``anchor_emb`` [A, H] is ``proj.embed(anchor)``, ``prev_toks`` [A, G] are the true
        previous tokens (anchor, x1, .., x_{G-1}) for the Markov head."""
        A, L, _ = h_ctx.shape
        G = prev_toks.shape[1]
        mask = None
        if ctx_mask is not None:
            mask = mx.concatenate([ctx_mask.astype(mx.bool_), mx.ones((A, G), mx.bool_)], axis=1)[:, None, None, :]
        h = self._backbone(self._train_block(proj, anchor_emb, G), self.project_context_rows(h_ctx, 0), L, mask)
        return self.train_heads(proj, h, prev_toks)

    # --- the engine's proposer protocol (forward_rows, start: dspark.drafting) -----------
    def check_target(self, target: Target) -> None:
        if self.dims != target.dims:
            diff = [
                f"{k} {a} vs {b}"
                for (k, a), b in zip(self.dims.to_dict().items(), target.dims.to_dict().values())
                if a != b
            ]
            raise DrafterMismatchError(
                f"drafter was made for different target dimensions ({'; '.join(diff)}, drafter vs target)"
            )
        if self.target_id != target.target_id:
            raise DrafterMismatchError(f"drafter was made for target {self.target_id!r}, not {target.target_id!r}")

    def weights_note(self, target: Target) -> str | None:
        """A warning when the drafter was trained against other weights of the same architecture
        (another checkpoint or fine-tune): still lossless, but acceptance may be poor."""
        if self.target_weights and self.target_weights != target.weights_fingerprint:
            return "this drafter was trained against different weights of this target (acceptance may be low)"
        return None

    # --- files (dspark.formats.native) ----------------------------------------------------
    def save(self, path: str | Path) -> None:
        """``config.json`` + ``model.safetensors``, each written whole or not at all."""
        native.write(
            path,
            self.net,
            {
                "target_id": self.target_id,
                "target_weights": self.target_weights,
                "dims": self.dims.to_dict(),
                "cfg": asdict(self.cfg),
                "calibration": self.calibration,
                "quantization": self.quantization,
            },
        )

    @classmethod
    def load(cls, path: str | Path, target: Target | None = None) -> DflashDrafter:
        """A drafter directory in this project's own format (the seed's ``load(dir)``); with
        ``target``, one that does not fit it is refused before its weights are read. Published
        formats: ``dspark.loading.load_drafter``."""
        p = Path(path).expanduser()
        if not p.is_dir():
            raise DsparkError(f"drafter directory not found: {p}")
        meta = read_config(p, "a drafter")
        dims, cfg = native.read_config(p, meta)
        drafter = cls(
            native.empty_net(p, meta, dims, cfg), dims, cfg, meta["target_id"], calibration=meta.get("calibration")
        )
        drafter.target_weights = meta.get("target_weights")
        drafter.quantization = meta.get("quantization")
        if target is not None:
            drafter.check_target(target)
        native.load_weights(drafter.net, p)
        return drafter

    def dispose(self) -> None:
        super().dispose()
        self.names = []


def _with(cfg: DflashConfig, **changes) -> DflashConfig:
    return DflashConfig(**{**asdict(cfg), **changes})


__all__ = [
    "DflashConfig",
    "DflashDrafter",
    "DraftOpts",
    "DraftRows",
    "TrainOut",
    "default_taps",
]  # config's re-exported
