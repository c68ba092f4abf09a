"""EAGLE-3 drafters in the speculators / SGLang layout (``speculators_model_type: "eagle3"``;
vllm-project/speculators ``models/eagle3``), run as an autoregressive drafter: one token per
draft step, with a KV cache of its own.

config.json: the decoder under ``transformer_layer_config`` (``llama`` or ``qwen3`` layers, as
speculators builds them), ``draft_vocab_size`` (a ``d2t`` offset table in the weights maps a
draft id to the target id ``id + d2t[id]``; ``t2d`` is training's and is only checked),
``eagle_aux_hidden_state_layer_ids`` (vLLM's numbering: id N is the residual stream entering
target layer N, the output of layer N - 1, before the final norm; absent, speculators'
default ``[2, L // 2, L - 3]`` of the target's L layers), ``norm_before_residual``,
``norm_before_fc`` (one RMSNorm over the three concatenated taps, ``input_norm``), ``fc_norm``
(one per tap), ``norm_output`` (the drafter feeds its normed output back, Eagle 3.1), and the
drafts per round as ``speculators_config.proposal_methods[0].speculative_tokens``.

How a step computes, as ``Eagle3DraftModel.forward`` trains it (``data.shift_batch`` pairs the
taps of position i with the token at i + 1, placed at position i + 1): the taps of committed
positions go through ``fc`` once; the first layer reads ``[input_layernorm(embed(token)) ;
hidden_norm(h)]`` (2H wide) with the residual ``h`` (its normed copy with
``norm_before_residual``); logits are ``lm_head(norm(out))`` over the draft vocabulary, without
a soft-cap; the next step pairs the drafted token with ``out`` (``norm(out)`` with
``norm_output``), one position on. The embedding is the drafter's own when it ships one, else
the target's table, unscaled (``embed_tokens`` is the verifier's ``nn.Embedding``; no sqrt(d)).
Sliding-window layers: a committed row sees the window before its own position; a draft step
sees the window before the round's anchor and every step of its own round (training's diagonal
mask), not a window of its own position.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from ..config import SamplingParams
from ..drafting import DraftRows, draw_token
from ..errors import DrafterMismatchError, DsparkError
from ..modeldir import read_header, safetensors_files
from ..validate import Fields, check_shapes
from .eagle3_net import Eagle3Net
from .quant import apply_quantization

FORMAT = "eagle3"

#: the activations speculators' llama and qwen3 layers are trained with (``ACT2FN`` names)
ACTIVATIONS = {"silu": nn.silu, "gelu": nn.gelu, "gelu_pytorch_tanh": nn.gelu_approx, "gelu_new": nn.gelu_approx}

#: training-only tensors a checkpoint may carry: the verifier's frozen norm and head
UNUSED = ("verifier_norm.weight", "verifier_lm_head.weight")


def is_eagle3(config: dict) -> bool:
    sc = config.get("speculators_config")
    algo = sc.get("algorithm") if isinstance(sc, dict) else None
    return config.get("speculators_model_type") == "eagle3" or algo == "eagle3"


@dataclass(frozen=True, kw_only=True)
class Eagle3Spec:
    """An EAGLE-3 checkpoint as its config.json describes it (validated, nothing allocated)."""

    arch: str  # "llama" or "qwen3": qwen3 layers norm each head's queries and keys
    hidden: int
    target_hidden: int
    vocab: int
    draft_vocab: int
    aux_ids: tuple[int, ...] | None  # None: speculators' default of the target's depth
    block_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    eps: float
    act: str
    rope_theta: float
    rope_scaling: dict | None
    max_positions: int
    windows: tuple[int | None, ...]
    attention_bias: bool
    mlp_bias: bool
    norm_before_residual: bool
    norm_before_fc: bool
    fc_norm: bool
    norm_output: bool
    own_embedding: bool
    quantization: dict | None = None

    @property
    def num_aux(self) -> int:
        return len(self.aux_ids) if self.aux_ids is not None else 3

    def aux_for(self, num_layers: int) -> tuple[int, ...]:
        """The tap ids for a target of ``num_layers`` layers (speculators' default when absent)."""
        return self.aux_ids if self.aux_ids is not None else (2, num_layers // 2, num_layers - 3)

    def check_target(self, target) -> tuple[int, ...]:
        """Refuse a target this head was not made for, naming the value; the target layers it taps."""
        d = target.dims
        ids = self.aux_for(d.num_layers)
        bad = [i for i in ids if not 1 <= i <= d.num_layers]
        if bad:
            raise DrafterMismatchError(
                f"an EAGLE-3 head whose taps are outside the target: it reads hidden state {bad[0]} "
                f"(eagle_aux_hidden_state_layer_ids {list(ids)}), but the target has {d.num_layers} layers "
                f"(hidden states 1 to {d.num_layers})"
            )
        for name, mine, theirs in (
            ("hidden size", self.target_hidden, d.hidden_size),
            ("vocabulary", self.vocab, d.vocab_size),
        ):
            if mine != theirs:
                raise DrafterMismatchError(
                    f"the EAGLE-3 head was made for a target of {name} {mine}, this target's is {theirs}"
                )
        if not self.own_embedding and self.hidden != d.hidden_size:
            raise DrafterMismatchError(
                f"the EAGLE-3 head of width {self.hidden} has no embedding of its own and the target's "
                f"is {d.hidden_size} wide"
            )
        return tuple(i - 1 for i in ids)

    def net(self) -> Eagle3Net:
        """The network with lazy initial weights: its shapes are what the checkpoint must hold."""
        return Eagle3Net(self, ACTIVATIONS[self.act])

    def describe(self) -> dict:
        return {
            "variant": "EAGLE-3",
            "block_size": self.block_size,  # tokens a round by default (speculative_tokens)
            "drafting": "a token a step, with a KV cache of its own over the target's tapped hidden states",
            "eagle_aux_hidden_state_layer_ids": list(self.aux_ids) if self.aux_ids else None,
            "tap_layers": [i - 1 for i in self.aux_ids] if self.aux_ids else None,
            "draft_vocab": self.draft_vocab,
            "layers": self.layers,
            "layer_kind": self.arch,
            "norm_before_residual": self.norm_before_residual,
            "norm_before_fc": self.norm_before_fc,
            "fc_norm": self.fc_norm,
            "norm_output": self.norm_output,
            "own_embedding": self.own_embedding,
            "own_head": True,
            "sliding_windows": [w for w in self.windows if w],
            "markov_head": False,
            "confidence_head": False,
            "target": {
                "hidden_size": self.target_hidden,
                "vocab_size": self.vocab,
                "min_layers": max(self.aux_ids) if self.aux_ids else None,
            },
        }


def read_spec(directory: Path, config: dict, names: set[str] | None = None) -> Eagle3Spec:
    """``names``: the checkpoint's tensor names (read from its headers when None)."""
    where = directory / "config.json"
    f = Fields(config, where)
    tl = f.dict("transformer_layer_config")
    if not tl:
        raise DsparkError(f"{where} has no transformer_layer_config")
    t = Fields(tl, where)
    arch = tl.get("model_type", "qwen3")  # speculators' default decoder config is Qwen3Config
    if arch not in ("llama", "qwen3"):
        raise t._fail("transformer_layer_config.model_type", arch, "llama or qwen3 (speculators' EAGLE-3 layers)")
    H, L = t.int("hidden_size"), t.int("num_hidden_layers", "draft_layers")
    heads = t.int("num_attention_heads")
    kv = t.int("num_key_value_heads", default=heads)
    hd = t.int("head_dim", default=None) if t.has("head_dim") else H // heads
    if heads % kv:
        raise t._fail("num_key_value_heads", kv, f"a divisor of num_attention_heads ({heads})")
    act = tl.get("hidden_act", "silu")
    if act not in ACTIVATIONS:
        raise t._fail("hidden_act", act, f"one of {', '.join(ACTIVATIONS)}")
    vocab = t.int("vocab_size")
    draft_vocab = f.int("draft_vocab_size", default=32000)
    if draft_vocab > vocab:
        raise f._fail("draft_vocab_size", draft_vocab, f"at most the vocabulary size {vocab}")
    rope = t.dict("rope_parameters") or t.dict("rope_scaling")
    if "sliding_attention" in rope:  # per-layer-type parameters: speculators' rotary takes the sliding one's
        rope = Fields(rope, where).dict("sliding_attention")
    theta = t.float("rope_theta", "rope_theta", default=rope.get("rope_theta", 10000.0))
    if rope.get("partial_rotary_factor", 1.0) != 1.0:
        raise t._fail("partial_rotary_factor", rope.get("partial_rotary_factor"), "1 (every channel rotated)")
    kinds = tl.get("layer_types") or ["full_attention"] * L
    if not isinstance(kinds, list) or len(kinds) != L:
        raise t._fail("layer_types", kinds, f"{L} entries")
    sliding = tl.get("sliding_window") if tl.get("use_sliding_window", True) else None
    windows = tuple(t.int("sliding_window") if k == "sliding_attention" and sliding else None for k in kinds)
    ids = f.ints("eagle_aux_hidden_state_layer_ids", "tap_layer") if f.has("eagle_aux_hidden_state_layer_ids") else None
    if ids is not None and 0 in ids:
        raise f._fail(
            "eagle_aux_hidden_state_layer_ids",
            list(ids),
            "ids of 1 or more (id 0 is the embedding, which dspark does not tap)",
        )
    norm_before_fc, fc_norm = f.bool("norm_before_fc", default=False), f.bool("fc_norm", default=False)
    if norm_before_fc and fc_norm:
        raise f._fail("fc_norm", True, "false when norm_before_fc is true (speculators allows one of them)")
    methods = Fields(config, where).dict("speculators_config").get("proposal_methods") or [{}]
    block = Fields(methods[0] if isinstance(methods[0], dict) else {}, where).int(
        "speculative_tokens", "block_size", default=3
    )
    header = _tensor_names(directory) if names is None else names
    return Eagle3Spec(
        arch=arch,
        hidden=H,
        target_hidden=f.int("target_hidden_size", "hidden_size") if f.has("target_hidden_size") else H,
        vocab=vocab,
        draft_vocab=draft_vocab,
        aux_ids=ids,
        block_size=block,
        layers=L,
        heads=heads,
        kv_heads=kv,
        head_dim=hd,
        ffn=t.int("intermediate_size"),
        eps=t.float("rms_norm_eps", "rms_norm_eps", default=1e-6),
        act=act,
        rope_theta=theta,
        rope_scaling=rope or None,
        max_positions=t.int("max_position_embeddings", default=131072),
        windows=windows,
        attention_bias=t.bool("attention_bias", default=False),
        mlp_bias=t.bool("mlp_bias", default=False),
        norm_before_residual=f.bool("norm_before_residual", default=False),
        norm_before_fc=norm_before_fc,
        fc_norm=fc_norm,
        norm_output=f.bool("norm_output", default=False),
        own_embedding="embed_tokens.weight" in header,
        quantization=config.get("quantization"),
    )


def _tensor_names(directory: Path) -> set[str]:
    names: set[str] = set()
    for f in safetensors_files(directory):
        names.update(k for k in read_header(f) if k != "__metadata__")
    return names


def load(directory: Path, config: dict, target=None) -> Eagle3Drafter:
    """An EAGLE-3 drafter from ``directory``; with ``target``, one that does not fit it is refused
    before its weights are read."""
    spec = read_spec(directory, config)
    taps = spec.check_target(target) if target is not None else None
    header = {}
    for f in safetensors_files(directory):
        header.update(read_header(f))
    header.pop("__metadata__", None)
    tables = {k: header.pop(k) for k in ("d2t", "t2d", *UNUSED) if k in header}
    if not spec.norm_before_fc:
        header.pop("input_norm.weight", None)  # speculators saves it only when used; a stray one is unused
    if spec.draft_vocab < spec.vocab and "d2t" not in tables:
        raise DsparkError(
            f"{directory}: draft_vocab_size is {spec.draft_vocab} (below the vocabulary {spec.vocab}) "
            f"but the weights have no d2t table"
        )
    net = spec.net()
    apply_quantization(net, header, spec.quantization, directory)
    check_shapes(header, {k: v.shape for k, v in tree_flatten(net.parameters())}, directory / "*.safetensors")
    weights = {}
    for f in safetensors_files(directory):
        try:
            weights.update(mx.load(str(f)))
        except Exception as e:  # mlx raises RuntimeError/ValueError for damaged files
            raise DsparkError(f"{f} is not a readable safetensors file ({e})") from None
    net.load_weights([(k, v) for k, v in weights.items() if k in header])
    mx.eval(net.parameters())
    drafter = Eagle3Drafter(spec, net, config, draft_to_target=_vocab_map(spec, weights, tables, directory))
    if target is not None:
        drafter.tap_layers = taps
    return drafter


def _vocab_map(spec: Eagle3Spec, weights: dict, tables: dict, directory: Path) -> mx.array | None:
    """Draft id -> target id (``id + d2t[id]``), checked: one entry per draft id, every target id
    inside the vocabulary and none twice; None when the draft vocabulary is the target's."""
    if "t2d" in tables and tuple(tables["t2d"]["shape"]) != (spec.vocab,):
        raise DsparkError(f"{directory}: t2d has shape {tables['t2d']['shape']}, expected [{spec.vocab}]")
    if "d2t" not in tables:
        return None
    d2t = weights["d2t"]
    if d2t.shape != (spec.draft_vocab,) or not mx.issubdtype(d2t.dtype, mx.integer):
        raise DsparkError(
            f"{directory}: d2t has shape {list(d2t.shape)} ({d2t.dtype}), "
            f"expected integers of shape [{spec.draft_vocab}]"
        )
    ids = mx.arange(spec.draft_vocab).astype(mx.int64) + d2t.astype(mx.int64)
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= spec.vocab:
        bad = lo if lo < 0 else hi
        raise DsparkError(
            f"{directory}: d2t maps a draft id to {bad}, outside the target vocabulary (0 to {spec.vocab - 1})"
        )
    if len(set(ids.tolist())) != spec.draft_vocab:
        raise DsparkError(f"{directory}: d2t maps two draft ids to one target id")
    if spec.draft_vocab == spec.vocab and bool(mx.all(ids == mx.arange(spec.vocab))):
        return None
    return ids.astype(mx.int32)


class Eagle3Drafter:
    """A loaded EAGLE-3 head: ``start`` gives the engine a :class:`Eagle3Session`."""

    format = FORMAT
    calibration = None
    has_confidence = False
    has_markov = False
    profile = None

    def __init__(self, spec: Eagle3Spec, net: Eagle3Net, config: dict, *, draft_to_target: mx.array | None):
        self.spec, self.net, self.config = spec, net, dict(config)
        self.draft_to_target = draft_to_target
        self.block_size = spec.block_size
        self.tap_layers = tuple(i - 1 for i in spec.aux_ids) if spec.aux_ids is not None else None
        ext = self.config.get("dspark") if isinstance(self.config.get("dspark"), dict) else {}
        self.target_weights = ext.get("target_weights") if isinstance(ext.get("target_weights"), str) else None

    def check_target(self, target) -> None:
        self.tap_layers = self.spec.check_target(target)

    def start(self, target, *, cache: list | None = None) -> Eagle3Session:
        """A generation's drafting state (``cache``, the target's, is not read: the head keeps
        K/V of its own)."""
        self.check_target(target)
        return Eagle3Session(self, target.projection)

    def weights_note(self, target) -> str | None:
        if self.target_weights and self.target_weights != target.weights_fingerprint:
            return "this drafter was trained against different weights of this target (acceptance may be low)"
        return None

    def num_params(self) -> int:
        return sum(v.size for _, v in tree_flatten(self.net.parameters()))

    def info(self) -> dict:
        return {"format": self.format, "variant": "EAGLE-3", "block_size": self.block_size, "confidence": False}

    def dispose(self) -> None:
        self.net = None
        mx.clear_cache()

    def widen(self, q: mx.array | None, vocab: int) -> mx.array | None:
        """Draft-vocabulary distributions [.., V_d] as target-vocabulary ones (zero outside the
        draft vocabulary), so the ratio test and its residual stay exact."""
        if q is None or self.draft_to_target is None:
            return q
        idx = mx.broadcast_to(self.draft_to_target, q.shape)
        return mx.put_along_axis(mx.zeros((*q.shape[:-1], vocab), q.dtype), idx, q, axis=-1)

    def to_target(self, draft_ids: mx.array) -> mx.array:
        return draft_ids if self.draft_to_target is None else self.draft_to_target[draft_ids]

    def save_config(self, path: Path) -> None:
        path.write_text(json.dumps(self.config, indent=1) + "\n")


class Eagle3Session:
    """One generation's EAGLE-3 state: per layer the K/V of committed pairs (positions 1 to the
    anchor's), the output of the last one, and the K/V a round's draft steps added, which the
    next ``propose`` drops before it appends the rows committed since."""

    autoregressive = True  # a step per drafted token: the policy sets how many (dspark.policy)

    def __init__(self, drafter: Eagle3Drafter, proj):
        self.drafter, self.net, self.proj = drafter, drafter.net, proj
        self.tap_layers = drafter.tap_layers
        self.block_size = drafter.block_size
        self.kv: list[tuple[mx.array, mx.array] | None] = [None] * len(self.net.layers)
        self.committed = 0  # pairs in the cache: those of positions 1..committed
        self.last: mx.array | None = None  # the layers' output at the last committed pair

    def embed(self, ids: mx.array) -> mx.array:
        # the verifier's table as speculators loads it: unscaled
        return self.net.embed_tokens(ids) if self.drafter.spec.own_embedding else self.proj.table(ids)

    def _commit(self, rows: mx.array, ids: Sequence[int], first: int) -> None:
        """Append the pairs (tap row i, token i + 1) of committed positions ``first``.."""
        x = self.embed(mx.array([list(ids)], mx.int32))
        out, self.kv = self.net.run(x, self.net.fuse(rows), self.kv, first=first, committed=self.committed)
        self.committed += rows.shape[1]
        self.last = out[:, -1:]

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
        """``block_size`` tokens after ``anchor`` at ``position``, a step each
        (:meth:`dspark.rounds.DraftSession.propose`)."""
        P, n = position, 0 if new_rows is None else new_rows.shape[1]
        if len(history) != P + 1:
            raise DsparkError(f"EAGLE-3 drafting needs every committed id: {len(history)} given at position {P}")
        kv = [None if e is None else (e[0][..., : self.committed, :], e[1][..., : self.committed, :]) for e in self.kv]
        self.kv = kv  # what the last round's steps appended is dropped
        if n:
            self._commit(new_rows, history[P - n + 1 : P + 1], P - n + 1)
        assert self.committed in (0, P), "EAGLE-3 cache out of step with the target"
        kv, h, C = self.kv, self.last, self.committed
        if C == 0:  # no tap row yet (a one-token prompt): the anchor paired with zeros, for this round only
            zeros = mx.zeros((1, 1, self.drafter.spec.num_aux * self.drafter.spec.target_hidden))
            x = self.embed(mx.array([[anchor]], mx.int32))
            h, kv = self.net.run(x, self.net.fuse(zeros), kv, first=P, committed=0, anchor=P)
        sp = sampling
        keys = [None] * block_size if sp.greedy else mx.random.split(key, max(block_size, 1))
        toks, qs, probs, logits_all, hidden = [], [], [], [], []
        for j in range(block_size):
            normed = self.net.norm(h)
            logits = self.net.lm_head(normed)[:, 0]  # [1, V_draft]
            choice, q, prob = draw_token(logits, sp, keys[j])
            toks.append(choice)
            qs.append(q)
            probs.append(prob)
            logits_all.append(logits)
            hidden.append(h[:, 0])
            if j + 1 < block_size:
                feed = normed if self.drafter.spec.norm_output else h
                x = self.embed(self.drafter.to_target(choice)[None])
                h, kv = self.net.run(x, feed, kv, first=P + 1 + j, committed=C, anchor=P)
        choice = mx.stack(toks, axis=1)
        return DraftRows(
            tokens=self.drafter.to_target(choice),
            q=None if sp.greedy else self.drafter.widen(mx.stack(qs, axis=1), self.proj.vocab_size),
            draft_probs=mx.stack(probs, axis=1),
            confidences=None,
            hidden=mx.stack(hidden, axis=1),
            conf_logits=None,
            logits=mx.stack(logits_all, axis=1),
        )

    def state(self) -> list:
        return [a for e in self.kv if e is not None for a in e] + ([self.last] if self.last is not None else [])


__all__ = ["FORMAT", "Eagle3Drafter", "Eagle3Session", "Eagle3Spec", "is_eagle3", "load", "read_spec"]
