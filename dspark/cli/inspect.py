"""``dspark inspect``: what a drafter directory is, read from its files without loading a target."""

from __future__ import annotations

import json

from .say import show

HELP = "say what a drafter directory is, without loading a target"


def add_parser(subparsers):
    p = subparsers.add_parser("inspect", help=HELP)
    p.add_argument("dir", help="drafter directory or Hugging Face name")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def run(a) -> int:
    from ..export_plan import exportable, exports_lines  # noqa: PLC0415 (slow: mlx, not needed for --help)
    from ..loading import describe_drafter as describe  # noqa: PLC0415 (slow: mlx)

    info = {**describe(a.dir), "exports": exportable(a.dir)}
    if a.json:
        print(json.dumps(info))
        return 0
    lines = [
        f"{info['path']}: {info['format']} drafter ({info['kind']})",
        f"  parameters {info['parameters']:,} ({info['bytes'] / 2**20:.1f} MiB, {info['dtype']}"
        + (f", quantized {info['quantization']['bits']}-bit" if info.get("quantization") else "")
        + ")",
        *(stepwise_lines(info) if info["autoregressive"] else block_lines(info)),
    ]
    lines += [f"  note: {n}" for n in info.get("notes", [])]
    lines += exports_lines(info["exports"])
    show("\n".join(lines))
    return 0


def block_lines(info: dict) -> list[str]:
    """A block drafter: its block, mask token, heads and the target layers it taps."""
    t = info["target"]
    heads = [h for h, on in (("Markov", info["markov_head"]), ("confidence", info["confidence_head"])) if on]
    return [
        f"  drafts {info['drafting']}: block size {info['block_size']} (drafted tokens per round; the "
        f"checkpoint's block has {info['block_slots']} slots, the anchor's included)",
        f"  mask token {info['mask_token_id']}; "
        f"layers {info['layers']}; heads: {', '.join(heads) or 'none (DFlash-style)'}; "
        f"draft vocabulary {info['draft_vocab']}",
        f"  taps target layers {info['tap_layers']}",
        f"  needs a target with hidden size {t['hidden_size']}, vocabulary {t['vocab_size']}, "
        + (f"{t['num_layers']} layers" if t.get("num_layers") else f"at least {t.get('min_layers')} layers"),
    ]


def stepwise_lines(info: dict) -> list[str]:
    """An autoregressive drafter (EAGLE-3, the Gemma-4 assistant): a token a step, what it reads of
    the target, its default tokens a round; no block, mask token or Markov / confidence head."""
    t = info["target"]
    vocab = info["draft_vocab"]
    out = [
        f"  drafts {info['drafting']}",
        f"  {info['block_size']} tokens a round by default; the verify policy sets how many "
        f"(--block-size, --policy): no block, mask token, Markov or confidence head",
        f"  layers {info['layers']}{layer_kinds(info)}; draft vocabulary {vocab}"
        + (f" of the target's {t['vocab_size']} (a d2t map)" if vocab != t["vocab_size"] else " (the target's)"),
    ]
    if info.get("tap_layers"):
        out.append(f"  reads the target's hidden states after layers {info['tap_layers']} (taps)")
    needs = f"  needs a target with hidden size {t['hidden_size']}, vocabulary {t['vocab_size']}"
    if t.get("kv_head_dims"):  # the assistant reads the target's K/V: its head widths must match
        widths = ", ".join(f"{k.replace('_', ' ')} {w}" for k, w in t["kv_head_dims"].items())
        needs += f" (the Gemma-4 size it was made for), K/V heads as wide as its own ({widths})"
    elif t.get("min_layers"):
        needs += f", at least {t['min_layers']} layers"
    return [*out, needs]


def layer_kinds(info: dict) -> str:
    """ " (3 sliding, 1 full attention)" of an assistant's layers, " (llama)" of an EAGLE-3 head's."""
    kinds = info.get("layer_types")
    if kinds:
        return f" ({kinds.count('sliding_attention')} sliding, {kinds.count('full_attention')} full attention)"
    return f" ({info['layer_kind']})" if info.get("layer_kind") else ""
