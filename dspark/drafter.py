"""``DflashDrafter``: the seed's drafter class in Python (see ``shared/seed/DflashDrafter-api.txt``).

DSpark = the DFlash parallel backbone over ``m`` tapped target layers, plus a low-rank Markov
head (sequential drafting) and a confidence head. With both heads off it is a DFlash-style
drafter in DSpark's slot convention: block position k (0-based) predicts the token at anchor
position + k + 1, so the anchor slot predicts too and a block of ``G`` positions drafts ``G``
tokens.

Directory format: ``config.json`` (format, version, target_id, target_weights, dims, cfg,
calibration) and
``model.safetensors``. Nothing in a drafter directory is ever executed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable, Sequence, TypeVar

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from .backbone import DraftNet, init_params
from .drafting import BlockDrafter, DraftOpts, DraftRows
from .errors import DrafterMismatchError, DsparkError
from .options import option
from .target import DraftProjection, Target, TargetDims

FORMAT = "dspark-drafter"
VERSION = 1
T = TypeVar("T")


def default_taps(num_layers: int, n: int = 3) -> tuple[int, ...]:
    """DFlash's rule: ``n`` evenly spaced layers from 1 to N-3 (N//2 when n == 1)."""
    if n == 1:
        return (num_layers // 2,)
    hi = max(1, num_layers - 3)
    return tuple(sorted({round(1 + i * (hi - 1) / (n - 1)) for i in range(n)}))


@dataclass(frozen=True)
class DflashConfig:
    """The drafter's shape (``dspark init`` and ``dspark train`` build their options from it)."""

    block_size: int = option(7, "tokens drafted per round (G)", lo=1, hi=64)
    num_layers: int = option(2, "drafter transformer layers", flag="--layers", lo=1, hi=64)
    tap_layers: tuple[int, ...] = option((), "comma-separated target layer indices whose outputs the drafter reads",
                                         flag="--taps", none="evenly spaced")
    mask_token_id: int = option(4, "the mask token filling the block after the anchor (Gemma's <mask> is 4)",
                                lo=0, hi=10_000_000)
    markov: bool = option(True, "DSpark's Markov head (--no-markov: DFlash-style)")
    markov_rank: int = option(256, "rank of the Markov head", lo=1, hi=65_536)
    confidence: bool = option(True, "the confidence head")
    rope_theta: float = option(10000.0, "RoPE base of the drafter's attention", lo=1.0, hi=1e12)
    intermediate_size: int = option(0, "MLP width (0: the target's)", lo=0, hi=1_000_000)

    @classmethod
    def from_dict(cls, d: dict) -> "DflashConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise DsparkError(f"unknown drafter config keys: {sorted(unknown)}")
        d = dict(d)
        if "tap_layers" in d:
            d["tap_layers"] = tuple(d["tap_layers"])
        return cls(**d)


@dataclass
class TrainOut:
    logits: mx.array  # [A, G, V] with the Markov bias (teacher-forced)
    base_logits: mx.array  # [A, G, V] the backbone's alone
    conf_logits: mx.array | None  # [A, G]
    hidden: mx.array  # [A, G, H]


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

    def __init__(self, net: DraftNet, dims: TargetDims, cfg: DflashConfig, target_id: str, calibration=None):
        self.net, self.dims, self.cfg, self.target_id = net, dims, cfg, target_id
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
        return target.dims

    @classmethod
    def init(cls, target: Target, cfg: DflashConfig, target_id: str | None = None, seed: int = 0):
        drafter = cls.init_from_dims(target.dims, cfg, target_id or target.target_id, seed)
        drafter.target_weights = target.weights_fingerprint
        return drafter

    @classmethod
    def init_from_dims(cls, dims: TargetDims, cfg: DflashConfig, target_id: str, seed: int = 0):
        cfg = cfg if cfg.tap_layers else _with(cfg, tap_layers=default_taps(dims.num_layers))
        _check_cfg(cfg, dims)
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
    def _train_block(self, proj: DraftProjection, anchor_emb: mx.array, gamma: int) -> mx.array:
        masks = proj.embed(mx.full((anchor_emb.shape[0], gamma - 1), self.cfg.mask_token_id, mx.int32))
        return mx.concatenate([anchor_emb[:, None, :], masks], axis=1)

    def _conf(self, h: mx.array, e: mx.array | None) -> mx.array:
        return self.net.confidence_head(h if e is None else mx.concatenate([h, e], axis=-1))

    def forward_train(self, proj: DraftProjection, h_ctx: mx.array, ctx_mask: mx.array | None, anchor_emb: mx.array,
                      prev_toks: mx.array) -> TrainOut:
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
        return self._train_heads(proj, h, prev_toks)

    def forward_train_packed(self, proj: DraftProjection, h_seq: mx.array, owner: mx.array, positions: mx.array,
                             prev_toks: mx.array, ctx_len: int = 0) -> TrainOut:
        """``forward_train`` for anchors that share sequences (the trainer's fast path): each
        sequence's tap rows ``h_seq`` [N, S, m*H] are projected once, not once per anchor.
        Anchor ``a`` sits at position ``positions[a]`` of sequence ``owner[a]`` and attends to
        that sequence's rows strictly before it (the last ``ctx_len`` of them when > 0). Rows
        keep their absolute positions and the block starts at the anchor's, as in generation;
        RoPE is relative, so this equals ``forward_train`` on right-aligned windows."""
        S, (A, G) = h_seq.shape[1], prev_toks.shape
        row, pos = mx.arange(S)[None, :], positions[:, None]
        seen = row < pos
        if ctx_len > 0:
            seen = seen & (row >= pos - ctx_len)
        mask = mx.concatenate([seen, mx.ones((A, G), mx.bool_)], axis=1)[:, None, None, :]
        ctx = [(k[owner], v[owner]) for k, v in self.project_context_rows(h_seq, 0)]
        h = self._backbone(self._train_block(proj, proj.embed(prev_toks[:, 0]), G), ctx, positions, mask)
        return self._train_heads(proj, h, prev_toks)

    def _train_heads(self, proj: DraftProjection, h: mx.array, prev_toks: mx.array) -> TrainOut:
        base = proj.logits(h)
        logits, e = base, None
        if self.cfg.markov:
            bias, e = self.net.markov_head(prev_toks)  # teacher-forced with the true previous tokens
            logits = base + bias
        conf = self._conf(h, e) if self.cfg.confidence else None
        return TrainOut(logits, base, conf, h)

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
            raise DrafterMismatchError(
                f"drafter was made for target {self.target_id!r}, not {target.target_id!r}"
            )

    def weights_note(self, target: Target) -> str | None:
        """A warning when the drafter was trained against other weights of the same architecture
        (another checkpoint or fine-tune): still lossless, but acceptance may be poor."""
        if self.target_weights and self.target_weights != target.weights_fingerprint:
            return "this drafter was trained against different weights of this target (acceptance may be low)"
        return None

    # --- files ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """``config.json`` + ``model.safetensors``, each written whole or not at all (weights
        first: a config never names weights that are not there)."""
        from .files import output_dir, save_safetensors, write_text

        p = output_dir(path, allow_existing=True)
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "target_id": self.target_id,
            "target_weights": self.target_weights,
            "dims": self.dims.to_dict(),
            "cfg": asdict(self.cfg),
            "calibration": self.calibration,
            "quantization": self.quantization,
        }
        save_safetensors(p / "model.safetensors", dict(tree_flatten(self.net.parameters())), {"format": FORMAT})
        write_text(p / "config.json", json.dumps(meta, indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path, target: Target | None = None) -> BlockDrafter:
        """Load a drafter directory (or Hugging Face name) of any supported format
        (``dspark.formats``); with ``target``, refuse one that does not fit it."""
        from .formats import load_drafter

        return load_drafter(path, target)

    @classmethod
    def load_native(cls, p: Path, meta: dict, target: Target | None = None) -> "DflashDrafter":
        """This project's own format: ``config.json`` (checked before anything is allocated)
        and ``model.safetensors``, possibly quantized."""
        from .checkpoint import read_header
        from .formats.base import quantize
        from .validate import check_shapes

        dims, cfg = read_native_config(p, meta)
        w = p / "model.safetensors"
        if not w.is_file():
            raise DsparkError(f"{p} has no model.safetensors")
        header = read_header(w)
        header.pop("__metadata__", None)
        net = DraftNet(dims, cfg)
        quantize(net, header, meta.get("quantization"), p)
        check_shapes(header, {k: v.shape for k, v in tree_flatten(net.parameters())}, w)
        drafter = cls(net, dims, cfg, meta["target_id"], meta.get("calibration"))
        drafter.target_weights = meta.get("target_weights")
        if target is not None:
            drafter.check_target(target)
        try:
            weights = mx.load(str(w))
        except Exception as e:  # mlx raises RuntimeError/ValueError for damaged files
            raise DsparkError(f"{w} is not a readable safetensors file ({e})") from None
        net.load_weights(list(weights.items()))
        mx.eval(net.parameters())
        drafter.quantization = meta.get("quantization")
        return drafter

    def dispose(self) -> None:
        super().dispose()
        self.names = []


def _with(cfg: DflashConfig, **changes) -> DflashConfig:
    return DflashConfig(**{**asdict(cfg), **changes})


def _check_cfg(cfg: DflashConfig, dims: TargetDims) -> None:
    if cfg.block_size < 1 or cfg.num_layers < 1:
        raise DsparkError("block size and number of drafter layers must be at least 1")
    bad = [t for t in cfg.tap_layers if not 0 <= t < dims.num_layers - 1]
    if bad or len(set(cfg.tap_layers)) != len(cfg.tap_layers):
        raise DsparkError(f"tap layers {list(cfg.tap_layers)} must be distinct indices in 0..{dims.num_layers - 2}")
    if not 0 <= cfg.mask_token_id < dims.vocab_size:
        raise DsparkError(f"mask token id {cfg.mask_token_id} is outside the vocabulary ({dims.vocab_size})")


def read_native_config(p: Path, meta: dict) -> tuple[TargetDims, DflashConfig]:
    """The dims and cfg sections of a native config.json, validated (types, ranges, the taps
    inside the target) before anything is allocated."""
    from .options import check_options
    from .validate import Fields

    if meta.get("version") != VERSION:
        raise DsparkError(f"{p} is drafter format version {meta.get('version')!r}, this dspark reads {VERSION}")
    f = Fields(meta, p / "config.json")
    if not isinstance(meta.get("target_id"), str):
        raise DsparkError(f"{p / 'config.json'} has no target_id")
    d = Fields(f.dict("dims"), p / "config.json (dims)")
    try:
        dims = TargetDims(
            hidden_size=d.int("hidden_size"), num_layers=d.int("num_layers", "num_hidden_layers"),
            vocab_size=d.int("vocab_size"), num_heads=d.int("num_heads", "num_attention_heads"),
            num_kv_heads=d.int("num_kv_heads", "num_key_value_heads"), head_dim=d.int("head_dim"),
            intermediate_size=d.int("intermediate_size"), rms_norm_eps=d.float("rms_norm_eps", "rms_norm_eps"),
            final_logit_softcapping=d.float("final_logit_softcapping", "softcap") if d.has("final_logit_softcapping") else None)
        cfg = DflashConfig.from_dict(f.dict("cfg"))
    except TypeError as e:
        raise DsparkError(f"{p / 'config.json'} has a malformed dims/cfg section ({e})") from None
    check_options(cfg)
    _check_cfg(cfg, dims)
    return dims, cfg


__all__ = ["DflashConfig", "DflashDrafter", "DraftOpts", "DraftRows", "TrainOut", "default_taps"]
