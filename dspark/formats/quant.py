"""``dspark quantize DIR --bits 4|8 --out DIR``: a drafter of any format, quantized in mlx's layout
(``weight`` uint32 + ``scales`` + ``biases`` per quantized matrix, a ``quantization`` block in
config.json), written in the same format so every reader of it loads it back."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from ..checkpoint import safetensors_files
from ..errors import DsparkError
from . import read_drafter_config


def quantize_drafter(src: str | Path, out: str | Path, bits: int, group_size: int = 64) -> dict:
    """Quantize every linear / embedding matrix whose input width is a multiple of
    ``group_size``; returns what was written (for the CLI's summary line)."""
    if bits not in (4, 8):
        raise DsparkError(f"--bits must be 4 or 8, not {bits}")
    p, config, fmt = read_drafter_config(src)
    if config.get("quantization"):
        raise DsparkError(f"{p} is already quantized ({config['quantization']})")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DsparkError(f"{out} exists and is not an empty directory")
    if fmt == "dspark-drafter":
        from ..drafter import DflashDrafter

        drafter = DflashDrafter.load_native(p, config)
    else:
        from . import _module

        drafter = _module(fmt).read_spec(p, config).build(p)
    before = sum(v.nbytes for _, v in tree_flatten(drafter.net.parameters()))

    def eligible(path: str, m) -> bool:
        return hasattr(m, "to_quantized") and m.weight.shape[-1] % group_size == 0

    nn.quantize(drafter.net, group_size=group_size, bits=bits, class_predicate=eligible)
    mx.eval(drafter.net.parameters())
    block = {"group_size": group_size, "bits": bits, "mode": "affine"}
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "dspark-drafter":
        drafter.quantization = block
        drafter.save(out)
    else:
        weights = dict(tree_flatten(drafter.net.parameters()))
        for f in safetensors_files(p):  # the vocabulary tables travel as they are
            weights.update({k: v for k, v in mx.load(str(f)).items() if k in ("d2t", "t2d")})
        tmp = out / "model.tmp.safetensors"
        mx.save_safetensors(str(tmp), weights, metadata={"format": "mlx"})
        os.replace(tmp, out / "model.safetensors")
        (out / "config.json").write_text(json.dumps({**config, "quantization": block}, indent=1) + "\n")
        for extra in ("README.md", "LICENSE"):
            if (p / extra).is_file():
                shutil.copyfile(p / extra, out / extra)
    after = sum(f.stat().st_size for f in safetensors_files(out))
    return {"format": fmt, "bits": bits, "group_size": group_size, "bytes_before": before, "bytes_after": after}
