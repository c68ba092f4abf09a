"""Google's Gemma-4 assistant (MTP) drafters: ``gemma4_assistant`` (E2B, E4B, 26B-A4B, 31B) and
``gemma4_unified_assistant`` (12B), read from their directories as published and run as an
autoregressive drafter (format name ``gemma4-assistant``).

The owner's code decides (transformers' ``Gemma4AssistantForCausalLM`` and its runtime,
``SinglePositionMultiTokenCandidateGenerator``). The assistant has no K/V of its own: every layer
reads the target's K/V of the target's last non-shared layer of its own type (full or sliding
attention), a step's input is ``[target_embed(token) * embed scale ; h_prev]`` through
``pre_projection``, the queries sit at the anchor's position for every step of a round, and
``h_prev`` starts as the target's final hidden state at the position before the anchor, then is
the assistant's own output through ``post_projection``. The head is tied to the assistant's
embedding, or routed through centroids (``use_ordered_embeddings``). docs/formats.md names where
mlx-vlm's port departs from this and how the runtime's K/V slicing after a rejection does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten
from mlx_lm.models import gemma4_text
from mlx_lm.models.cache import KVCache, RotatingKVCache

from ..config import SamplingParams
from ..drafting import DraftRows, draw_token
from ..errors import DrafterMismatchError, DsparkError
from ..gemma4 import check_text_config, legacy_text_config
from ..modeldir import read_config, read_headers, safetensors_files
from ..validate import Fields, check_shapes

FORMAT = "gemma4-assistant"
MODEL_TYPES = {"gemma4_assistant": "Gemma-4 assistant", "gemma4_unified_assistant": "Gemma-4 unified assistant"}
#: transformers' GenerationConfig default, used when generation_config.json names no num_assistant_tokens.
DEFAULT_ASSISTANT_TOKENS = 20
#: Weights of KV-shared layers that transformers ignores on load (the assistant's layers are all shared).
SHARED_KV_WEIGHTS = (".self_attn.k_proj.", ".self_attn.v_proj.", ".self_attn.k_norm.", ".self_attn.v_norm.")
ORDERING = "masked_embedding.token_ordering"
INTS = ("I64", "I32", "I16", "U32", "U16")


@dataclass(frozen=True, kw_only=True)
class AssistantSpec:
    """An assistant checkpoint as its config.json and generation_config.json describe it."""

    model_type: str
    backbone_hidden_size: int
    use_ordered_embeddings: bool
    num_centroids: int
    centroid_intermediate_top_k: int
    tie_word_embeddings: bool
    text: gemma4_text.ModelArgs
    block_size: int

    @property
    def vocab(self) -> int:
        return self.text.vocab_size

    def head_dim(self, kind: str) -> int:
        full = kind == "full_attention" and self.text.global_head_dim
        return self.text.global_head_dim if full else self.text.head_dim

    def describe(self) -> dict:
        return {
            "variant": MODEL_TYPES[self.model_type],
            "block_size": self.block_size,  # tokens a round by default (num_assistant_tokens)
            "layers": self.text.num_hidden_layers,
            "layer_types": list(self.text.layer_types),
            "hidden_size": self.text.hidden_size,
            "draft_vocab": self.vocab,
            "ordered_embeddings": self.use_ordered_embeddings,
            "sliding_window": self.text.sliding_window,
            "markov_head": False,
            "confidence_head": False,
            "drafting": "a token a step, from the target's own K/V cache and its last hidden state",
            "target": {
                "hidden_size": self.backbone_hidden_size,
                "vocab_size": self.vocab,
                # the K/V its layers read: the target's last layer of each kind that keeps its own
                "kv_head_dims": {kind: self.head_dim(kind) for kind in sorted(set(self.text.layer_types))},
            },
        }


def read_spec(directory: Path, config: dict) -> AssistantSpec:
    """Every field the assistant is built from, checked, naming the file and the value."""
    where = directory / "config.json"
    f = Fields(config, where)
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise f._fail("text_config", text, "a JSON object (the assistant's Gemma-4 text config)")
    text_where = f"{where} (text_config)"
    text = legacy_text_config({"text_config": text}) or text
    # checked as a target's text config but for what only an assistant has: no per-layer input
    # vocabulary (transformers requires 0) and every layer KV-shared (checked below)
    own = ("vocab_size_per_layer_input", "num_kv_shared_layers")
    check_text_config({k: v for k, v in text.items() if k not in own}, text_where)
    t = Fields(text, text_where)
    layers = t.int("num_hidden_layers")
    for key, off in (("hidden_size_per_layer_input", 0), ("enable_moe_block", False), ("use_double_wide_mlp", False)):
        if text.get(key) not in (None, off):
            raise t._fail(key, text[key], f"{off} (an assistant has no per-layer inputs, experts or wide MLP)")
    shared = text.get("num_kv_shared_layers") or layers  # transformers: unset means every layer shares
    if shared != layers:
        raise t._fail("num_kv_shared_layers", shared, f"{layers}: every assistant layer reads the target's K/V")
    fields = {k: v for k, v in text.items() if k in gemma4_text.ModelArgs.__dataclass_fields__}
    fields.update(
        num_kv_shared_layers=layers, hidden_size_per_layer_input=0, use_double_wide_mlp=False, enable_moe_block=False
    )
    args = gemma4_text.ModelArgs.from_dict(fields)
    ordered = f.bool("use_ordered_embeddings", False)
    centroids = f.int("num_centroids", "vocab_size", default=2048)
    top_k = f.int("centroid_intermediate_top_k", "vocab_size", default=32)
    if ordered and (args.vocab_size % centroids or top_k > centroids):
        raise f._fail(
            "num_centroids", centroids, f"a divisor of the vocabulary ({args.vocab_size}) of at least {top_k} clusters"
        )
    return AssistantSpec(
        model_type=config["model_type"],
        backbone_hidden_size=f.int("backbone_hidden_size", "hidden_size"),
        use_ordered_embeddings=ordered,
        num_centroids=centroids,
        centroid_intermediate_top_k=top_k,
        tie_word_embeddings=f.bool("tie_word_embeddings", True),
        text=args,
        block_size=_assistant_tokens(directory),
    )


def _assistant_tokens(directory: Path) -> int:
    """generation_config.json's num_assistant_tokens (the owner's default block), else transformers'."""
    if not (directory / "generation_config.json").exists():
        return DEFAULT_ASSISTANT_TOKENS
    gen = read_config(directory, "a drafter", "generation_config.json")
    return Fields(gen, directory / "generation_config.json").int(
        "num_assistant_tokens", "block_size", default=DEFAULT_ASSISTANT_TOKENS
    )


# --------------------------------------------------------------------------- the network
class Inner(nn.Module):
    """transformers' ``model.*``: the assistant's embedding (its head's table), layers and norm."""

    def __init__(self, args: gemma4_text.ModelArgs):
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = [gemma4_text.DecoderLayer(args, i) for i in range(args.num_hidden_layers)]
        self.norm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)


class MaskedEmbedding(nn.Module):
    """The centroid-routed head (``use_ordered_embeddings``): score every cluster, take the
    tokens of the ``top_k`` best, scatter their logits into the vocabulary and fill the rest
    one below the smallest of them, as transformers' ``Gemma4AssistantMaskedEmbedder`` does."""

    def __init__(self, spec: AssistantSpec):
        super().__init__()
        self.top_k, self.vocab = spec.centroid_intermediate_top_k, spec.vocab
        self.centroids = nn.Linear(spec.text.hidden_size, spec.num_centroids, bias=False)
        self.token_ordering = mx.zeros((spec.vocab,), mx.int32)

    def __call__(self, h: mx.array, table: mx.array) -> mx.array:
        scores = self.centroids(h)  # [B, L, C]
        best = mx.argpartition(-scores, self.top_k - 1, axis=-1)[..., : self.top_k]
        clusters = self.token_ordering.reshape(scores.shape[-1], -1)
        ids = clusters[best].reshape(*h.shape[:-1], -1)  # [B, L, top_k * V/C] canonical ids
        picked = (table[ids] @ h[..., :, None])[..., 0]
        fill = picked.min() - 1.0  # transformers takes the minimum over the whole call
        out = mx.full((*h.shape[:-1], self.vocab), fill, picked.dtype)
        return mx.put_along_axis(out, ids, picked, axis=-1)


class AssistantNet(nn.Module):
    """The weights as transformers names them: ``model.*``, ``pre_projection``, ``post_projection``,
    ``masked_embedding.*`` and, untied, ``lm_head``."""

    def __init__(self, spec: AssistantSpec):
        super().__init__()
        self.spec = spec
        H = spec.text.hidden_size
        self.model = Inner(spec.text)
        self.pre_projection = nn.Linear(2 * spec.backbone_hidden_size, H, bias=False)
        self.post_projection = nn.Linear(H, spec.backbone_hidden_size, bias=False)
        if not spec.tie_word_embeddings:
            self.lm_head = nn.Linear(H, spec.vocab, bias=False)
        if spec.use_ordered_embeddings:
            self.masked_embedding = MaskedEmbedding(spec)

    def step(self, x: mx.array, shared: dict, position: mx.array) -> tuple[mx.array, mx.array]:
        """One draft step: ``x`` [1, 1, 2 * backbone] -> (logits [1, 1, V], next h_prev [1, 1, backbone]).
        ``shared`` maps a layer type to the target K/V its layers attend to, whole."""
        h = self.pre_projection(x)
        for layer in self.model.layers:
            h, _, _ = layer(h, None, None, shared_kv=shared[layer.layer_type], offset=position)
        h = self.model.norm(h)
        return self.head(h), self.post_projection(h)

    def head(self, h: mx.array) -> mx.array:
        table = self.lm_head.weight if "lm_head" in self else self.model.embed_tokens.weight
        if self.spec.use_ordered_embeddings:
            return self.masked_embedding(h, table)
        return self.lm_head(h) if "lm_head" in self else self.model.embed_tokens.as_linear(h)


# --------------------------------------------------------------------------- the drafter
class AssistantDrafter:
    """A Gemma-4 assistant checkpoint ready for ``dspark.generate`` (the engine's ``Proposer``)."""

    format = FORMAT
    calibration = None
    profile = None
    has_confidence = False

    def __init__(self, spec: AssistantSpec, net: AssistantNet, config: dict | None = None):
        self.spec, self.net, self.config = spec, net, dict(config or {})
        self.block_size = spec.block_size

    @classmethod
    def load(cls, directory: Path, config: dict, target=None) -> AssistantDrafter:
        """The assistant in ``directory``; with ``target``, refused before its weights are read
        when it does not fit."""
        spec = read_spec(directory, config)
        if target is not None:
            check_target(spec, target)
        net = AssistantNet(spec)
        header = {k: v for k, v in read_headers(directory).items() if _kept(k, spec)}
        expected = {k: tuple(v.shape) for k, v in tree_flatten(net.parameters())}
        order = header.pop(ORDERING, None)
        if spec.use_ordered_embeddings:
            if order is None or order["dtype"] not in INTS or order["shape"] != [spec.vocab]:
                got = "missing" if order is None else f"{order['dtype']} of shape {order['shape']}"
                raise DsparkError(f"{directory}: {ORDERING} is {got}, expected {spec.vocab} integers")
            expected.pop(ORDERING)
        check_shapes(header, expected, directory / "*.safetensors")
        weights = {}
        for f in safetensors_files(directory):
            try:
                weights.update(mx.load(str(f)))
            except Exception as e:  # mlx raises RuntimeError/ValueError for damaged files
                raise DsparkError(f"{f} is not a readable safetensors file ({e})") from None
        weights = {k: v.astype(mx.int32) if k == ORDERING else v for k, v in weights.items() if _kept(k, spec)}
        net.load_weights(list(weights.items()))
        mx.eval(net.parameters())
        if spec.use_ordered_embeddings:
            order = net.masked_embedding.token_ordering
            if int(order.min()) < 0 or int(order.max()) >= spec.vocab:
                raise DsparkError(
                    f"{directory}: masked_embedding.token_ordering names a token outside the vocabulary ({spec.vocab})"
                )
        return cls(spec, net, config)

    # --- the target ------------------------------------------------------------------------
    def check_target(self, target) -> None:
        check_target(self.spec, target)

    def start(self, target, *, cache: list | None = None) -> AssistantSession:
        self.check_target(target)
        if cache is None:
            raise DsparkError("the Gemma-4 assistant drafts from the target's own KV cache: start it with cache=")
        return AssistantSession(self, target, cache)

    # --- what the engine, the CLI and the profile read ----------------------------------------
    def weights_note(self, target) -> str | None:
        return None

    def num_params(self) -> int:
        return sum(v.size for _, v in tree_flatten(self.net.parameters()))

    def info(self) -> dict:
        return {"format": self.format, "variant": MODEL_TYPES[self.spec.model_type], "block_size": self.block_size}

    def dispose(self) -> None:
        self.net = None
        mx.clear_cache()


def _kept(name: str, spec: AssistantSpec) -> bool:
    """Whether a stored tensor is one the assistant loads: transformers ignores the K/V weights of
    KV-shared layers, and a tied head saved anyway is a copy of ``model.embed_tokens``."""
    if any(s in name for s in SHARED_KV_WEIGHTS) or (name == ORDERING and not spec.use_ordered_embeddings):
        return False
    return not (spec.tie_word_embeddings and name == "lm_head.weight")


def check_target(spec: AssistantSpec, target) -> None:
    """Refuse, in one sentence naming the value, a target this assistant cannot draft for."""
    d = target.dims
    if spec.backbone_hidden_size != d.hidden_size:
        raise DrafterMismatchError(
            f"the assistant was made for a Gemma-4 of hidden size {spec.backbone_hidden_size} "
            f"(backbone_hidden_size), this target's is {d.hidden_size}: use the assistant published for this size"
        )
    if spec.vocab != d.vocab_size:
        raise DrafterMismatchError(f"the assistant's vocabulary is {spec.vocab}, this target's is {d.vocab_size}")
    sources = shared_layers(target)
    for kind in sorted(set(spec.text.layer_types)):
        if kind not in sources:
            raise DrafterMismatchError(
                f"the assistant's {kind} layers read the K/V of the target's last {kind} layer, "
                f"but this target has no {kind} layer that keeps its own K/V"
            )
        width, heads = target_kv_shape(target, kind)
        if width != spec.head_dim(kind) or spec.text.num_attention_heads % heads:
            raise DrafterMismatchError(
                f"the assistant's {kind} heads are {spec.head_dim(kind)} wide ({spec.text.num_attention_heads} "
                f"of them), the target's {kind} K/V has {heads} heads {width} wide: they do not fit"
            )


def shared_layers(target) -> dict[str, int]:
    """The target's last layer of each type that keeps its own K/V (transformers' "store"
    layers): the K/V an assistant layer of that type reads."""
    args = target.lm.args
    first_shared = args.num_hidden_layers - (args.num_kv_shared_layers or 0)
    return {kind: i for i, kind in enumerate(args.layer_types[:first_shared])}


def target_kv_shape(target, kind: str) -> tuple[int, int]:
    """(head width, KV heads) of the target's K/V of layers of ``kind``."""
    attn = target.layers[shared_layers(target)[kind]].self_attn
    return attn.head_dim, attn.n_kv_heads


class AssistantSession:
    """One generation's drafting state: the target's cache (read, never written), the target's
    final hidden state before the anchor, and the sliding rows the cache has let go of that the
    assistant's window still reads (committed rows only)."""

    autoregressive = True  # a step per drafted token: the policy sets how many (dspark.policy)

    def __init__(self, drafter: AssistantDrafter, target, cache: list):
        self.drafter, self.net, self.spec = drafter, drafter.net, drafter.spec
        self.proj = target.projection
        self.final_norm = target.final_norm
        self.block_size = drafter.block_size
        self.tap_layers = (target.dims.num_layers - 1,)  # its output, normed, is the hidden state the head reads
        self.sources = shared_layers(target)
        self.caches = {kind: cache[self.sources[kind]] for kind in set(self.spec.text.layer_types)}
        for kind, c in self.caches.items():
            if not isinstance(c, KVCache if kind == "full_attention" else RotatingKVCache):
                raise DsparkError(f"the target's {kind} cache is a {type(c).__name__}, which the assistant cannot read")
        # transformers' bidirectional sliding mask admits |q - k| <= sliding_window: that many + 1 rows
        self.window = self.spec.text.sliding_window + 1
        self.h_last: mx.array | None = None  # [1, 1, backbone]: the target's final hidden state at position - 1
        self.tail: tuple[mx.array, mx.array, int] | None = None  # sliding rows kept (keys, values, first position)

    def state(self) -> list:
        return [x for x in (self.h_last, *(self.tail or ())[:2]) if x is not None]

    def shared_kv(self, position: int) -> dict:
        """Per layer type, the committed target K/V the assistant reads at ``position``: rows
        0..position-1 of the full layer; the last ``window`` of them of the sliding layer, in
        temporal order (the ring buffer unrolled), with rows the ring has overwritten since
        the last draft taken from those kept then. The cache may hold rows past ``position``:
        ``auto``'s shadow draft is drafted while the next plain step, queued as mlx-lm pipelines
        it, has written the anchor's row; those rows are not the draft's context."""
        out = {}
        for kind, c in self.caches.items():
            # one row ahead: auto's plain steps are pipelined, so when a shadow draft is asked for
            # the anchor's own step is already in the cache; it is not context yet
            ahead = c.offset - position
            if ahead not in (0, 1):
                raise DsparkError(f"the target's cache holds {c.offset} positions, the assistant drafts at {position}")
            if kind == "full_attention":
                out[kind] = (c.keys[..., :position, :], c.values[..., :position, :])
                continue
            keys, values = c._temporal_order(c.keys), c._temporal_order(c.values)
            if ahead:
                keys, values = keys[..., :-ahead, :], values[..., :-ahead, :]
            held = min(keys.shape[2], position)
            keys, values, first = keys[..., -held:, :], values[..., -held:, :], position - held
            want = max(0, position - self.window)
            if first > want and self.tail is not None:
                k0, v0, t0 = self.tail
                lo, hi = max(want, t0), min(first, t0 + k0.shape[2])
                if lo < hi and hi == first:
                    keys = mx.concatenate([k0[..., lo - t0 : hi - t0, :], keys], axis=2)
                    values = mx.concatenate([v0[..., lo - t0 : hi - t0, :], values], axis=2)
                    first = lo
            start = max(want, first) - first
            keys, values = keys[..., start:, :], values[..., start:, :]
            self.tail = (keys, values, position - keys.shape[2])
            out[kind] = (keys, values)
        return out

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
        """``block_size`` tokens after ``anchor`` at ``position``, one assistant step each
        (:meth:`dspark.rounds.DraftSession.propose`)."""
        if new_rows is not None and new_rows.shape[1] > 0:
            self.h_last = self.final_norm(new_rows[:, -1:, :])
        if self.h_last is None:
            raise DsparkError(
                "the Gemma-4 assistant drafts from the target's hidden state before the anchor: give 2+ tokens"
            )
        shared = self.shared_kv(position)
        where = mx.array(position)
        keys = [None] * block_size if sampling.greedy else mx.random.split(key, max(block_size, 1))
        token, h = mx.array([[anchor]], mx.int32), self.h_last
        toks, qs, probs, hiddens, rows = [], [], [], [], []
        for k in range(block_size):
            x = mx.concatenate([self.proj.embed(token), h], axis=-1)
            logits, h = self.net.step(x, shared, where)
            row = logits[:, 0]  # [1, V]
            rows.append(row)
            choice, q, prob = draw_token(row, sampling, keys[k])
            qs.append(q)
            probs.append(prob)
            toks.append(choice)
            hiddens.append(h[:, 0])
            token = choice[:, None]
        if not toks:
            empty = mx.zeros((1, 0), mx.int32)
            return DraftRows(tokens=empty, q=None, draft_probs=empty, confidences=None, hidden=empty)
        return DraftRows(
            tokens=mx.stack(toks, axis=1),
            q=None if sampling.greedy else mx.stack(qs, axis=1),
            draft_probs=mx.stack(probs, axis=1),
            confidences=None,
            hidden=mx.stack(hiddens, axis=1),
            logits=mx.stack(rows, axis=1),  # lazy: computed only when read (the reference test)
        )


def describe(directory: Path, config: dict) -> dict:
    """What ``dspark inspect`` says of an assistant directory."""
    return read_spec(directory, config).describe()


__all__ = ["FORMAT", "MODEL_TYPES", "AssistantDrafter", "AssistantSession", "AssistantSpec", "read_spec"]
