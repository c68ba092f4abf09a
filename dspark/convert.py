"""Writing a drafter in a format: ``dspark quantize`` (a 4- or 8-bit copy in mlx's layout, same
format). Every output directory is written whole or not at all (``dspark.files.staged_dir``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from .errors import DsparkError
from .files import save_safetensors, staged_dir, write_text
from .formats import native
from .loading import load_drafter, read_drafter_config
from .modeldir import safetensors_files


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
    drafter = load_drafter(p)
    before = sum(v.nbytes for _, v in tree_flatten(drafter.net.parameters()))

    def eligible(path: str, m) -> bool:
        return hasattr(m, "to_quantized") and m.weight.shape[-1] % group_size == 0

    nn.quantize(drafter.net, group_size=group_size, bits=bits, class_predicate=eligible)
    mx.eval(drafter.net.parameters())
    block = {"group_size": group_size, "bits": bits, "mode": "affine"}
    with staged_dir(out) as tmp:
        if fmt == native.FORMAT:
            drafter.quantization = block
            drafter.save(tmp)
        else:
            weights = dict(tree_flatten(drafter.net.parameters()))
            for f in safetensors_files(p):  # the vocabulary tables travel as they are
                weights.update({k: v for k, v in mx.load(str(f)).items() if k in ("d2t", "t2d")})
            save_safetensors(tmp / "model.safetensors", weights, {"format": "mlx"})
            write_text(tmp / "config.json", json.dumps({**config, "quantization": block}, indent=1) + "\n")
            for extra in ("README.md", "LICENSE"):
                if (p / extra).is_file():
                    shutil.copyfile(p / extra, tmp / extra)
    after = sum(f.stat().st_size for f in safetensors_files(out))
    return {"format": fmt, "bits": bits, "group_size": group_size, "bytes_before": before, "bytes_after": after}


__all__ = ["quantize_drafter"]
