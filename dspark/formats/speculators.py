"""vLLM speculators DSpark / DFlash heads (``speculators_config``; e.g.
``makora-ai/gemma4-26b-a4b-dspark``, ``rasyosef/gemma-4-E2B-it-dspark``).

config.json: the backbone under ``transformer_layer_config`` (Qwen3 layers, even for Gemma
targets), the taps as ``aux_hidden_state_layer_ids`` in vLLM's (and speculators' training data's)
numbering, where id i is the residual stream entering layer i, the output of layer i - 1: a
drafter tapping layer t has id t + 1 (vLLM's ``update_dflash`` maps ids to z-lab's
``target_layer_ids`` by subtracting one; configs dspark wrote before it followed this kept the
taps themselves, which its extension's ``trained_as`` records), ``speculators_config.proposal_methods[0]
.speculative_tokens`` drafts per round out of ``block_size`` slots (``block_size -
speculative_tokens`` = 1: slot 0 is a pure anchor; 0: the anchor slot predicts, as
``sample_from_anchor`` says), ``mask_token_id``, the DSpark heads' fields, and optionally
``draft_vocab_size`` with a ``d2t`` offset table in the weights (draft id -> target id = id +
d2t[id]). W1 of the Markov head is indexed by target ids; W2 and ``lm_head`` output draft ids.

The drafter's own ``embed_tokens`` (when shipped) and the target's table otherwise are used as
they were in training: unscaled. (speculators' own loader copies the verifier's table, and its head
over a full-vocabulary ``lm_head``, over shipped ones; vLLM's loader keeps them, as dspark does.)
``lm_head`` (shipped when the draft vocabulary is reduced) and the target's head otherwise give
logits without a soft-cap unless the config sets ``final_logit_softcapping``. Sliding-window
layers take one window ``[anchor - W, anchor)`` for the whole block, as speculators trains them.
"""

from __future__ import annotations

from pathlib import Path

from ..drafting import BlockLayout
from ..errors import DsparkError
from ..modeldir import read_header, safetensors_files
from ..validate import Fields
from .base import EXTENSION, DraftShape, Spec
from .layers import Qwen3Layer


def read_spec(directory: Path, config: dict, names: set[str] | None = None) -> Spec:
    """``names``: the checkpoint's tensor names when it is not written yet (``dspark.export``);
    they decide whether it has an embedding and a head of its own."""
    where = directory / "config.json"
    f = Fields(config, where)
    sc = f.dict("speculators_config")
    algo = sc.get("algorithm", config.get("speculators_model_type"))
    if algo not in ("dspark", "dflash"):
        raise DsparkError(f"{where}: speculators algorithm {algo!r} is not a block drafter (dspark or dflash)")
    tl = f.dict("transformer_layer_config")
    t = Fields(tl, where)
    H, L = t.int("hidden_size"), t.int("num_hidden_layers", "draft_layers")
    heads = t.int("num_attention_heads")
    kv = t.int("num_key_value_heads", default=heads)
    hd, ffn = t.int("head_dim", default=H // heads), t.int("intermediate_size")
    eps = t.float("rms_norm_eps", "rms_norm_eps", default=1e-6)
    vocab = t.int("vocab_size")
    rope = t.dict("rope_parameters") or t.dict("rope_scaling")
    theta = t.float("rope_theta", "rope_theta", default=rope.get("rope_theta", 1e6))
    block = f.int("block_size", default=8)
    methods = sc.get("proposal_methods") or [{}]
    default_block_size = block if config.get("sample_from_anchor", algo == "dspark") else block - 1
    block_size = Fields(methods[0] if isinstance(methods[0], dict) else {}, where).int(
        "speculative_tokens", "block_size", default=default_block_size
    )
    if block - block_size not in (0, 1):
        raise DsparkError(
            f"{where}: {block_size} speculative tokens from a block of {block} slots: expected "
            f"{block} (the anchor slot predicts) or {block - 1} (it does not)"
        )
    draft_vocab = f.int("draft_vocab_size", default=vocab)
    if draft_vocab > vocab:
        raise f._fail("draft_vocab_size", draft_vocab, f"at most the vocabulary size {vocab}")
    kinds = tl.get("layer_types") or ["full_attention"] * L
    if not isinstance(kinds, list) or len(kinds) != L:
        raise t._fail("layer_types", kinds, f"{L} entries")
    use_sliding = tl.get("use_sliding_window", True) and tl.get("sliding_window")
    windows = tuple(t.int("sliding_window") if k == "sliding_attention" and use_sliding else None for k in kinds)
    # absent: speculators' config default (False), for either algorithm; full layers never causal
    causal_sliding = not f.bool("sliding_window_non_causal", default=False)
    causal = tuple(w is not None and causal_sliding for w in windows)
    rank = f.int("markov_rank", default=0)
    header = _tensor_names(directory) if names is None else names
    max_pos = t.int("max_position_embeddings", default=131072)

    def layers():
        return [
            Qwen3Layer(
                H,
                heads=heads,
                kv_heads=kv,
                head_dim=hd,
                ffn=ffn,
                eps=eps,
                rope_theta=theta,
                rope_scaling=rope or None,
                max_positions=max_pos,
            )
            for _ in range(L)
        ]

    taps = taps_of(config, f)
    notes = [] if "embed_tokens.weight" in header else ["no embed_tokens: the target's table, unscaled, as in training"]
    if any(windows):
        notes.append(
            "sliding layers see the window before the anchor, full layers everything, as in training "
            "(mlx-dspark windows every layer by each slot's position)"
        )
    layout = BlockLayout(anchor_predicts=block == block_size, windows=windows, causal=causal, window_from_anchor=True)
    return Spec(
        format="speculators",
        variant="DSpark" if algo == "dspark" else "DFlash",
        hidden=H,
        vocab=vocab,
        draft_vocab=draft_vocab,
        taps=taps,
        block_size=block_size,
        mask_token_id=f.int("mask_token_id"),
        layout=layout,
        make_layers=layers,
        eps=eps,
        own_embedding="embed_tokens.weight" in header,
        embed_scale=1.0,
        own_head="lm_head.weight" in header or draft_vocab < vocab,
        softcap=f.float("final_logit_softcapping", "softcap", default=0.0) or None,
        markov_rank=rank,
        confidence=f.bool("enable_confidence_head", default=False),
        confidence_with_markov=f.bool("confidence_head_with_markov", default=True) and rank > 0,
        d2t=draft_vocab < vocab,
        quantization=config.get("quantization"),
        notes=notes,
    )


def aux_ids(taps) -> list[int]:
    """``aux_hidden_state_layer_ids`` of a drafter tapping ``taps`` (vLLM's numbering)."""
    return [t + 1 for t in taps]


def taps_of(config: dict, f: Fields) -> tuple[int, ...]:
    """The tapped target layers of ``aux_hidden_state_layer_ids``: each id minus one, except in a
    config dspark wrote before following vLLM's numbering (its ``trained_as`` taps equal the ids)."""
    ids = f.ints("aux_hidden_state_layer_ids", "tap_layer")
    ext = config.get(EXTENSION) if isinstance(config.get(EXTENSION), dict) else {}
    trained = ext.get("trained_as") if isinstance(ext.get("trained_as"), dict) else {}
    if list(trained.get("tap_layers") or []) == list(ids):
        return tuple(ids)
    if 0 in ids:
        raise f._fail(
            "aux_hidden_state_layer_ids",
            list(ids),
            "ids of 1 or more (id 0 is the embedding, which no drafter dspark runs taps)",
        )
    return tuple(i - 1 for i in ids)


def _tensor_names(directory: Path) -> set[str]:
    names: set[str] = set()
    for f in safetensors_files(directory):
        names.update(k for k in read_header(f) if k != "__metadata__")
    return names


def new_config(shape: DraftShape, verifier: str = "") -> dict:
    """A speculators DSpark (or, without heads, DFlash) config.json for ``shape``: the anchor slot
    predicts (``sample_from_anchor``; a block of ``block_size`` slots drafts ``block_size``) unless
    ``shape.anchor_predicts`` is False (a block of ``block_size + 1`` slots, slot 0 a pure anchor),
    the verifier's embedding and head, unscaled, as speculators trains (an embedding or head of
    the drafter's own is told by its weights, a reduced vocabulary by ``draft_vocab_size`` and the
    d2t table), a context window as sliding-window layers that see ``[anchor - window, anchor)``
    and are bidirectional inside the block; the taps in vLLM's numbering (``aux_ids``)."""
    algo = "dspark" if shape.markov_rank or shape.confidence else "dflash"
    kinds = ["sliding_attention" if shape.window else "full_attention"] * shape.layers
    config = {
        "architectures": ["DSparkSpeculator" if algo == "dspark" else "DFlashSpeculator"],
        "speculators_model_type": algo,
        "speculators_config": {
            "algorithm": algo,
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": shape.block_size}],
            "verifier": {"name_or_path": verifier or None, "architectures": ["Gemma4ForCausalLM"]},
        },
        "transformer_layer_config": {
            "model_type": "qwen3",
            "hidden_size": shape.hidden,
            "num_hidden_layers": shape.layers,
            "num_attention_heads": shape.heads,
            "num_key_value_heads": shape.kv_heads,
            "head_dim": shape.head_dim,
            "intermediate_size": shape.intermediate,
            "vocab_size": shape.vocab,
            "rms_norm_eps": shape.eps,
            "rope_parameters": {"rope_theta": shape.rope_theta, "rope_type": "default"},
            "max_position_embeddings": shape.max_positions,
            "layer_types": kinds,
            "sliding_window": shape.window or None,
            "use_sliding_window": bool(shape.window),
            "attention_bias": False,
        },
        "aux_hidden_state_layer_ids": aux_ids(shape.taps),
        "block_size": shape.block_size + (not shape.anchor_predicts),
        "sample_from_anchor": shape.anchor_predicts,
        "mask_token_id": shape.mask_token_id,
        "sliding_window_non_causal": True,
        "target_hidden_size": shape.hidden,
        "draft_vocab_size": shape.draft_vocab or shape.vocab,
    }
    if shape.softcap:
        config["final_logit_softcapping"] = shape.softcap
    if algo == "dspark":
        config.update(
            markov_rank=shape.markov_rank,
            markov_head_type="vanilla",
            enable_confidence_head=shape.confidence,
            confidence_head_with_markov=shape.markov_rank > 0,
        )
    return config
