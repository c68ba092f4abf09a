"""``dspark inspect``: what a drafter directory is, read from its files without loading a target."""

from __future__ import annotations

import json

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
    t = info["target"]
    heads = [h for h, on in (("Markov", info["markov_head"]), ("confidence", info["confidence_head"])) if on]
    lines = [
        f"{info['path']}: {info['format']} drafter" + (f" ({info['variant']})" if info.get("variant") else ""),
        f"  parameters {info['parameters']:,} ({info['bytes'] / 2**20:.1f} MiB, {info['dtype']}"
        + (f", quantized {info['quantization']['bits']}-bit" if info.get("quantization") else "")
        + ")",
        f"  block size {info['block_size']} (drafted tokens per round; the checkpoint's block has "
        f"{info['block_slots']} slots, the anchor's included); mask token {info['mask_token_id']}",
        f"  layers {info['layers']}; heads: {', '.join(heads) or 'none (DFlash-style)'}; "
        f"draft vocabulary {info['draft_vocab']}",
        f"  taps target layers {info['tap_layers']}",
        f"  needs a target with hidden size {t['hidden_size']}, vocabulary {t['vocab_size']}, "
        + (f"{t['num_layers']} layers" if t.get("num_layers") else f"at least {t.get('min_layers')} layers"),
    ]
    lines += [f"  note: {n}" for n in info.get("notes", [])]
    lines += exports_lines(info["exports"])
    print("\n".join(lines))
    return 0
