"""What ``dspark export`` must carry of a drafter, and whether a format carries it: the plan of an
export, made before anything is written (``dspark.export`` writes and checks it).

The mapping is the formats' own writers (``formats.*.new_config``, what ``dspark train --format``
starts from), given the drafter's architecture in no format's words (``shape_of``); what a writer
wrote is read back by the same format's reader, and every part of the drafter (``PARTS``: its
layers, taps, block convention, windows, embedding, head, Markov and confidence heads) must come
back the same. Where one does not, the export is refused in one sentence naming the part and the
formats that carry it (``refusal``); ``--drop-heads`` plans the drafter without the Markov and
confidence heads. Nothing here reads weights: a plan needs the config and the network's shapes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mlx.nn as nn
from mlx.utils import tree_flatten

from . import serving
from .backbone import DraftNet
from .convert import WRITERS
from .drafter import DflashDrafter
from .drafting import BlockLayout
from .errors import DsparkError
from .formats import native
from .formats.base import EXTENSION, DraftShape, Spec
from .loading import PUBLISHED, read_drafter_config

FORMATS = ("speculators", "deepspec", "zlab")
#: ``--format`` -> the name ``load_drafter`` gives a drafter of that format.
LOADED_AS = {"speculators": "speculators", "deepspec": "deepspec", "zlab": "zlab-dflash"}
#: The parts of a drafter an export must carry, in the order a refusal names the first missing one.
PARTS = ("layers", "target", "anchor", "block_size", "windows", "embedding", "head", "markov", "confidence")
HEADS = ("markov", "confidence")
LAYER_WORDS = {
    "DraftLayer": "native Gemma-style draft layers (dspark's own: values without a norm, full RoPE)",
    "Qwen3Layer": "Qwen3-style draft layers",
    "Gemma4Layer": "Gemma-4 global-attention draft layers",
}


@dataclass(kw_only=True)
class Source:
    """A drafter as export sees it: its Spec (a native drafter's described as one), its network
    (weights loaded, or lazy and never evaluated when only the plan is asked for) and config."""

    path: Path
    format: str  # as load_drafter names it
    spec: Spec
    net: nn.Module
    config: dict


def native_spec(dims, cfg) -> Spec:
    """A native drafter in a Spec's words: the target's embedding and head, the anchor slot predicting."""
    layout = (
        BlockLayout(windows=(cfg.context_window,) * cfg.num_layers, window_from_anchor=True)
        if cfg.context_window
        else BlockLayout()
    )
    return Spec(
        format=native.FORMAT,
        variant="native",
        hidden=dims.hidden_size,
        vocab=dims.vocab_size,
        draft_vocab=dims.vocab_size,
        taps=tuple(cfg.tap_layers),
        block_size=cfg.block_size,
        mask_token_id=cfg.mask_token_id,
        layout=layout,
        make_layers=lambda: [],
        eps=dims.rms_norm_eps,
        own_embedding=False,
        embed_scale=None,
        own_head=False,
        softcap=dims.final_logit_softcapping,
        markov_rank=cfg.markov_rank if cfg.markov else 0,
        confidence=cfg.confidence,
        confidence_with_markov=cfg.markov,
        num_target_layers=dims.num_layers,
    )


#: The autoregressive formats, which no block format holds: each is served from its own folder.
STEPWISE = {"eagle3": "an EAGLE-3 head", "gemma4-assistant": "a Gemma-4 assistant"}


def stepwise_refusal(fmt: str) -> str:
    """Why an autoregressive drafter is not exported, and what serves it instead."""
    return (
        f"{STEPWISE[fmt]} drafts a token a step, which no block format holds; it is already in the "
        f"layout vLLM and SGLang load, so serve it from its folder as it is"
    )


def read_source(path) -> Source:
    """The drafter at ``path`` without its weights (what ``dspark inspect`` asks about)."""
    p, config, fmt = read_drafter_config(path)
    if fmt in STEPWISE:
        raise DsparkError(f"{p}: {stepwise_refusal(fmt)}")
    if fmt == native.FORMAT:
        dims, cfg = native.read_config(p, config)
        return Source(path=p, format=fmt, spec=native_spec(dims, cfg), net=DraftNet(dims, cfg), config=config)
    spec = PUBLISHED[fmt].read_spec(p, config)
    return Source(path=p, format=fmt, spec=spec, net=spec.net(), config=config)


def loaded_source(drafter, path: Path, config: dict) -> Source:
    if isinstance(drafter, DflashDrafter):
        return Source(
            path=path, format=native.FORMAT, spec=native_spec(drafter.dims, drafter.cfg), net=drafter.net, config=config
        )
    return Source(path=path, format=drafter.format, spec=drafter.spec, net=drafter.net, config=config)


# --------------------------------------------------------------------------- the plan
def parts(spec: Spec, net: nn.Module, drop_heads: bool = False) -> dict:
    """What must survive an export, per part, as comparable values."""
    n, lay = len(net.layers), spec.layout
    windows = tuple(lay.windows) if lay.windows else (None,) * n
    causal = tuple(lay.causal) if lay.causal else (False,) * n
    heads = not drop_heads
    shapes = tuple(sorted((k, tuple(v.shape)) for k, v in tree_flatten([layer.parameters() for layer in net.layers])))
    return {
        "layers": (type(net.layers[0]).__name__ if n else "", n, shapes, tuple(net.fc.weight.shape)),
        "target": (spec.hidden, spec.vocab, tuple(spec.taps), spec.mask_token_id),
        "anchor": lay.anchor_predicts,
        "block_size": spec.block_size,
        "windows": (windows, causal, bool(lay.window_from_anchor and any(windows))),
        "embedding": (spec.own_embedding, spec.embed_scale),
        "head": (spec.own_head, spec.draft_vocab, spec.softcap or None, spec.output_multiplier),
        "markov": spec.markov_rank if heads else 0,
        "confidence": (spec.confidence and heads, spec.confidence and heads and spec.confidence_with_markov),
    }


def shape_of(src: Source, drop_heads: bool = False) -> DraftShape:
    """The drafter's architecture in no format's words, read off its Spec and its network."""
    s, layer = src.spec, src.net.layers[0]
    attn, mlp = getattr(layer, "self_attn", layer), getattr(layer, "mlp", layer)
    windows = [w for w in s.layout.windows if w]
    # a DraftShape's window is the context rows the anchor sees: z-lab's per-slot window counts the slot itself
    window = (windows[0] if s.layout.window_from_anchor else windows[0] - 1) if windows else 0
    tl = (
        src.config.get("transformer_layer_config")
        if isinstance(src.config.get("transformer_layer_config"), dict)
        else {}
    )
    limit = src.config.get("max_position_embeddings") or tl.get("max_position_embeddings") or 4096
    return DraftShape(
        hidden=s.hidden,
        layers=len(src.net.layers),
        heads=attn.heads,
        kv_heads=attn.kv_heads,
        head_dim=attn.head_dim,
        intermediate=mlp.gate_proj.weight.shape[0],
        vocab=s.vocab,
        taps=tuple(s.taps),
        block_size=s.block_size,
        mask_token_id=s.mask_token_id,
        num_target_layers=s.num_target_layers,
        eps=s.eps,
        rope_theta=float(getattr(layer.rope, "base", 10000.0)),
        markov_rank=0 if drop_heads else s.markov_rank,
        confidence=s.confidence and not drop_heads,
        window=window,
        softcap=s.softcap,
        max_positions=int(limit),
        anchor_predicts=s.layout.anchor_predicts,
        draft_vocab=s.draft_vocab if s.draft_vocab < s.vocab else 0,
    )


def tensor_names(src: Source, drop_heads: bool) -> set[str]:
    names = {k for k, _ in tree_flatten(src.net.parameters())}
    if drop_heads:
        names = {k for k in names if not k.startswith(("markov_head.", "confidence_head."))}
    return names | ({"d2t", "t2d"} if src.spec.d2t else set())


def _written(fmt: str, src: Source, drop_heads: bool, verifier: str | None):
    """(config.json, parts) of the drafter as ``fmt``'s writer writes it and its reader reads it
    back; None when the writer cannot describe the drafter at all."""
    module = WRITERS[fmt]
    try:
        shape = shape_of(src, drop_heads)
        config = module.new_config(shape, verifier or "") if fmt == "speculators" else module.new_config(shape)
        ext = dict(src.config.get(EXTENSION) or {})
        if drop_heads:
            ext.pop("calibration", None)  # the confidence head it calibrated is gone
        if ext:
            config[EXTENSION] = ext
        spec = (
            module.read_spec(src.path, config, tensor_names(src, drop_heads))
            if fmt == "speculators"
            else module.read_spec(src.path, config)
        )
        return config, parts(spec, spec.net())
    except (DsparkError, AttributeError, IndexError, TypeError):  # a layer kind the writers have no words for
        return None


@dataclass
class Plan:
    format: str
    config: dict  # the config.json to write
    dropped: list[str]  # the heads left out ("Markov", "confidence")


def plan(src: Source, fmt: str, verifier: str | None = None, drop_heads: bool = False) -> Plan:
    """How ``src`` is written as ``fmt``, or DsparkError: one sentence naming what ``fmt`` cannot carry."""
    if fmt not in FORMATS:
        raise DsparkError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if src.config.get("quantization"):
        raise DsparkError(
            f"{src.path} is quantized in mlx's layout, which vLLM and SGLang do not read: export the "
            f"drafter it was quantized from"
        )
    have = parts(src.spec, src.net, drop_heads)
    written = {f: _written(f, src, drop_heads, verifier) for f in FORMATS}
    mine = written[fmt]
    wrong = [p for p in PARTS if mine is None or mine[1][p] != have[p]]
    if wrong:
        raise DsparkError(refusal(src, fmt, wrong=wrong, have=have, written=written))
    full = parts(src.spec, src.net)
    return Plan(fmt, mine[0], [("Markov" if p == "markov" else "confidence") for p in HEADS if full[p] != have[p]])


def refusal(src: Source, fmt: str, *, wrong: list[str], have: dict, written: dict) -> str:
    """One sentence: the first part ``fmt`` cannot carry (the heads only when nothing else is
    missing, as --drop-heads can leave them out), which formats carry it, and what to do."""
    part = next((p for p in wrong if p not in HEADS), None)
    named = [part] if part else wrong

    def carries(f: str, names) -> bool:
        return written[f] is not None and all(written[f][1][p] == have[p] for p in names)

    carriers = [f for f in FORMATS if carries(f, named)]
    exact = [f for f in FORMATS if carries(f, PARTS)]
    theirs = written[fmt][1] if written[fmt] is not None else None
    what = " and ".join(words(p, src, theirs) for p in named).replace(
        "head and confidence head", "and confidence heads"
    )
    where = (
        f"which {_either(carriers)} {'carries' if len(carriers) == 1 else 'carry'}"
        if carriers
        else "which no published format dspark writes carries"
    )
    if part is None:
        then = ": export with --drop-heads to leave them out" + (f", or to {_either(exact)}" if exact else "")
    elif exact:
        then = f": it exports exactly to {_either(exact)}"
    elif src.format == native.FORMAT:
        then = ": train it with dspark train --format speculators, deepspec or zlab for a drafter that exports"
    elif src.format == LOADED_AS[fmt]:
        then = f": it is a {fmt} checkpoint already, served as it is"
    else:
        then = ""
    return f"{serving.TITLES[fmt]} cannot carry this drafter's {what}, {where}{then}"


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def words(part: str, src: Source, theirs: dict | None = None) -> str:
    """The source's value of ``part``, as the refusal names it (``theirs``: the parts of what the
    format's writer made of it, which tell a layer kind from a layer size)."""
    s, have = src.spec, parts(src.spec, src.net)
    same_kind = theirs is not None and theirs["layers"][0] == have["layers"][0]
    if part == "layers":
        return LAYER_WORDS.get(have["layers"][0], f"{have['layers'][0]} draft layers") + (
            f" of these sizes ({have['layers'][1]}, fc {list(have['layers'][3])})" if same_kind else ""
        )
    if part == "anchor":
        return (
            "anchor slot that predicts the first draft (DSpark's block convention)"
            if s.layout.anchor_predicts
            else "anchor slot that only reads (z-lab's block convention: the drafts start at the next slot)"
        )
    if part == "windows":
        w = next((x for x in s.layout.windows if x), None)
        if w is None:
            return "attention over the whole context"
        causal = " with causal attention inside the block" if any(s.layout.causal) else ""
        return (
            f"context window of {w} rows before the anchor"
            if s.layout.window_from_anchor
            else f"sliding window of {w} positions per block slot"
        ) + causal
    if part == "embedding":
        if s.own_embedding:
            return "embedding table of its own"
        return "block embedding of the target's table, " + (
            "scaled by sqrt(hidden)"
            if s.embed_scale is None
            else "unscaled"
            if s.embed_scale == 1.0
            else f"scaled by {s.embed_scale:g}"
        )
    if part == "head":
        if s.draft_vocab < s.vocab:
            return f"reduced draft vocabulary of {s.draft_vocab} ids (a d2t table)"
        own = "output head of its own" if s.own_head else "borrowed output head (the target's)"
        return (
            own
            + (f", soft-capped at {s.softcap:g}" if s.softcap else "")
            + (f", times {s.output_multiplier:g}" if s.output_multiplier != 1.0 else "")
        )
    return {
        "target": "taps and mask token",
        "block_size": f"{s.block_size} drafts per round",
        "markov": f"Markov head (rank {s.markov_rank})",
        "confidence": "confidence head",
    }[part]


def exportable(path) -> dict:
    """{"exact": formats it exports to exactly, "refused": {format: the sentence}} (``dspark inspect``)."""
    _, _, fmt = read_drafter_config(path)
    if fmt in STEPWISE:
        return {"exact": [], "refused": {f: stepwise_refusal(fmt) for f in FORMATS}}
    src = read_source(path)
    out = {"exact": [], "refused": {}}
    for fmt in FORMATS:
        try:
            plan(src, fmt)
            out["exact"].append(fmt)
        except DsparkError as e:
            out["refused"][fmt] = str(e)
    return out


def exports_lines(exports: dict) -> list[str]:
    """``exportable``'s answer as ``dspark inspect`` prints it."""
    return [
        f"  exports exactly to: {', '.join(exports['exact']) or 'no published format'} (dspark export)",
        *(f"  not to {fmt}: {why}" for fmt, why in exports["refused"].items()),
    ]
