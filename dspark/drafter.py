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
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Sequence, TypeVar

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from .backbone import ContextKV, DraftNet, init_params
from .errors import DrafterMismatchError, DsparkError, read_config
from .options import option
from .sampling import SamplingParams, distribution, token_probs
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
class DraftRows:
    """What one ``forward_rows`` call drafted, per anchor row."""

    tokens: mx.array  # [A, G] int32
    q: mx.array | None  # [A, G, V] the exact distributions sampled from (None when greedy)
    draft_probs: mx.array  # [A, G] q(token) (temperature-1 softmax when greedy)
    confidences: mx.array | None  # [A, G] calibrated c_k
    hidden: mx.array  # [A, G, H]
    conf_logits: mx.array | None = None  # [A, G] raw confidence logits z_k (what calibration fits)


@dataclass
class TrainOut:
    logits: mx.array  # [A, G, V] with the Markov bias (teacher-forced)
    base_logits: mx.array  # [A, G, V] the backbone's alone
    conf_logits: mx.array | None  # [A, G]
    hidden: mx.array  # [A, G, H]


@dataclass
class DraftOpts:
    sampling: SamplingParams = field(default_factory=SamplingParams)
    key: mx.array | None = None


class DflashDrafter:
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
        self.names = [name for name, _ in tree_flatten(net.parameters())]
        # Per-position temperatures of the confidence logits (sequential temperature scaling).
        self.calibration: list[float] | None = list(calibration) if calibration else None
        # Fingerprint of the target weights it was trained against (None: unknown).
        self.target_weights: str | None = None

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
    def project_context_rows(self, hidden: mx.array, offset: int = 0) -> list[tuple[mx.array, mx.array]]:
        """Per-layer (k, v) of context rows ``hidden`` [A, L, m*H] placed at ``offset``."""
        c = self.net.hidden_norm(self.net.fc(hidden))
        return [layer.kv(c, offset) for layer in self.net.layers]

    def _backbone(self, x: mx.array, ctx: list, offset: int, mask=None) -> mx.array:
        for layer, (k, v) in zip(self.net.layers, ctx):
            x = layer(x, k, v, offset, mask)
        return self.net.norm(x)

    def _block(self, proj: DraftProjection, anchor_emb: mx.array, gamma: int) -> mx.array:
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
        h = self._backbone(self._block(proj, anchor_emb, G), self.project_context_rows(h_ctx, 0), L, mask)
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
        h = self._backbone(self._block(proj, proj.embed(prev_toks[:, 0]), G), ctx, positions, mask)
        return self._train_heads(proj, h, prev_toks)

    def _train_heads(self, proj: DraftProjection, h: mx.array, prev_toks: mx.array) -> TrainOut:
        base = proj.logits(h)
        logits, e = base, None
        if self.cfg.markov:
            bias, e = self.net.markov_head(prev_toks)  # teacher-forced with the true previous tokens
            logits = base + bias
        conf = self._conf(h, e) if self.cfg.confidence else None
        return TrainOut(logits, base, conf, h)

    def forward_rows(self, proj: DraftProjection, h_ctx: mx.array | None, anchors: mx.array | Sequence[int], gamma: int,
                     opts: DraftOpts | None = None, context: ContextKV | None = None) -> DraftRows:
        """Draft ``gamma`` tokens after each anchor. New committed tap rows ``h_ctx``
        [A, n, m*H] (or None) are projected and appended to ``context`` first."""
        opts = opts or DraftOpts()
        context = context if context is not None else ContextKV(len(self.net.layers))
        if h_ctx is not None and h_ctx.shape[1] > 0:
            context.append(self.project_context_rows(h_ctx, context.offset))
        prev = mx.array(anchors, mx.int32) if not isinstance(anchors, mx.array) else anchors
        ctx = [context.layer(i) for i in range(len(self.net.layers))]
        h = self._backbone(self._block(proj, proj.embed(prev), gamma), ctx, context.offset)
        base = proj.logits(h)
        sp = opts.sampling
        keys = mx.random.split(opts.key if opts.key is not None else mx.random.key(0), gamma)
        logits, e = base, None
        if self.cfg.markov:
            # Sequential: each position's bias depends on the token just drafted. Only the
            # choice itself is in the loop; probabilities and confidences are batched after.
            steps, embs, toks, qs = [], [], [], []
            for k in range(gamma):
                bias, e_k = self.net.markov_head(prev)
                step = base[:, k] + bias
                prev, q_k = _choose(step, sp, keys[k])
                steps.append(step), embs.append(e_k), toks.append(prev), qs.append(q_k)
            logits, e = mx.stack(steps, axis=1), mx.stack(embs, axis=1)
            tokens, q = mx.stack(toks, axis=1), None if sp.greedy else mx.stack(qs, axis=1)
        else:  # positions are independent: draft them all at once
            tokens, q = _choose(logits, sp, keys[0])
        if sp.greedy:
            draft_probs = token_probs(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1)).reshape(tokens.shape)
        else:
            draft_probs = mx.take_along_axis(q, tokens[..., None], axis=-1)[..., 0]
        z = self._conf(h, e) if self.cfg.confidence else None
        conf = self._calibrated(z) if z is not None else None
        return DraftRows(tokens=tokens, q=q, draft_probs=draft_probs, confidences=conf, hidden=h, conf_logits=z)

    def _calibrated(self, z: mx.array) -> mx.array:
        """Confidence logits [A, G] to survival estimates, through the calibration temperatures."""
        G = z.shape[-1]
        temps = (self.calibration or [])[:G]
        temps = temps + [1.0] * (G - len(temps))
        return mx.sigmoid(z / mx.array(temps, z.dtype))

    # --- the engine's proposer protocol -------------------------------------------------
    def start(self, target: Target) -> "DrafterSession":
        self.check_target(target)
        return DrafterSession(self, target.projection)

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
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "target_id": self.target_id,
            "target_weights": self.target_weights,
            "dims": self.dims.to_dict(),
            "cfg": asdict(self.cfg),
            "calibration": self.calibration,
        }
        # Write then rename, so an interrupted save never leaves a half-written drafter.
        tmp_w, tmp_c = p / "model.safetensors.tmp.safetensors", p / "config.json.tmp"
        mx.save_safetensors(str(tmp_w), dict(tree_flatten(self.net.parameters())), metadata={"format": FORMAT})
        tmp_c.write_text(json.dumps(meta, indent=2) + "\n")
        os.replace(tmp_w, p / "model.safetensors")
        os.replace(tmp_c, p / "config.json")

    @classmethod
    def load(cls, path: str | Path, target: Target | None = None) -> "DflashDrafter":
        """Load a drafter directory; with ``target``, refuse one made for another target."""
        p = Path(path).expanduser()
        if not p.is_dir():
            raise DsparkError(f"drafter directory not found: {p}")
        meta = _read_meta(p)
        try:
            dims = TargetDims(**meta["dims"])
            cfg = DflashConfig.from_dict(meta["cfg"])
        except (TypeError, KeyError) as e:
            raise DsparkError(f"{p / 'config.json'} has a malformed dims/cfg section ({e})") from None
        w = p / "model.safetensors"
        if not w.is_file():
            raise DsparkError(f"{p} has no model.safetensors")
        try:
            weights = mx.load(str(w))
        except Exception as e:  # mlx raises RuntimeError/ValueError for damaged files
            raise DsparkError(f"{w} is not a readable safetensors file ({e})") from None
        net = DraftNet(dims, cfg)
        expected = dict(tree_flatten(net.parameters()))
        missing = sorted(set(expected) - set(weights))
        extra = sorted(set(weights) - set(expected))
        if missing or extra:
            raise DsparkError(f"{w} does not match its config (missing {missing[:3]}, unexpected {extra[:3]})")
        bad = [k for k in expected if expected[k].shape != weights[k].shape]
        if bad:
            raise DsparkError(f"{w}: {bad[0]} has shape {weights[bad[0]].shape}, expected {expected[bad[0]].shape}")
        net.load_weights(list(weights.items()))
        mx.eval(net.parameters())
        drafter = cls(net, dims, cfg, meta["target_id"], meta.get("calibration"))
        drafter.target_weights = meta.get("target_weights")
        if target is not None:
            drafter.check_target(target)
        return drafter

    def dispose(self) -> None:
        self.net = None
        self.names = []
        mx.clear_cache()


class DrafterSession:
    """One generation's drafter state: the projected context K/V of committed rows."""

    def __init__(self, drafter: DflashDrafter, proj: DraftProjection):
        self.drafter, self.proj = drafter, proj
        self.context = ContextKV(len(drafter.net.layers))
        self.tap_layers = drafter.cfg.tap_layers
        self.block_size = drafter.cfg.block_size

    def propose(self, anchor: int, position: int, new_rows: mx.array | None, block_size: int,
                sampling: SamplingParams, key: mx.array) -> DraftRows:
        rows = self.drafter.forward_rows(self.proj, new_rows, [anchor], block_size, DraftOpts(sampling, key), self.context)
        assert self.context.offset == position, "drafter context out of step with the target"
        return rows

    def state(self) -> list:
        return self.context.state()


def _choose(logits: mx.array, sp: SamplingParams, key: mx.array):
    """Tokens from ``logits`` [..., V]: the argmax, or a draw from ``distribution`` (returned too)."""
    if sp.greedy:
        return mx.argmax(logits, axis=-1).astype(mx.int32), None
    q = distribution(logits, sp)
    return mx.random.categorical(mx.log(q), key=key).astype(mx.int32), q


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


def _read_meta(p: Path) -> dict:
    meta = read_config(p, "a drafter")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DsparkError(f"{p} is not a dspark drafter (config.json has no format {FORMAT!r})")
    if meta.get("version") != VERSION:
        raise DsparkError(f"{p} is drafter format version {meta.get('version')}, this dspark reads {VERSION}")
    return meta


__all__ = ["DflashConfig", "DflashDrafter", "DraftOpts", "DraftRows", "TrainOut", "default_taps"]
